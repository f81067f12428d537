"""The alert lifecycle, as Prometheus' alerting rule runs it (rules/alerting.go, ``Eval``).

inactive -> pending (condition holds, ``for`` not yet elapsed) -> firing -> resolved (kept for
``resolved_retention`` so the resolution is still delivered) -> dropped. ``evaluate`` is pure:
it takes the previous states and this round's conditions and returns the next states plus the
transitions worth notifying, so the caller can store states and survive a restart.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from alerts.model import AlertKey, AlertState, Condition, Severity, State, Transition
from alerts.rules import RuleSpec

# Prometheus' resolvedRetention: a resolved alert is kept (and re-sent) for 15 minutes.
RESOLVED_RETENTION = timedelta(minutes=15)
SEVERITY_ANNOTATION = "severity"
_SEVERITIES = frozenset(s.value for s in Severity)


@dataclass(frozen=True, slots=True)
class Evaluation:
    """One evaluation's outcome: every state to remember, and what changed (ordered by key)."""

    states: dict[AlertKey, AlertState]
    transitions: tuple[Transition, ...]
    problems: tuple[str, ...] = ()  # bad condition input; the rules concerned were skipped


def evaluate(
    rules: Mapping[str, RuleSpec],
    conditions: Iterable[Condition],
    prior: Mapping[AlertKey, AlertState],
    now: datetime,
    *,
    evaluated_rules: Collection[str] | None = None,
    resolved_retention: timedelta = RESOLVED_RETENTION,
) -> Evaluation:
    """Advance every alert by one evaluation at ``now``.

    ``conditions`` are the label sets whose rule condition holds now; a key of ``prior`` with
    no condition has cleared. Rules outside ``evaluated_rules`` (None: all) were not evaluated
    (their data source is blind): their states are carried over unchanged and their conditions
    ignored, because missing data must not resolve an alert silently (prometheus#14085).
    States of disabled or unknown rules are dropped without a resolved notification: the user
    switched the rule off, which is not the problem going away.
    """
    live = {
        name
        for name, spec in rules.items()
        if spec.enabled and (evaluated_rules is None or name in evaluated_rules)
    }
    current, problems, broken = _collect(rules, conditions, live)
    live -= broken
    states: dict[AlertKey, AlertState] = {}
    transitions: list[Transition] = []
    for key in sorted(set(prior) | set(current)):
        spec = rules.get(key.rule)
        if spec is None or not spec.enabled:
            continue
        if key.rule not in live:
            if key in prior:
                states[key] = prior[key]
            continue
        state, transition = _step(
            spec, key, prior.get(key), current.get(key), now, resolved_retention
        )
        if state is not None:
            states[key] = state
        if transition is not None:
            transitions.append(transition)
    return Evaluation(states, tuple(transitions), tuple(problems))


def _collect(
    rules: Mapping[str, RuleSpec], conditions: Iterable[Condition], live: set[str]
) -> tuple[dict[AlertKey, Condition], list[str], set[str]]:
    """This round's conditions by final key (rule labels applied), for the live rules only."""
    current: dict[AlertKey, Condition] = {}
    problems: list[str] = []
    broken: set[str] = set()
    for condition in conditions:
        if condition.key.rule not in live:
            continue
        key = _identity(rules[condition.key.rule], condition.key)
        if key in current:
            # Prometheus fails the whole rule with ErrDuplicateAlertLabelSet; here the rule
            # counts as not evaluated, so its alerts neither fire nor resolve on bad input.
            broken.add(key.rule)
            problems.append(
                f"{key.rule}: two conditions for labels {key.label_map()} in one evaluation;"
                " the rule's alerts were left unchanged"
            )
        named = condition.annotations.get(SEVERITY_ANNOTATION)
        if named and named not in _SEVERITIES:
            problems.append(
                f"{key.rule}: unknown severity {named!r} for labels {key.label_map()};"
                f" used the rule's ({rules[key.rule].severity.value})"
            )
        current[key] = condition
    return {k: c for k, c in current.items() if k.rule not in broken}, problems, broken


