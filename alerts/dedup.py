"""The notification plan, as Alertmanager makes it: group, wait, mute, then dedup.

Alertmanager's pipeline is dispatch/ (aggregation groups and their group_wait / group_interval
timers) -> inhibit -> silence -> notify/dedup_stage.go (``needsUpdate`` against the notification
log) -> send -> record in nflog/. Here the same steps are one pure function, ``plan``, run at
every evaluation with ``now``: the timers become comparisons against the group's first-seen time
and the last send, and the notification log is a mapping the agent stores (``SentEntry``).

The agent sends each ``Notification`` and, once delivered, stores its ``entry`` in the log;
``Plan.log_only`` entries are stored without sending anything (see ``Reason.ALL_RESOLVED``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import Enum

from alerts.inhibit import ALERTNAME, InhibitRule, inhibited_by
from alerts.model import AlertKey, AlertState, State
from alerts.silence import Silence, silenced_by


class Reason(Enum):
    """Why a group or alert is (not) notified; the first six are needsUpdate's outcomes."""

    FIRST_NOTIFICATION = "first_notification"
    NEW_ALERTS_IN_GROUP = "new_alerts_in_group"
    SOME_RESOLVED = "some_resolved"  # Alertmanager's ReasonNewResolvedAlerts
    ALL_RESOLVED = "all_resolved"
    REPEAT_INTERVAL_ELAPSED = "repeat_interval_elapsed"
    DO_NOT_NOTIFY = "do_not_notify"
    WAITING = "waiting"  # group_wait (new group) or group_interval (since last send) not over
    SILENCED = "silenced"
    INHIBITED = "inhibited"

    @property
    def notifies(self) -> bool:
        """Whether the notification log must be updated (NotifyReason.shouldNotify)."""
        return self in _NOTIFYING


_NOTIFYING = frozenset(
    {
        Reason.FIRST_NOTIFICATION,
        Reason.NEW_ALERTS_IN_GROUP,
        Reason.SOME_RESOLVED,
        Reason.ALL_RESOLVED,
        Reason.REPEAT_INTERVAL_ELAPSED,
    }
)


@dataclass(frozen=True, slots=True)
class Route:
    """One receiver and its timers; defaults are Alertmanager's."""

    receiver: str
    group_by: tuple[str, ...] = (ALERTNAME, "host")
    group_wait: timedelta = timedelta(seconds=30)
    group_interval: timedelta = timedelta(minutes=5)
    repeat_interval: timedelta = timedelta(hours=4)
    send_resolved: bool = True

    def __post_init__(self) -> None:
        # Alertmanager's config rejects zero group_interval / repeat_interval: they would
        # notify at every evaluation.
        if not self.receiver:
            raise ValueError("a route needs a receiver name")
        if self.group_wait < timedelta(0):
            raise ValueError(f"group_wait must not be negative, got {self.group_wait}")
        for name in ("group_interval", "repeat_interval"):
            if getattr(self, name) <= timedelta(0):
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")


@dataclass(frozen=True, slots=True, order=True)
class GroupKey:
    """Receiver plus the values of the route's group_by labels that the alerts carry."""

    receiver: str
    labels: tuple[tuple[str, str], ...]

    def __str__(self) -> str:
        inner = ",".join(f'{k}="{v}"' for k, v in self.labels)
        return f"{self.receiver}:{{{inner}}}"


@dataclass(frozen=True, slots=True)
class SentEntry:
    """The notification log's record of one group: what the receiver was last told, and when."""

    group: GroupKey
    sent_at: datetime
    firing: frozenset[AlertKey]
    resolved: frozenset[AlertKey]


@dataclass(frozen=True, slots=True)
class Notification:
    group: GroupKey
    receiver: str
    firing: tuple[AlertState, ...]
    # Resolutions of alerts last sent as firing; always empty without send_resolved.
    resolved: tuple[AlertState, ...]
    reason: Reason
    entry: SentEntry  # store in the log once delivered (nflog is written after the send)


@dataclass(frozen=True, slots=True)
class Decision:
    """One group's (``key`` None) or one alert's outcome at this evaluation, to explain it."""

    group: GroupKey
    key: AlertKey | None
    reason: Reason
    wait_until: datetime | None = None  # WAITING: when the group's timer is over
    silenced_by: tuple[str, ...] = ()
    inhibited_by: str | None = None


@dataclass(frozen=True, slots=True)
class Plan:
    notifications: tuple[Notification, ...]
    decisions: tuple[Decision, ...]
    group_first_seen: Mapping[GroupKey, datetime]  # store and pass back at the next evaluation
    log_only: tuple[SentEntry, ...] = ()  # store in the log now; nothing to deliver


