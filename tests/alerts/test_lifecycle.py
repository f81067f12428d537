"""The Prometheus alert lifecycle with an injected clock: every time is T0 plus literal seconds,
every evaluation is a plain function call, nothing sleeps or reads a clock."""

from __future__ import annotations

import json
import random
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from alerts.lifecycle import Evaluation, evaluate
from alerts.model import AlertKey, AlertState, Condition, Severity, State, Transition
from alerts.rules import DEFAULT_RULES, RuleSpec
from alerts.state_codec import from_row, to_row

T0 = datetime(2025, 1, 1, tzinfo=UTC)
HOT = AlertKey.of("GpuHot", {"gpu": "0", "instance": "box1"})
HOT1 = AlertKey.of("GpuHot", {"gpu": "1", "instance": "box1"})
IDLE = AlertKey.of("GpuIdle", {"gpu": "0", "instance": "box1"})


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def rules(**changes: Any) -> dict[str, RuleSpec]:
    """The defaults with GpuHot changed as given (its default: for 2m, critical)."""
    hot = replace(DEFAULT_RULES["GpuHot"], **changes)
    return {**DEFAULT_RULES, "GpuHot": hot}


def hot(value: float = 90.0, key: AlertKey = HOT, **annotations: str) -> Condition:
    return Condition(key, value, {"summary": f"hot {value}", **annotations})


@dataclass
class Box:
    """A daemon's view: rules, stored states, and every transition it would have notified."""

    rules: dict[str, RuleSpec]
    restart_between: bool = False  # round-trip every state through the codec, as a restart
    states: dict[AlertKey, AlertState] = field(default_factory=dict)
    sent: list[Transition] = field(default_factory=list)

    def tick(
        self,
        t: float,
        *conditions: Condition,
        evaluated: Collection[str] | None = None,
    ) -> Evaluation:
        prior = self.states
        if self.restart_between:
            prior = {s.key: from_row(to_row(s)) for s in prior.values()}
        result = evaluate(self.rules, conditions, prior, at(t), evaluated_rules=evaluated)
        self.states = result.states
        self.sent.extend(result.transitions)
        return result


def summary(ts: Iterable[Transition]) -> list[tuple[str, State, float]]:
    return [(t.key.rule, t.to, (t.at - T0).total_seconds()) for t in ts]


# --- the lifecycle, step by step ---------------------------------------------------------


def test_pending_then_firing_then_resolved_with_exact_timestamps() -> None:
    box = Box(rules(for_seconds=120))
    result = box.tick(0, hot(88))
    pending = AlertState(
        HOT,
        State.PENDING,
        active_at=at(0),
        last_true_at=at(0),
        value=88,
        annotations={"summary": "hot 88", "description": DEFAULT_RULES["GpuHot"].description},
        severity=Severity.CRITICAL,
    )
    assert result == Evaluation({HOT: pending}, ())
    assert box.tick(60, hot(89)).transitions == ()
    assert box.states[HOT].state is State.PENDING
    assert box.states[HOT].active_at == at(0)
    assert box.states[HOT].value == 89

    result = box.tick(120, hot(91))
    firing = replace(
        pending,
        state=State.FIRING,
        fired_at=at(120),
        last_true_at=at(120),
        value=91,
        annotations={**pending.annotations, "summary": "hot 91"},
    )
    assert result.states == {HOT: firing}
    assert result.transitions == (Transition(HOT, State.FIRING, at(120), firing),)
    assert box.tick(180, hot(92)).transitions == ()  # still firing: no second notification

    result = box.tick(240)
    resolved = replace(
        firing,
        state=State.RESOLVED,
        resolved_at=at(240),
        last_true_at=at(180),
        value=92,
        annotations={**pending.annotations, "summary": "hot 92"},
    )
    assert result.states == {HOT: resolved}
    assert result.transitions == (Transition(HOT, State.RESOLVED, at(240), resolved),)
    assert box.tick(300).transitions == ()  # resolved once
    assert summary(box.sent) == [("GpuHot", State.FIRING, 120), ("GpuHot", State.RESOLVED, 240)]


