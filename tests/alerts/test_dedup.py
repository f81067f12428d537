"""The notification plan: needsUpdate's branches, the group timers, silences and inhibition."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest

from alerts.dedup import (
    Decision,
    GroupKey,
    Plan,
    Reason,
    Route,
    SentEntry,
    needs_update,
    plan,
)
from alerts.inhibit import DEFAULT_INHIBIT_RULES, InhibitRule
from alerts.model import AlertKey, AlertState, State
from alerts.silence import Matcher, Silence

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
S = timedelta(seconds=1)
M = timedelta(minutes=1)
H = timedelta(hours=1)
REPEAT = 4 * H

A = AlertKey.of("GpuHot", {"host": "box-a", "gpu": "0"})
B = AlertKey.of("GpuHot", {"host": "box-a", "gpu": "1"})
GROUP = GroupKey("slack", (("alertname", "GpuHot"), ("host", "box-a")))


def _entry(
    firing: Iterable[AlertKey], resolved: Iterable[AlertKey] = (), at: datetime = T0
) -> SentEntry:
    return SentEntry(GROUP, at, frozenset(firing), frozenset(resolved))


# --- needs_update: one case per branch of dedup_stage.go needsUpdate -------------------------


@pytest.mark.parametrize(
    ("entry", "firing", "resolved", "send_resolved", "now", "reason"),
    [
        pytest.param(None, {A}, set(), True, T0, Reason.FIRST_NOTIFICATION, id="never-sent"),
        pytest.param(
            None, set(), {A}, True, T0, Reason.DO_NOT_NOTIFY, id="never-sent-only-resolved"
        ),
        pytest.param(
            _entry({A}), {A, B}, set(), True, T0, Reason.NEW_ALERTS_IN_GROUP, id="new-alert"
        ),
        pytest.param(
            _entry((), {A}), {B}, set(), True, T0, Reason.FIRST_NOTIFICATION, id="after-closed"
        ),
        pytest.param(_entry({A}), set(), {A}, True, T0, Reason.ALL_RESOLVED, id="all-resolved"),
        pytest.param(
            _entry({A}), set(), {A}, False, T0, Reason.ALL_RESOLVED, id="all-resolved-quiet"
        ),
        pytest.param(_entry(()), set(), {A}, True, T0, Reason.DO_NOT_NOTIFY, id="fired-and-gone"),
        pytest.param(_entry({A, B}), {A}, {B}, True, T0, Reason.SOME_RESOLVED, id="some-resolved"),
        pytest.param(_entry({A, B}), {A}, {B}, False, T0, Reason.DO_NOT_NOTIFY, id="some-quiet"),
        pytest.param(
            _entry({A, B}, {B}), {A}, {B}, True, T0, Reason.DO_NOT_NOTIFY, id="resolved-told"
        ),
        pytest.param(_entry({A, B}), {A}, set(), True, T0 + M, Reason.DO_NOT_NOTIFY, id="subset"),
        pytest.param(
            _entry({A}), {A}, set(), True, T0 + REPEAT, Reason.DO_NOT_NOTIFY, id="at-repeat"
        ),
        pytest.param(
            _entry({A}),
            {A},
            set(),
            True,
            T0 + REPEAT + S,
            Reason.REPEAT_INTERVAL_ELAPSED,
            id="repeat",
        ),
    ],
)
def test_needs_update_branches(
    entry: SentEntry | None,
    firing: set[AlertKey],
    resolved: set[AlertKey],
    send_resolved: bool,
    now: datetime,
    reason: Reason,
) -> None:
    got = needs_update(entry, frozenset(firing), frozenset(resolved), REPEAT, send_resolved, now)
    assert got is reason


# --- plan: a small harness that plays the agent's part -----------------------------------------


def _alert(key: AlertKey, state: State = State.FIRING) -> AlertState:
    return AlertState(key, state, active_at=T0, fired_at=T0)


@dataclass
class Agent:
    """Runs ``plan`` and stores what it says to store, as the agent does after delivering."""

    routes: Sequence[Route] = (Route("slack"),)
    silences: tuple[Silence, ...] = ()
    rules: tuple[InhibitRule, ...] = DEFAULT_INHIBIT_RULES
    log: dict[GroupKey, SentEntry] = field(default_factory=dict)
    first_seen: dict[GroupKey, datetime] = field(default_factory=dict)

    def tick(self, now: datetime, *alerts: AlertState) -> Plan:
        result = plan(
            alerts, self.routes, self.log, self.silences, self.rules, now, self.first_seen
        )
        for note in result.notifications:
            self.log[note.group] = note.entry
        for entry in result.log_only:
            self.log[entry.group] = entry
        self.first_seen = dict(result.group_first_seen)
        return result


def _group_reason(p: Plan, group: GroupKey = GROUP) -> Reason:
    (decision,) = [d for d in p.decisions if d.group == group and d.key is None]
    return decision.reason


def _alert_decision(p: Plan, key: AlertKey, group: GroupKey = GROUP) -> Decision:
    (decision,) = [d for d in p.decisions if d.group == group and d.key == key]
    return decision


def _sent(p: Plan) -> list[tuple[Reason, list[AlertKey], list[AlertKey]]]:
    return [
        (n.reason, [s.key for s in n.firing], [s.key for s in n.resolved]) for n in p.notifications
    ]


def test_the_whole_sequence() -> None:
    agent = Agent()
    # A new group waits group_wait before its first notification.
    p = agent.tick(T0, _alert(A))
    assert _group_reason(p) is Reason.WAITING
    assert _alert_decision(p, A).wait_until == T0 + 30 * S
    assert p.notifications == () and agent.first_seen == {GROUP: T0}
    assert _sent(agent.tick(T0 + 29 * S, _alert(A))) == []
    assert _sent(agent.tick(T0 + 30 * S, _alert(A))) == [(Reason.FIRST_NOTIFICATION, [A], [])]
    first = T0 + 30 * S
    # Nothing changed: no repeat before repeat_interval, one after it.
    assert _sent(agent.tick(first + 5 * M, _alert(A))) == []
    assert _group_reason(agent.tick(first + REPEAT, _alert(A))) is Reason.DO_NOT_NOTIFY
    p = agent.tick(first + REPEAT + S, _alert(A))
    assert _sent(p) == [(Reason.REPEAT_INTERVAL_ELAPSED, [A], [])]
    repeated = first + REPEAT + S
    # A new alert in the group waits group_interval since the last send.
    p = agent.tick(repeated + M, _alert(A), _alert(B))
    assert _group_reason(p) is Reason.WAITING
    assert _alert_decision(p, B).wait_until == repeated + 5 * M
    p = agent.tick(repeated + 5 * M, _alert(A), _alert(B))
    assert _sent(p) == [(Reason.NEW_ALERTS_IN_GROUP, [A, B], [])]
    added = repeated + 5 * M
    # B resolves: sent once, after group_interval, alongside what still fires.
    assert _sent(agent.tick(added + M, _alert(A), _alert(B, State.RESOLVED))) == []
    p = agent.tick(added + 5 * M, _alert(A), _alert(B, State.RESOLVED))
    assert _sent(p) == [(Reason.SOME_RESOLVED, [A], [B])]
    some = added + 5 * M
    p = agent.tick(some + 10 * M, _alert(A), _alert(B, State.RESOLVED))
    assert _group_reason(p) is Reason.DO_NOT_NOTIFY
    # A resolves too: all resolved, sent once, without repeating B's resolution.
    p = agent.tick(some + 15 * M, _alert(A, State.RESOLVED), _alert(B, State.RESOLVED))
    assert _sent(p) == [(Reason.ALL_RESOLVED, [], [A])]
    assert agent.first_seen == {}  # nothing fires: the group's wait clock is dropped
    p = agent.tick(some + 30 * M, _alert(A, State.RESOLVED), _alert(B, State.RESOLVED))
    assert _sent(p) == [] and _group_reason(p) is Reason.DO_NOT_NOTIFY


def test_without_send_resolved_resolutions_are_never_sent() -> None:
    agent = Agent(routes=(Route("slack", send_resolved=False),))
    agent.tick(T0, _alert(A), _alert(B))
    assert _sent(agent.tick(T0 + 30 * S, _alert(A), _alert(B))) == [
        (Reason.FIRST_NOTIFICATION, [A, B], [])
    ]
    p = agent.tick(T0 + 10 * M, _alert(A), _alert(B, State.RESOLVED))
    assert _group_reason(p) is Reason.DO_NOT_NOTIFY and p.notifications == ()
    p = agent.tick(T0 + 20 * M, _alert(A, State.RESOLVED), _alert(B, State.RESOLVED))
    # The log is still closed (dedup_stage.go decides ALL_RESOLVED regardless of send_resolved),
    # but nothing is delivered.
    assert _group_reason(p) is Reason.ALL_RESOLVED
    assert _alert_decision(p, A).reason is Reason.DO_NOT_NOTIFY
    assert p.notifications == ()
    assert p.log_only == (SentEntry(GROUP, T0 + 20 * M, frozenset(), frozenset({A, B})),)
    # A firing again starts a new story: group_wait, then a first notification.
    later = T0 + 30 * M
    assert _group_reason(agent.tick(later, _alert(A))) is Reason.WAITING
    assert _sent(agent.tick(later + 30 * S, _alert(A))) == [(Reason.FIRST_NOTIFICATION, [A], [])]


def test_repeat_with_send_resolved_off_still_lists_only_firing() -> None:
    agent = Agent(routes=(Route("slack", send_resolved=False),), log={GROUP: _entry({A, B})})
    p = agent.tick(T0 + REPEAT + S, _alert(A), _alert(B, State.RESOLVED))
    assert _sent(p) == [(Reason.REPEAT_INTERVAL_ELAPSED, [A], [])]
    assert p.notifications[0].entry.resolved == frozenset({B})


def test_a_spike_within_group_wait_sends_no_resolution_out_of_nowhere() -> None:
    # alertmanager#878: A fired and resolved before group_wait; B's first message omits A.
    agent = Agent()
    agent.tick(T0, _alert(A))
    p = agent.tick(T0 + 30 * S, _alert(A, State.RESOLVED), _alert(B))
    assert _sent(p) == [(Reason.FIRST_NOTIFICATION, [B], [])]
    assert _alert_decision(p, A).reason is Reason.DO_NOT_NOTIFY
    assert agent.log[GROUP].resolved == frozenset({A})
    assert _sent(agent.tick(T0 + 10 * M, _alert(A, State.RESOLVED), _alert(B))) == []


def test_only_resolved_alerts_never_start_a_group() -> None:
    p = Agent().tick(T0, _alert(A, State.RESOLVED))
    assert _group_reason(p) is Reason.DO_NOT_NOTIFY
    assert p.notifications == () and p.group_first_seen == {}


def test_pending_and_inactive_alerts_are_never_notified() -> None:
    p = Agent().tick(T0 + H, _alert(A, State.PENDING), _alert(B, State.INACTIVE))
    assert p.decisions == () and p.notifications == ()


def test_group_wait_zero_sends_at_once() -> None:
    agent = Agent(routes=(Route("slack", group_wait=timedelta(0)),))
    assert _sent(agent.tick(T0, _alert(A))) == [(Reason.FIRST_NOTIFICATION, [A], [])]


def test_grouping_by_alertname_and_host_and_every_route() -> None:
    other_host = AlertKey.of("GpuHot", {"host": "box-b", "gpu": "0"})
    other_rule = AlertKey.of("GpuIdle", {"host": "box-a", "gpu": "0"})
    routes = (
        Route("slack", group_wait=timedelta(0)),
        Route("pager", group_by=("host",), group_wait=timedelta(0)),
    )
    p = Agent(routes=routes).tick(T0, _alert(A), _alert(B), _alert(other_host), _alert(other_rule))
    groups = {n.group: [s.key for s in n.firing] for n in p.notifications}
    assert groups == {
        GROUP: [A, B],
        GroupKey("slack", (("alertname", "GpuHot"), ("host", "box-b"))): [other_host],
        GroupKey("slack", (("alertname", "GpuIdle"), ("host", "box-a"))): [other_rule],
        GroupKey("pager", (("host", "box-a"),)): [A, B, other_rule],
        GroupKey("pager", (("host", "box-b"),)): [other_host],
    }
    assert all(n.receiver == n.group.receiver for n in p.notifications)


def test_group_by_a_label_the_alert_lacks_groups_without_it() -> None:
    no_host = AlertKey.of("BudgetExceeded", {"model": "llama"})
    p = Agent(routes=(Route("slack", group_wait=timedelta(0)),)).tick(T0, _alert(no_host))
    assert [n.group for n in p.notifications] == [
        GroupKey("slack", (("alertname", "BudgetExceeded"),))
    ]
    assert str(p.notifications[0].group) == 'slack:{alertname="BudgetExceeded"}'


def test_two_routes_for_one_receiver_are_refused() -> None:
    with pytest.raises(ValueError, match="one route per receiver"):
        plan([], (Route("slack"), Route("slack")), {}, (), (), T0, {})


@pytest.mark.parametrize(
    "kwargs",
    [
        {"receiver": ""},
        {"receiver": "x", "group_wait": -S},
        {"receiver": "x", "group_interval": timedelta(0)},
        {"receiver": "x", "repeat_interval": timedelta(0)},
    ],
)
def test_route_validation(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        Route(**kwargs)  # type: ignore[arg-type]


# --- silences ---------------------------------------------------------------------------------


def _silence(matcher: Matcher, hours: int = 2) -> Silence:
    return Silence("s1", (matcher,), T0, T0 + hours * H, "ops", "maintenance")


def test_a_silenced_group_sends_nothing_until_the_silence_ends() -> None:
    agent = Agent(silences=(_silence(Matcher("host", "box-a")),))
    p = agent.tick(T0, _alert(A))
    assert _group_reason(p) is Reason.SILENCED
    assert _alert_decision(p, A).silenced_by == ("s1",)
    assert _sent(agent.tick(T0 + H, _alert(A))) == []
    assert agent.log == {}
    # Expired (just after its end instant, which still mutes, as in Alertmanager): the alert
    # is notified then (its group_wait ran out long ago).
    p = agent.tick(T0 + 2 * H + S, _alert(A))
    assert _sent(p) == [(Reason.FIRST_NOTIFICATION, [A], [])]


def test_a_silenced_alert_is_left_out_and_notified_when_unsilenced() -> None:
    agent = Agent(silences=(_silence(Matcher("gpu", "1")),))
    agent.tick(T0, _alert(A), _alert(B))
    p = agent.tick(T0 + 30 * S, _alert(A), _alert(B))
    assert _sent(p) == [(Reason.FIRST_NOTIFICATION, [A], [])]
    assert _alert_decision(p, B).reason is Reason.SILENCED
    assert agent.log[GROUP].firing == frozenset({A})
    agent.silences = (agent.silences[0].expire(T0 + H),)
    p = agent.tick(T0 + H + S, _alert(A), _alert(B))  # the next evaluation after the expiry
    assert _sent(p) == [(Reason.NEW_ALERTS_IN_GROUP, [A, B], [])]


def test_silencing_everything_after_a_send_does_not_claim_resolution() -> None:
    agent = Agent(log={GROUP: _entry({A})}, first_seen={GROUP: T0})
    agent.silences = (Silence("s1", (Matcher("host", "box-a"),), T0 + H, T0 + 2 * H, "", ""),)
    p = agent.tick(T0 + H, _alert(A))
    assert _group_reason(p) is Reason.SILENCED and p.notifications == () and p.log_only == ()
    assert agent.first_seen == {GROUP: T0}  # still firing, so the group lives on
    # After the silence, nothing changed for the receiver: no message until the repeat.
    assert _group_reason(agent.tick(T0 + 2 * H + S, _alert(A))) is Reason.DO_NOT_NOTIFY
    assert _sent(agent.tick(T0 + REPEAT + S, _alert(A))) == [
        (Reason.REPEAT_INTERVAL_ELAPSED, [A], [])
    ]


# --- inhibition -------------------------------------------------------------------------------

DOWN_A = AlertKey.of("CollectorDown", {"host": "box-a", "collector": "nvml"})
DOWN_B = AlertKey.of("CollectorDown", {"host": "box-b", "collector": "nvml"})


def test_collector_down_inhibits_gpu_alerts_on_its_host_only() -> None:
    hot_b = AlertKey.of("GpuHot", {"host": "box-b", "gpu": "0"})
    agent = Agent(routes=(Route("slack", group_wait=timedelta(0)),))
    p = agent.tick(T0, _alert(DOWN_A), _alert(A), _alert(hot_b))
    assert _group_reason(p) is Reason.INHIBITED
    assert _alert_decision(p, A).inhibited_by == "CollectorDown"
    sent = {n.group: [s.key for s in n.firing] for n in p.notifications}
    assert sent == {
        GroupKey("slack", (("alertname", "CollectorDown"), ("host", "box-a"))): [DOWN_A],
        GroupKey("slack", (("alertname", "GpuHot"), ("host", "box-b"))): [hot_b],
    }


def test_collector_down_does_not_inhibit_itself_in_the_plan() -> None:
    agent = Agent(routes=(Route("slack", group_wait=timedelta(0)),))
    p = agent.tick(T0, _alert(DOWN_A), _alert(DOWN_B))
    assert sorted(s.key for n in p.notifications for s in n.firing) == [DOWN_A, DOWN_B]


def test_a_resolved_collector_down_inhibits_nothing() -> None:
    agent = Agent(routes=(Route("slack", group_wait=timedelta(0)),))
    p = agent.tick(T0, _alert(DOWN_A, State.RESOLVED), _alert(A))
    assert _sent(p) == [(Reason.FIRST_NOTIFICATION, [A], [])]


def test_a_group_partly_inhibited_partly_silenced_reads_silenced() -> None:
    agent = Agent(
        routes=(Route("slack", group_wait=timedelta(0)),),
        silences=(_silence(Matcher("gpu", "1")),),
        rules=(InhibitRule({"alertname": "CollectorDown"}, {"gpu": "0"}, ("host",)),),
    )
    p = agent.tick(T0, _alert(DOWN_A), _alert(A), _alert(B))
    assert _group_reason(p) is Reason.SILENCED
    assert _alert_decision(p, A).reason is Reason.INHIBITED
    assert _alert_decision(p, B).reason is Reason.SILENCED