def needs_update(
    entry: SentEntry | None,
    firing: frozenset[AlertKey],
    resolved: frozenset[AlertKey],
    repeat: timedelta,
    send_resolved: bool,
    now: datetime,
) -> Reason:
    """dedup_stage.go ``needsUpdate``, branch for branch (the non-mute-aware version)."""
    # Never notified about this group: notify right away, unless all we have is resolved
    # alerts, which the receiver never heard fire.
    if entry is None:
        return Reason.FIRST_NOTIFICATION if firing else Reason.DO_NOT_NOTIFY
    # Something fires that the receiver was not told about.
    if not firing <= entry.firing:
        # The last entry had nothing firing: it closed the group with a resolution, so this
        # starts a new story for the receiver rather than adding to an old one.
        return Reason.NEW_ALERTS_IN_GROUP if entry.firing else Reason.FIRST_NOTIFICATION
    if not firing:
        # Everything resolved. Decided regardless of send_resolved, so that the log's firing
        # set is cleared (otherwise the next firing would look like an old one). If the log had
        # nothing firing either, the alerts fired and resolved between two flushes and the
        # receiver, who never heard of them, need not hear that they ended.
        return Reason.ALL_RESOLVED if entry.firing else Reason.DO_NOT_NOTIFY
    if send_resolved and not resolved <= entry.resolved:
        return Reason.SOME_RESOLVED
    # Nothing changed: only remind once repeat_interval has passed. Strictly before, as
    # `entry.Timestamp.Before(now.Add(-repeat))`.
    if entry.sent_at < now - repeat:
        return Reason.REPEAT_INTERVAL_ELAPSED
    return Reason.DO_NOT_NOTIFY


@dataclass(frozen=True, slots=True)
class _Alert:
    """An alert as the plan sees it: its labels with alertname, and why it is muted."""

    state: AlertState
    labels: Mapping[str, str]
    inhibited_by: str | None
    silenced_by: tuple[str, ...]

    @property
    def firing(self) -> bool:
        return self.state.state is State.FIRING

    @property
    def muted(self) -> bool:
        return self.inhibited_by is not None or bool(self.silenced_by)

    @property
    def muted_reason(self) -> Reason | None:
        # Alertmanager runs the inhibit stage before the silence stage, so inhibition wins.
        if self.inhibited_by is not None:
            return Reason.INHIBITED
        return Reason.SILENCED if self.silenced_by else None


def plan(
    alerts: Iterable[AlertState],
    routes: Sequence[Route],
    log: Mapping[GroupKey, SentEntry],
    silences: Iterable[Silence],
    inhibit_rules: Iterable[InhibitRule],
    now: datetime,
    group_first_seen: Mapping[GroupKey, datetime],
) -> Plan:
    """What to send to whom at ``now``, and why every group and alert is or is not notified.

    Every alert goes to every route (one per receiver). Only FIRING and RESOLVED alerts take
    part; PENDING and INACTIVE ones are never notified. RESOLVED alerts must stay in
    ``alerts`` until notified (the lifecycle's resolved retention), as in Alertmanager.
    """
    _check_receivers(routes)
    prepared = _prepare(alerts, tuple(silences), tuple(inhibit_rules), now)
    notifications: list[Notification] = []
    decisions: list[Decision] = []
    log_only: list[SentEntry] = []
    first_seen: dict[GroupKey, datetime] = {}
    for route in routes:
        for group, members in _groups(route, prepared).items():
            if any(a.firing for a in members):
                # The group_wait clock: dispatch/ creates an aggregation group when its first
                # alert arrives and drops it once empty. Our RESOLVED states linger (resolved
                # retention), so "empty" here is "nothing fires": a group that fires again
                # after its resolution waits group_wait anew, as a fresh group would.
                first_seen[group] = group_first_seen.get(group, now)
            outcome = _decide(route, group, members, log.get(group), first_seen.get(group), now)
            decisions.extend(outcome.decisions)
            if outcome.notification is not None:
                notifications.append(outcome.notification)
            if outcome.log_only is not None:
                log_only.append(outcome.log_only)
    return Plan(tuple(notifications), tuple(decisions), first_seen, tuple(log_only))


def _check_receivers(routes: Sequence[Route]) -> None:
    names = [r.receiver for r in routes]
    if len(set(names)) != len(names):
        # Group keys and log entries are per receiver; two routes sharing one would overwrite
        # each other's notification log.
        raise ValueError(f"one route per receiver, got {names}")


def _prepare(
    alerts: Iterable[AlertState],
    silences: tuple[Silence, ...],
    rules: tuple[InhibitRule, ...],
    now: datetime,
) -> tuple[_Alert, ...]:
    notifiable = sorted(
        (a for a in alerts if a.state in (State.FIRING, State.RESOLVED)), key=lambda a: a.key
    )
    labelled = [(a, _labels(a.key)) for a in notifiable]
    # Only firing alerts inhibit: inhibit.go skips resolved sources. Muted sources still
    # inhibit, as in Alertmanager (a silenced CollectorDown still explains the GPU alerts).
    sources = tuple(labels for a, labels in labelled if a.state is State.FIRING)
    return tuple(
        _Alert(a, labels, inhibited_by(labels, sources, rules), silenced_by(labels, silences, now))
        for a, labels in labelled
    )


def _labels(key: AlertKey) -> dict[str, str]:
    # The rule name is the alertname, so silences, inhibit rules and group_by can name it.
    return {**key.label_map(), ALERTNAME: key.rule}