def test_for_zero_fires_on_the_first_evaluation() -> None:
    box = Box(rules(for_seconds=0))
    result = box.tick(7, hot())
    state = result.states[HOT]
    assert (state.state, state.active_at, state.fired_at) == (State.FIRING, at(7), at(7))
    assert result.transitions == (Transition(HOT, State.FIRING, at(7), state),)


def test_a_condition_flapping_during_pending_resets_the_timer() -> None:
    box = Box(rules(for_seconds=120))
    box.tick(0, hot())
    box.tick(60, hot())
    result = box.tick(90)  # cleared before ``for`` elapsed: back to inactive, silently
    assert result == Evaluation({}, ())
    box.tick(100, hot())
    assert box.states[HOT].active_at == at(100)
    assert box.tick(200, hot()).transitions == ()  # would have fired at 120 without the flap
    assert summary(box.tick(220, hot()).transitions) == [("GpuHot", State.FIRING, 220)]


def test_keep_firing_for_holds_through_a_gap_then_resolves() -> None:
    box = Box(rules(for_seconds=0, keep_firing_for_seconds=120))
    box.tick(0, hot(90))
    # Cleared, but held for 2 m from the first evaluation that did not hold (Prometheus'
    # KeepFiringSince: 30 here, not the last true one at 0).
    for t in (30, 60, 90):
        result = box.tick(t)
        assert result.transitions == ()
        assert result.states[HOT].state is State.FIRING
        assert result.states[HOT].value == 90
    assert box.tick(30).states[HOT].keep_firing_since == T0 + timedelta(seconds=30)
    box.tick(100, hot(95))  # back during the hold: the same alert, no new notification
    box.tick(130)  # false again: the hold starts over from here
    assert box.tick(249).states[HOT].state is State.FIRING
    result = box.tick(250)
    assert summary(result.transitions) == [("GpuHot", State.RESOLVED, 250)]
    assert summary(box.sent) == [("GpuHot", State.FIRING, 0), ("GpuHot", State.RESOLVED, 250)]


def test_keep_firing_for_does_not_hold_a_pending_alert() -> None:
    box = Box(rules(for_seconds=120, keep_firing_for_seconds=600))
    box.tick(0, hot())
    assert box.tick(60) == Evaluation({}, ())


def test_resolved_is_kept_for_the_retention_then_dropped_silently() -> None:
    box = Box(rules(for_seconds=0))
    box.tick(0, hot())
    box.tick(10)  # resolved at 10
    assert box.tick(10 + 15 * 60).states[HOT].state is State.RESOLVED  # exactly 15 m: kept
    assert box.tick(10 + 15 * 60 + 1) == Evaluation({}, ())
    assert summary(box.sent) == [("GpuHot", State.FIRING, 0), ("GpuHot", State.RESOLVED, 10)]


def test_resolved_retention_is_a_parameter() -> None:
    resolved = AlertState(HOT, State.RESOLVED, at(0), at(0), at(0), at(0))
    keep = evaluate(rules(), [], {HOT: resolved}, at(60), resolved_retention=timedelta(minutes=1))
    drop = evaluate(rules(), [], {HOT: resolved}, at(61), resolved_retention=timedelta(minutes=1))
    assert (keep.states, drop.states) == ({HOT: resolved}, {})


def test_a_resolved_alert_whose_condition_returns_is_a_new_instance() -> None:
    box = Box(rules(for_seconds=60))
    box.tick(0, hot())
    box.tick(60, hot())  # fires
    box.tick(120)  # resolves
    result = box.tick(130, hot(99))
    state = result.states[HOT]
    assert (state.state, state.active_at, state.fired_at, state.resolved_at) == (
        State.PENDING,
        at(130),
        None,
        None,
    )
    box.tick(190, hot())
    assert summary(box.sent) == [
        ("GpuHot", State.FIRING, 60),
        ("GpuHot", State.RESOLVED, 120),
        ("GpuHot", State.FIRING, 190),
    ]


