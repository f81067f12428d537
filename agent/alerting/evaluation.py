"""One scope's alerting: evaluate the lifecycle, plan notifications, queue them, deliver them.

A scope is a host (its daemon evaluates that host's rules every tick) or "fleet" (the budget
rules, evaluated once a minute). ``evaluate`` makes the whole decision in one transaction (see
``agent.alerting.store``); ``deliver`` sends what the outbox holds, oldest first, and records each
attempt. Retryable failures back off exponentially (or as Retry-After says) until delivered or
until ``give_up_after``; a non-retryable one is recorded with its reason and not tried again.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, Protocol

from sqlalchemy import Engine

from agent.alerting import store as alert_store
from agent.alerting.local_outbox import LocalOutbox
from agent.config.alerts import AlertsConfig
from agent.config.settings import Config
from alerts import dedup
from alerts.alertmanager import DEFAULT_RESEND_INTERVAL, AlertmanagerNotifier
from alerts.dedup import Plan, Route
from alerts.duration import format_duration
from alerts.inhibit import DEFAULT_INHIBIT_RULES, InhibitRule
from alerts.lifecycle import Evaluation, evaluate
from alerts.model import AlertKey, AlertState, Condition, State
from alerts.notification_codec import notification_from_json
from alerts.notify import Notifier, SendResult
from alerts.rules import RuleSpec
from alerts.silence import Silence
from alerts.webhook import WebhookNotifier
from foundation.retry import Backoff

log = logging.getLogger(__name__)

FLEET = "fleet"
# Waits between delivery attempts: from 10 s (a blip passes), capped at 5 min (a notification
# is still timely); the jitter and Retry-After rules are Backoff's.
OUTBOX_BACKOFF = Backoff(base_seconds=10.0, cap_seconds=300.0)
KEEP_FINISHED = timedelta(days=7)  # delivered / failed outbox rows kept to explain deliveries


class Mark(Protocol):
    """Records a delivery attempt in an outbox (the database's, or the local one)."""

    def __call__(
        self,
        row_id: int,
        status: str,
        now: datetime,
        *,
        attempts: int,
        error: str | None = ...,
        next_attempt_at: datetime | None = ...,
    ) -> None: ...


@dataclass(frozen=True, slots=True)
class Receiver:
    notifier: Notifier
    route: Route


def build_receivers(config: Config) -> tuple[Receiver, ...]:
    """The configured notifiers with their routes. Raises NotifyError on bad settings."""
    notify, route = config.notify, config.alerts.route
    receivers = []

    def routed(name: str) -> Route:
        return Route(
            name, route.group_by, route.group_wait, route.group_interval,
            route.repeat_interval, route.send_resolved,
        )  # fmt: skip

    slack = notify.slack
    if slack.webhook_url is not None or slack.token is not None:
        # Imported only where Slack is configured: slack_sdk is 2 MB of every daemon's memory.
        from alerts.slack import SlackNotifier

        notifier = SlackNotifier(
            "slack",
            webhook_url=slack.webhook_url.reveal() if slack.webhook_url else None,
            token=slack.token.reveal() if slack.token else None,
            channel=slack.channel if slack.token else None,
        )
        receivers.append(Receiver(notifier, routed("slack")))
    if notify.webhook.url is not None:
        token = notify.webhook.bearer_token
        hook = WebhookNotifier(
            "webhook", notify.webhook.url.reveal(), bearer_token=token.reveal() if token else None
        )
        receivers.append(Receiver(hook, routed("webhook")))
    if notify.alertmanager.url is not None:
        receivers.append(Receiver(AlertmanagerNotifier("alertmanager", notify.alertmanager.url),
                                  alertmanager_route(config.daemon.interval_seconds)))  # fmt: skip
    return tuple(receivers)


def alertmanager_route(interval_seconds: float) -> Route:
    """Alertmanager groups, waits and repeats by itself; what it needs from a sender is every
    firing alert again at least once per resend interval (or it resolves them on its own, see
    ``alerts.alertmanager``), and changes at once."""
    step = timedelta(seconds=max(interval_seconds, 1.0))
    return Route(
        "alertmanager",
        group_wait=timedelta(0),
        group_interval=step,
        repeat_interval=max(DEFAULT_RESEND_INTERVAL - step, step),
        send_resolved=True,
    )


@dataclass(frozen=True, slots=True)
class Delivery:
    """What one ``deliver`` call did, for logs and tests."""

    delivered: int = 0
    retrying: int = 0
    failed: int = 0
    expired: int = 0

    def __add__(self, other: Delivery) -> Delivery:
        return Delivery(
            self.delivered + other.delivered,
            self.retrying + other.retrying,
            self.failed + other.failed,
            self.expired + other.expired,
        )


@dataclass
class Alerting:
    engine: Engine
    scope: str
    rules: Mapping[str, RuleSpec]
    receivers: Sequence[Receiver]
    give_up_after: timedelta = timedelta(hours=6)
    inhibit_rules: Sequence[InhibitRule] = DEFAULT_INHIBIT_RULES
    jitter: Callable[[], float] = field(default=random.random)
    # What this process last committed for its scope. A host's scope has one writer, its own
    # daemon, so the next tick need not read it back; the fleet scope changes hands with the
    # lead, so it is always read (see ``_remembered``).
    _memory: alert_store.Remembered | None = field(default=None, repr=False)
    # Where notifications go while the database is away (a host scope's daemon has one).
    local: LocalOutbox | None = None
    # Evaluations made from memory during an outage, written with the next one that reaches
    # the database; the silences last read, which an outage's evaluations go on applying.
    _journal: list[alert_store.Unsaved] = field(default_factory=list, repr=False)
    _silences: Sequence[Silence] = field(default=(), repr=False)
    _generation: int = field(default=0, repr=False)  # evaluations from memory so far
    # The tick's evaluation may outlive its deadline on a hung database while the next tick
    # evaluates from memory: the two meet only under this lock, never across database calls.
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @classmethod
    def for_scope(
        cls,
        engine: Engine,
        scope: str,
        alerts: AlertsConfig,
        receivers: Sequence[Receiver],
        rule_names: Collection[str],
    ) -> Alerting:
        rules = {n: s for n, s in alerts.rules.items() if n in rule_names}
        return cls(engine, scope, rules, receivers, alerts.give_up_after)

    @property
    def routes(self) -> tuple[Route, ...]:
        return tuple(r.route for r in self.receivers)

    def evaluate(
        self, conditions: Iterable[Condition], evaluated: Collection[str], now: datetime
    ) -> tuple[Evaluation, Plan]:
        """Advance the lifecycle, decide what to notify and queue it, in one transaction; with
        it, what evaluations made during an outage left to write (``evaluate_offline``)."""
        with self._lock:
            memory, journal, generation = self._memory, tuple(self._journal), self._generation
        finished = self._local_finished()
        try:
            with self.engine.begin() as conn:
                memory = memory if self.scope != FLEET and memory else None
                memory = memory or alert_store.remembered(conn, self.scope)
                alert_store.save_unsaved(conn, self.scope, journal)
                alert_store.import_outbox(conn, finished)
                self._silences = alert_store.load_silences(conn)
                result, states, plan = self._decide(conditions, evaluated, memory, now)
                alert_store.save_evaluation(
                    conn, self.scope, states, plan, now, now + self.give_up_after,
                    result.transitions, before=None if journal else memory,
                )  # fmt: skip
        except BaseException:
            with self._lock:  # committed or not is unknown: read back next time, if we may
                if not self._journal and self._generation == generation:
                    self._memory = None
            raise
        with self._lock:
            # An evaluation from memory ran meanwhile (this one outlived its deadline): its
            # states are newer than this commit's and its journal rewrites them next time.
            if self._generation == generation:
                self._memory = alert_store.after(memory, states, plan)
            del self._journal[: len(journal)]
        if self.local is not None and finished:
            self.local.remove([int(r["id"]) for r in finished])
        self._log(result)
        return replace(result, states=states), plan

    def evaluate_offline(
        self, conditions: Iterable[Condition], evaluated: Collection[str], now: datetime
    ) -> tuple[Evaluation, Plan]:
        """``evaluate`` while the database is away: from the states this process last knew
        (none, when it started during the outage) and the silences it last read; the
        notifications go to the local outbox and the rest waits in memory for the database."""
        if self.local is None:
            raise RuntimeError(f"alert scope {self.scope} has no local outbox")
        with self._lock:
            memory = self._memory or alert_store.Remembered({}, {}, {})
            result, states, plan = self._decide(conditions, evaluated, memory, now)
            for n in plan.notifications:
                self.local.add(self.scope, n, now, now + self.give_up_after)
            transitions = tuple((t, states.get(t.key, t.alert)) for t in result.transitions)
            entries = (*(n.entry for n in plan.notifications), *plan.log_only)
            self._journal.append(alert_store.Unsaved(transitions, entries))
            self._memory = alert_store.after(memory, states, plan)
            self._generation += 1
        self._log(result)
        return replace(result, states=states), plan

    @property
    def unsaved(self) -> int:
        """Evaluations made from memory that the database has not taken yet."""
        with self._lock:
            return len(self._journal)

    def _decide(
        self,
        conditions: Iterable[Condition],
        evaluated: Collection[str],
        memory: alert_store.Remembered,
        now: datetime,
    ) -> tuple[Evaluation, dict[AlertKey, AlertState], Plan]:
        result = evaluate(self.rules, conditions, memory.states, now, evaluated_rules=evaluated)
        states = {k: describe(s, now) for k, s in result.states.items()}
        return result, states, _plan(self, states.values(), memory, self._silences, now)

    def _local_finished(self) -> list[dict[str, Any]]:
        """The local outbox's finished rows, for the database's outbox. Pending ones stay and
        are delivered from there: moving a row the delivery job may be sending would send it
        twice."""
        if self.local is None or self.local.empty:
            return []
        return [r for r in self.local.rows() if r["status"] != alert_store.PENDING]

    def _log(self, result: Evaluation) -> None:
        for problem in result.problems:
            log.warning("alert rules: %s", problem)
        for t in result.transitions:
            log.info("alert %s %s: %s", t.key.rule, t.to.value, t.alert.annotations.get("summary"))

    def states(self) -> tuple[AlertState, ...]:
        """The states this process last decided (empty before its first evaluation)."""
        with self._lock:
            return tuple(self._memory.states.values()) if self._memory else ()

    def deliver(self, now: datetime, *, database: bool = True) -> Delivery:
        """Send every due notification of this scope once: the local outbox's first, then,
        unless ``database`` is False (it is away), the database's. Never raises for a failed
        send; raises SQLAlchemyError when the database does not answer."""
        counts = {"delivered": 0, "retrying": 0, "failed": 0, "expired": 0}
        notifiers = {r.notifier.name: r.notifier for r in self.receivers}
        local = self.local
        if local is not None and not local.empty:
            for row in local.due(self.scope, now):
                counts[self._attempt(row, notifiers.get(row.receiver), now, local.mark)] += 1
        if database:
            with self.engine.connect() as conn:
                rows = alert_store.due(conn, self.scope, now)
            for row in rows:
                counts[self._attempt(row, notifiers.get(row.receiver), now, self._mark)] += 1
            with self.engine.begin() as conn:
                alert_store.prune_outbox(conn, now - KEEP_FINISHED)
        return Delivery(**counts)

    def _mark(self, row_id: int, status: str, now: datetime, **attempt: Any) -> None:
        with self.engine.begin() as conn:
            alert_store.mark(conn, row_id, status, now, **attempt)

    def _attempt(
        self, row: alert_store.OutboxRow, notifier: Notifier | None, now: datetime, mark: Mark
    ) -> str:
        attempts = row.attempts + 1
        if now >= row.expires_at:
            return _finish(mark, row, alert_store.EXPIRED, now, row.attempts, row.last_error)
        if notifier is None:
            reason = f"receiver {row.receiver} is no longer configured"
            return _finish(mark, row, alert_store.FAILED, now, row.attempts, reason)
        try:
            notification = notification_from_json(row.payload)
        except ValueError as exc:
            return _finish(mark, row, alert_store.FAILED, now, row.attempts, str(exc))
        result = notifier.send(notification, now)
        if result.ok:
            return _finish(mark, row, alert_store.DELIVERED, now, attempts, None)
        if not result.retryable:
            log.error("notification to %s failed for good: %s", row.receiver, result.reason)
            return _finish(mark, row, alert_store.FAILED, now, attempts, result.reason)
        return self._retry(row, result, now, attempts, mark)

    def _retry(
        self,
        row: alert_store.OutboxRow,
        result: SendResult,
        now: datetime,
        attempts: int,
        mark: Mark,
    ) -> str:
        seconds = OUTBOX_BACKOFF.wait(attempts, self.jitter(), result.retry_after_seconds)
        wait = timedelta(seconds=seconds)
        if now + wait >= row.expires_at:
            log.error(
                "notification to %s given up after %d attempts: %s",
                row.receiver, attempts, result.reason,
            )  # fmt: skip
            return _finish(mark, row, alert_store.EXPIRED, now, attempts, result.reason)
        log.warning(
            "notification to %s failed (attempt %d), retrying in %s: %s",
            row.receiver, attempts, format_duration(wait.total_seconds()), result.reason,
        )  # fmt: skip
        mark(row.id, alert_store.PENDING, now, attempts=attempts, error=result.reason,
             next_attempt_at=now + wait)  # fmt: skip
        return "retrying"


def _finish(
    mark: Mark,
    row: alert_store.OutboxRow,
    status: str,
    now: datetime,
    attempts: int,
    error: str | None,
) -> str:
    mark(row.id, status, now, attempts=attempts, error=error)
    return status


def _plan(
    alerting: Alerting,
    states: Iterable[AlertState],
    memory: alert_store.Remembered,
    silences: Sequence[Silence],
    now: datetime,
) -> Plan:
    return dedup.plan(
        states,
        alerting.routes,
        memory.log,
        silences,
        alerting.inhibit_rules,
        now,
        memory.first_seen,
    )


def describe(state: AlertState, now: datetime) -> AlertState:
    """GpuIdle's message says how long the GPU has idled and what that cost, which only the
    lifecycle knows (the condition sees one round): rewritten at each evaluation, so the
    notification carries the figures of the moment it is sent."""
    rate = state.annotations.get("usd_per_hour")
    if state.key.rule != "GpuIdle" or rate is None or state.active_at is None:
        return state
    if state.state not in (State.PENDING, State.FIRING):
        return state
    seconds = (now - state.active_at).total_seconds()
    burnt = float(rate) * seconds / 3600
    where = ", ".join(f"{k}={v}" for k, v in state.key.labels)
    value = f"{state.value:.0%}" if state.value is not None else "n/a"
    # The condition names its measure and basis (SM activity or NVML's busy flag).
    activity = state.annotations.get("activity", f"utilization {value}")
    summary = (
        f"GPU idle ({where}): {activity} for {format_duration(round(seconds))},"
        f" ${burnt:.2f} burnt at ${float(rate):.2f}/h"
    )
    annotations = {**state.annotations, "summary": summary, "idle_usd": f"{burnt:.2f}"}
    return replace(state, annotations=annotations)