def _groups(route: Route, alerts: tuple[_Alert, ...]) -> dict[GroupKey, list[_Alert]]:
    groups: dict[GroupKey, list[_Alert]] = {}
    for alert in alerts:
        # Like dispatch/ getGroupLabels: only the group_by labels the alert actually has.
        values = tuple(
            sorted((n, alert.labels[n]) for n in set(route.group_by) & alert.labels.keys())
        )
        groups.setdefault(GroupKey(route.receiver, values), []).append(alert)
    return dict(sorted(groups.items()))


@dataclass(frozen=True, slots=True)
class _Outcome:
    decisions: tuple[Decision, ...]
    notification: Notification | None = None
    log_only: SentEntry | None = None


def _decide(
    route: Route,
    group: GroupKey,
    members: list[_Alert],
    entry: SentEntry | None,
    first_seen: datetime | None,
    now: datetime,
) -> _Outcome:
    visible = [a for a in members if not a.muted]
    if not visible:
        # Alertmanager's MultiStage stops once a mute stage leaves no alerts: dedup never runs
        # and the log is not touched, so unmuting later is compared with what was last sent.
        return _Outcome(_explain(group, members, _all_muted_reason(members)))
    wait_until = _wait_until(route, entry, first_seen)
    if wait_until is not None and now < wait_until:
        return _Outcome(_explain(group, members, Reason.WAITING, wait_until=wait_until))
    firing = tuple(a.state for a in visible if a.firing)
    resolved = tuple(a.state for a in visible if not a.firing)
    reason = needs_update(
        entry, _keys(firing), _keys(resolved), route.repeat_interval, route.send_resolved, now
    )
    if not reason.notifies:
        return _Outcome(_explain(group, members, reason))
    shown = _resolved_to_show(route, entry, resolved)
    decisions = _explain(group, members, reason, shown=_keys(firing + shown))
    # The log records every visible resolved alert, sent or not, as SetNotifiesStage does, so
    # that an unsent resolution does not trigger SOME_RESOLVED at every later flush.
    sent = SentEntry(group, now, _keys(firing), _keys(resolved))
    if not firing and not shown:
        # ALL_RESOLVED with nothing to show (send_resolved off): deliver nothing, but the log
        # must still close the group's story, as dedup_stage.go's comment says.
        return _Outcome(decisions, log_only=sent)
    note = Notification(group, route.receiver, firing, shown, reason, sent)
    return _Outcome(decisions, notification=note)


def _resolved_to_show(
    route: Route, entry: SentEntry | None, resolved: tuple[AlertState, ...]
) -> tuple[AlertState, ...]:
    """The resolutions the receiver should read: those of alerts it was last told were firing.

    Alertmanager gets the same effect by deleting a resolved alert from its aggregation group
    after the flush that carried it (dispatch/ DeleteIfNotModified); our lifecycle keeps
    RESOLVED states for a while instead, so without this a resolution would be repeated
    (alertmanager#844, #1125), and one whose firing was never sent would appear out of
    nowhere (#878: it fired and resolved within group_wait).
    """
    if not route.send_resolved or entry is None:
        return ()
    return tuple(s for s in resolved if s.key in entry.firing)


def _all_muted_reason(members: list[_Alert]) -> Reason:
    # The inhibit stage runs first: the group is INHIBITED if that stage alone emptied it.
    if all(a.inhibited_by is not None for a in members):
        return Reason.INHIBITED
    return Reason.SILENCED


def _wait_until(
    route: Route, entry: SentEntry | None, first_seen: datetime | None
) -> datetime | None:
    """When the group may next flush; None when it may flush now."""
    if entry is not None and entry.firing:
        # The receiver has an open story for this group: updates wait group_interval after the
        # last send, so a burst of new alerts becomes one message, not one per evaluation.
        return entry.sent_at + route.group_interval
    if first_seen is not None:
        # A new group (or one whose last message closed it) waits group_wait, so alerts that
        # start together (a GPU falling off the bus trips several rules) arrive together.
        return first_seen + route.group_wait
    return None  # nothing fires and nothing is open: needs_update will say DO_NOT_NOTIFY


def _keys(states: Iterable[AlertState]) -> frozenset[AlertKey]:
    return frozenset(s.key for s in states)


def _explain(
    group: GroupKey,
    members: list[_Alert],
    reason: Reason,
    *,
    wait_until: datetime | None = None,
    shown: frozenset[AlertKey] = frozenset(),
) -> tuple[Decision, ...]:
    head = Decision(group, None, reason, wait_until)
    return (head, *(_alert_decision(group, a, reason, wait_until, shown) for a in members))


def _alert_decision(
    group: GroupKey,
    alert: _Alert,
    reason: Reason,
    wait_until: datetime | None,
    shown: frozenset[AlertKey],
) -> Decision:
    own = alert.muted_reason or reason
    if own.notifies and alert.state.key not in shown:
        # The group notifies but this alert is not in the message: a resolution the
        # receiver does not take (send_resolved off) or was already told about.
        own = Reason.DO_NOT_NOTIFY
    until = wait_until if own is Reason.WAITING else None
    return Decision(group, alert.state.key, own, until, alert.silenced_by, alert.inhibited_by)