def test_identity_is_rule_plus_labels() -> None:
    box = Box(rules(for_seconds=0))
    box.tick(0, hot(key=HOT), hot(key=HOT1), Condition(IDLE, 0.01))
    box.tick(10, hot(key=HOT1), Condition(IDLE, 0.01))
    assert summary(box.sent) == [
        ("GpuHot", State.FIRING, 0),
        ("GpuHot", State.FIRING, 0),
        ("GpuHot", State.RESOLVED, 10),
    ]
    assert [t.key for t in box.sent] == [HOT, HOT1, HOT]
    assert box.states[IDLE].state is State.PENDING  # GpuIdle has its own 30 m ``for``


def test_static_rule_labels_join_the_identity_and_win_over_the_condition_s() -> None:
    box = Box(rules(for_seconds=0, labels={"team": "ml", "instance": "renamed"}))
    box.tick(0, hot())
    key = AlertKey.of("GpuHot", {"gpu": "0", "instance": "renamed", "team": "ml"})
    assert list(box.states) == [key]
    assert box.sent[0].key == key == box.sent[0].alert.key
    assert box.tick(10, hot()).transitions == ()  # the same alert on the next round


def test_value_annotations_and_severity_come_from_the_latest_condition() -> None:
    box = Box(rules(for_seconds=600))
    box.tick(0, hot(86, runbook="r1"))
    result = box.tick(10, hot(87, severity="page"))
    state = result.states[HOT]
    assert state.value == 87
    assert state.annotations == {
        "summary": "hot 87",
        "severity": "page",
        "description": DEFAULT_RULES["GpuHot"].description,
    }
    assert state.severity is Severity.PAGE
    assert box.tick(20, hot(88)).states[HOT].severity is Severity.CRITICAL  # the rule's again


def test_rule_summary_and_description_fill_in_when_the_condition_gives_none() -> None:
    result = evaluate(rules(), [Condition(HOT, 91.2)], {}, at(0))
    assert result.states[HOT].annotations == {
        "summary": "GPU hot (gpu=0, instance=box1): 91 C, limit 85 C",
        "description": DEFAULT_RULES["GpuHot"].description,
    }


def test_an_unknown_severity_annotation_falls_back_to_the_rule_s_and_is_reported() -> None:
    result = evaluate(rules(), [hot(severity="urgent")], {}, at(0))
    assert result.states[HOT].severity is Severity.CRITICAL
    assert result.problems == (
        "GpuHot: unknown severity 'urgent' for labels {'gpu': '0', 'instance': 'box1'};"
        " used the rule's (critical)",
    )


def test_duplicate_label_sets_leave_the_rule_unchanged_as_prometheus_fails_it() -> None:
    firing = AlertState(HOT1, State.FIRING, at(0), at(0), last_true_at=at(0))
    result = evaluate(rules(), [hot(), hot(91), Condition(IDLE, 0.0)], {HOT1: firing}, at(10))
    assert result.states[HOT1] == firing  # neither resolved nor touched
    assert HOT not in result.states
    assert result.states[IDLE].state is State.PENDING  # other rules go on
    assert result.transitions == ()
    assert len(result.problems) == 1
    assert result.problems[0].startswith("GpuHot: two conditions for labels")


def test_identical_inputs_give_identical_outputs_in_key_order() -> None:
    keys = [
        AlertKey.of(rule, {"gpu": str(g)}) for rule in ("GpuHot", "TargetDown") for g in range(5)
    ]
    zero = {name: replace(spec, for_seconds=0) for name, spec in DEFAULT_RULES.items()}
    shuffled = keys[:]
    random.Random(4).shuffle(shuffled)
    one = evaluate(zero, [Condition(k, 1.0) for k in keys], {}, at(0))
    two = evaluate(zero, [Condition(k, 1.0) for k in shuffled], {}, at(0))
    assert one == two
    assert [t.key for t in one.transitions] == sorted(keys)
    assert list(one.states) == sorted(keys)