def _identity(spec: RuleSpec, key: AlertKey) -> AlertKey:
    """Rule name plus labels; the rule's static labels win over the condition's, as
    Prometheus sets rule labels over the series labels."""
    if not spec.labels:
        return key
    return AlertKey.of(key.rule, {**key.label_map(), **spec.labels})


def _step(
    spec: RuleSpec,
    key: AlertKey,
    prior: AlertState | None,
    condition: Condition | None,
    now: datetime,
    retention: timedelta,
) -> tuple[AlertState | None, Transition | None]:
    if condition is not None:
        return _holds(spec, key, prior, condition, now)
    if prior is None:
        return None, None
    return _cleared(spec, prior, now, retention)


def _holds(
    spec: RuleSpec, key: AlertKey, prior: AlertState | None, condition: Condition, now: datetime
) -> tuple[AlertState, Transition | None]:
    """The condition holds: start pending, or refresh value and annotations; fire once
    ``for`` has elapsed since it became active (``ts.Sub(a.ActiveAt) >= r.holdDuration``)."""
    severity = _severity(spec, condition)
    annotations = _annotations(spec, key, condition)
    if prior is None or prior.state not in (State.PENDING, State.FIRING):
        # A resolved alert whose condition returns is a new instance (Prometheus replaces an
        # inactive entry): a fresh ``for`` timer and, later, a fresh notification.
        state = AlertState(key, State.PENDING, active_at=now, last_true_at=now)
    else:
        state = replace(prior, key=key, active_at=prior.active_at or now, last_true_at=now,
                        keep_firing_since=None)  # fmt: skip
    state = replace(state, value=condition.value, annotations=annotations, severity=severity)
    held = now - (state.active_at or now)
    if state.state is State.PENDING and held >= spec.hold:
        state = replace(state, state=State.FIRING, fired_at=now)
        return state, Transition(key, State.FIRING, now, state)
    if state.state is State.FIRING and held < spec.hold:
        # ``for`` lengthened (a reload) past how long the condition has held: back to pending
        # until it has held that long, as Prometheus does since 2026-03 (prometheus#18244).
        state = replace(state, state=State.PENDING, fired_at=None)
        return state, Transition(key, State.PENDING, now, state)
    return state, None


def _cleared(
    spec: RuleSpec, prior: AlertState, now: datetime, retention: timedelta
) -> tuple[AlertState | None, Transition | None]:
    """The condition no longer holds: drop a pending alert, resolve a firing one (unless
    keep_firing_for holds it), keep a resolved one for the retention period."""
    if prior.state is State.FIRING:
        # keep_firing_for counts from the first evaluation the condition did not hold, as
        # Prometheus' KeepFiringSince; a blind round (rule not evaluated) does not start it.
        since = prior.keep_firing_since or now
        if spec.keep_firing_for_seconds > 0 and now - since < spec.keep_firing_for:
            return replace(prior, keep_firing_since=since), None
        resolved = replace(prior, state=State.RESOLVED, resolved_at=now)
        return resolved, Transition(prior.key, State.RESOLVED, now, resolved)
    # Prometheus deletes a resolved alert once ``ts.Sub(a.ResolvedAt) > resolvedRetention``.
    if prior.state is State.RESOLVED and prior.resolved_at and now - prior.resolved_at <= retention:
        return prior, None
    return None, None  # pending never fired, so it goes back to inactive without a word


def _severity(spec: RuleSpec, condition: Condition) -> Severity:
    """The rule's severity, unless the condition names one (a budget at 100 %, a fatal Xid):
    Prometheus rules do this with a templated ``severity`` label."""
    named = condition.annotations.get(SEVERITY_ANNOTATION)
    return Severity(named) if named in _SEVERITIES else spec.severity


def _annotations(spec: RuleSpec, key: AlertKey, condition: Condition) -> dict[str, str]:
    """The condition's annotations, with the rule's summary and description where it gave none."""
    defaults = {
        "summary": spec.render_summary(key.label_map(), condition.value),
        "description": spec.description,
    }
    return {**defaults, **condition.annotations}