# --- blind rules, disabled rules ----------------------------------------------------------


def test_a_rule_not_evaluated_keeps_its_alerts_untouched() -> None:
    box = Box(rules(for_seconds=0))
    box.tick(0, hot(key=HOT), Condition(IDLE, 0.0))
    before = dict(box.states)
    others = set(DEFAULT_RULES) - {"GpuHot", "GpuIdle"}
    # Blind for an hour: no conditions, no resolution, the pending GpuIdle timer not dropped.
    for t in range(10, 3600, 10):
        assert box.tick(t, evaluated=others).transitions == ()
    assert box.states == before
    # Conditions of a rule declared not evaluated are ignored, not half-applied.
    assert box.tick(3600, hot(key=HOT1), evaluated=others).states == before
    # Seeing again: the hot GPU has cooled (resolves), the idle one still idles (fires at once,
    # its 30 m ``for`` having elapsed since active_at).
    result = box.tick(3610, Condition(IDLE, 0.0))
    assert summary(result.transitions) == [
        ("GpuHot", State.RESOLVED, 3610),
        ("GpuIdle", State.FIRING, 3610),
    ]


def test_a_disabled_rule_drops_its_alerts_without_a_resolved_notification() -> None:
    box = Box(rules(for_seconds=0))
    box.tick(0, hot(), Condition(IDLE, 0.0))
    box.rules = rules(enabled=False)
    result = box.tick(10, hot(), Condition(IDLE, 0.0))
    assert list(result.states) == [IDLE]
    assert result.transitions == ()
    box.rules = rules(for_seconds=0)  # enabled again: a new alert, notified anew
    assert summary(box.tick(20, hot()).transitions) == [("GpuHot", State.FIRING, 20)]


def test_states_of_a_rule_no_longer_known_are_dropped_silently() -> None:
    gone = AlertKey.of("RetiredRule", {"gpu": "0"})
    prior = {gone: AlertState(gone, State.FIRING, at(0), at(0), last_true_at=at(0))}
    assert evaluate(DEFAULT_RULES, [Condition(gone)], prior, at(10)) == Evaluation({}, ())


# --- restarts -----------------------------------------------------------------------------


def test_a_restart_neither_renotifies_nor_forgets_a_pending_timer() -> None:
    script: list[tuple[float, list[Condition]]] = [
        (0, [hot(key=HOT)]),
        (60, [hot(key=HOT), hot(key=HOT1)]),
        (120, [hot(key=HOT), hot(key=HOT1)]),  # HOT fires (0 + 2 m)
        (150, [hot(key=HOT), hot(key=HOT1)]),
        (180, [hot(key=HOT1)]),  # HOT1 fires (60 + 2 m), HOT resolves
        (240, [hot(key=HOT1)]),
        (300, []),
    ]
    plain, restarted = Box(rules()), Box(rules(), restart_between=True)
    for t, conditions in script:
        plain.tick(t, *conditions)
        restarted.tick(t, *conditions)
    assert restarted.sent == plain.sent
    assert [(t.key, t.to, (t.at - T0).total_seconds()) for t in restarted.sent] == [
        (HOT, State.FIRING, 120),
        (HOT, State.RESOLVED, 180),  # ordered by key within one evaluation
        (HOT1, State.FIRING, 180),
        (HOT1, State.RESOLVED, 300),
    ]
    assert restarted.states == plain.states


def test_a_long_downtime_keeps_the_pending_timer_from_before() -> None:
    box = Box(rules(for_seconds=600), restart_between=True)
    box.tick(0, hot())
    box.tick(300, hot())
    # The daemon is down from 300 to 900 s; the stored timer fires at 0 + 10 m, not 900 + 10 m.
    assert summary(box.tick(900, hot()).transitions) == [("GpuHot", State.FIRING, 900)]
    assert box.states[HOT].active_at == at(0)


def full_state() -> AlertState:
    return AlertState(
        AlertKey.of("GpuHot", {"gpu": "0", "host": 'bôx "1"', "a": ""}),
        State.RESOLVED,
        active_at=at(0),
        fired_at=at(120),
        resolved_at=at(300),
        last_true_at=at(290),
        value=91.25,
        annotations={"summary": "GPU 0 hot — 91 °C", "runbook": "https://x/y?z=1"},
        severity=Severity.PAGE,
    )


def test_the_codec_round_trip_is_exact_and_json_safe() -> None:
    state = full_state()
    row = to_row(state)
    assert from_row(row) == state
    assert row["labels"] == '{"a":"","gpu":"0","host":"bôx \\"1\\""}'
    assert row["state"] == "resolved" and row["severity"] == "page"
    assert row["fired_at"] == at(120)
    # Every column but the datetimes survives JSON (a JSON column, a message queue).
    plain = {k: v for k, v in row.items() if not isinstance(v, datetime)}
    assert json.loads(json.dumps(plain)) == plain
    bare = AlertState(AlertKey.of("TargetDown", {}), State.PENDING)
    assert from_row(to_row(bare)) == bare


def test_the_codec_reads_sqlite_naive_datetimes_as_utc_and_decoded_json() -> None:
    row = to_row(full_state())
    row["active_at"] = datetime(2025, 1, 1)
    row["labels"] = {"gpu": "0", "host": 'bôx "1"', "a": ""}
    row["value"] = 91
    state = from_row(row)
    assert state.active_at == at(0)
    assert state.key == full_state().key
    assert state.value == 91.0


@pytest.mark.parametrize(
    ("column", "bad", "message"),
    [
        ("rule", "", "rule must be a non-empty string"),
        ("labels", "{not json", "labels is not JSON"),
        ("labels", '{"gpu": 0}', "labels must be a JSON object of strings"),
        ("annotations", "[]", "annotations must be a JSON object of strings"),
        ("state", "burning", "state must be one of inactive, pending, firing, resolved"),
        ("severity", None, "severity must be one of info, warning, critical, page"),
        ("fired_at", "2025-01-01", "fired_at must be a datetime or None"),
        ("value", "hot", "value must be a number or None"),
        ("value", True, "value must be a number or None"),
    ],
)
def test_the_codec_names_the_bad_column(column: str, bad: object, message: str) -> None:
    row = to_row(full_state())
    row[column] = bad
    with pytest.raises(ValueError, match=f"alert row: {message}"):
        from_row(row)


# --- the promise: ``for`` plus at most one evaluation interval ---------------------

INTERVAL = 10.0


@pytest.mark.parametrize("name", sorted(DEFAULT_RULES))
@pytest.mark.parametrize("starts_after", [0.001, 3.7, 9.999])
def test_notification_arrives_within_for_plus_one_interval(name: str, starts_after: float) -> None:
    # Evaluations every 10 s; the condition becomes true between two of them and clears later.
    spec = DEFAULT_RULES[name]
    key = AlertKey.of(name, {"gpu": "0"})
    became_true = 600 + starts_after
    cleared = became_true + spec.for_seconds + 600 + starts_after
    box = Box(dict(DEFAULT_RULES))
    for t in (i * INTERVAL for i in range(int((cleared + 20 * 60) // INTERVAL))):
        box.tick(t, *([Condition(key, 1.0)] if became_true <= t < cleared else []))
    fired = [x.at for x in box.sent if x.to is State.FIRING]
    resolved = [x.at for x in box.sent if x.to is State.RESOLVED]
    assert len(fired) == 1 and len(resolved) == 1
    delay = (fired[0] - at(became_true)).total_seconds()
    assert spec.for_seconds <= delay <= spec.for_seconds + INTERVAL
    assert 0 <= (resolved[0] - at(cleared)).total_seconds() <= INTERVAL
    assert box.states == {}  # resolved retention has passed
