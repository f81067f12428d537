"""Alert states, notification groups and log, the outbox and silences, in the database.

One evaluation is one transaction (``save_evaluation``): the new alert states, the groups'
first-seen times, the notification log and the notifications to send are written together, so
a daemon killed at any point either made the whole decision or none of it. The outbox rows are
then delivered outside the transaction and marked one by one (``mark``): a notification is
recorded before it is sent, and its delivery after.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, RowMapping, and_, delete, insert, select, update

from alerts.dedup import GroupKey, Notification, Plan, SentEntry
from alerts.model import AlertKey, AlertState, State, Transition
from alerts.notification_codec import (
    alert_keys,
    alert_keys_json,
    group_key,
    group_labels,
    notification_json,
)
from alerts.silence import Silence, parse_matcher
from alerts.state_codec import from_row, to_row
from migrations.schema import (
    alert_groups,
    alert_history,
    alert_states,
    notification_log,
    outbox,
    silences,
)

PENDING, DELIVERED, FAILED, EXPIRED = "pending", "delivered", "failed", "expired"


@dataclass(frozen=True, slots=True)
class Remembered:
    """What the previous evaluation of a scope left behind."""

    states: dict[AlertKey, AlertState]
    first_seen: dict[GroupKey, datetime]
    log: dict[GroupKey, SentEntry]


@dataclass(frozen=True, slots=True)
class OutboxRow:
    id: int
    scope: str
    receiver: str
    group: GroupKey
    payload: str
    created_at: datetime
    expires_at: datetime
    attempts: int
    status: str
    last_error: str | None
    finished_at: datetime | None


def remembered(conn: Connection, scope: str) -> Remembered:
    states = {}
    for row in conn.execute(select(alert_states).where(alert_states.c.scope == scope)).mappings():
        state = from_row(dict(row))
        states[state.key] = state
    first_seen = {
        group_key(r.receiver, r.group_labels): r.first_seen
        for r in conn.execute(select(alert_groups).where(alert_groups.c.scope == scope))
    }
    log = {}
    query = select(notification_log).where(notification_log.c.scope == scope)
    for r in conn.execute(query):
        group = group_key(r.receiver, r.group_labels)
        log[group] = SentEntry(group, r.sent_at, alert_keys(r.firing), alert_keys(r.resolved))
    return Remembered(states, first_seen, log)


def save_evaluation(
    conn: Connection,
    scope: str,
    states: Mapping[AlertKey, AlertState],
    plan: Plan,
    now: datetime,
    expires_at: datetime,
    transitions: Iterable[Transition] = (),
    before: Remembered | None = None,
) -> list[int]:
    """Replace the scope's states and groups, record the transitions in the history, log the
    plan's entries and queue its notifications; returns the outbox ids, in delivery order.
    ``before``: what the database holds now, when known; unchanged tables are not rewritten
    (a healthy box evaluates every tick with nothing to change)."""
    for transition in transitions:
        _history(conn, scope, transition, states.get(transition.key, transition.alert))
    if before is None or before.states != states:
        conn.execute(delete(alert_states).where(alert_states.c.scope == scope))
        if states:
            rows = [{"scope": scope, **to_row(s)} for s in states.values()]
            conn.execute(insert(alert_states), rows)
    if before is None or before.first_seen != plan.group_first_seen:
        _save_groups(conn, scope, plan)
    for entry in (*(n.entry for n in plan.notifications), *plan.log_only):
        _log(conn, scope, entry)
    return [_enqueue(conn, scope, n, now, expires_at) for n in plan.notifications]


def after(before: Remembered, states: Mapping[AlertKey, AlertState], plan: Plan) -> Remembered:
    """What the database holds once ``save_evaluation`` of ``plan`` has committed."""
    log = dict(before.log)
    for entry in (*(n.entry for n in plan.notifications), *plan.log_only):
        log[entry.group] = entry
    return Remembered(dict(states), dict(plan.group_first_seen), log)


@dataclass(frozen=True, slots=True)
class Unsaved:
    """An evaluation made while the database was away (``Alerting.evaluate_offline``): what
    ``save_evaluation`` would have added to the history and the notification log. The states
    and groups are written whole when the database returns, and the notifications come from
    the local outbox (agent.alerting.local_outbox)."""

    transitions: tuple[tuple[Transition, AlertState], ...]
    log: tuple[SentEntry, ...]


def save_unsaved(conn: Connection, scope: str, journal: Iterable[Unsaved]) -> None:
    for unsaved in journal:
        for transition, state in unsaved.transitions:
            _history(conn, scope, transition, state)
        for entry in unsaved.log:
            _log(conn, scope, entry)


def _save_groups(conn: Connection, scope: str, plan: Plan) -> None:
    conn.execute(delete(alert_groups).where(alert_groups.c.scope == scope))
    if plan.group_first_seen:
        rows = [
            {"scope": scope, "receiver": g.receiver, "group_labels": group_labels(g),
             "first_seen": at}
            for g, at in plan.group_first_seen.items()
        ]  # fmt: skip
        conn.execute(insert(alert_groups), rows)


def _history(conn: Connection, scope: str, t: Transition, state: AlertState) -> None:
    labels = to_row(state)["labels"]
    if t.to is State.FIRING:
        summary = state.annotations.get("summary", "")
        conn.execute(
            insert(alert_history).values(
                scope=scope, rule=t.key.rule, labels=labels, severity=state.severity.value,
                fired_at=t.at, resolved_at=None, summary=summary,
            )
        )  # fmt: skip
        return
    conn.execute(
        update(alert_history)
        .where(
            alert_history.c.scope == scope,
            alert_history.c.rule == t.key.rule,
            alert_history.c.labels == labels,
            alert_history.c.resolved_at.is_(None),
        )
        .values(resolved_at=t.at)
    )


def _log(conn: Connection, scope: str, entry: SentEntry) -> None:
    """The notification log is written when the notification is queued, not when delivered:
    the outbox owns delivery from here, and an entry written later would let the next
    evaluation decide to send the same thing again while the first is still being retried."""
    where = and_(
        notification_log.c.scope == scope,
        notification_log.c.receiver == entry.group.receiver,
        notification_log.c.group_labels == group_labels(entry.group),
    )
    conn.execute(delete(notification_log).where(where))
    conn.execute(
        insert(notification_log).values(
            scope=scope,
            receiver=entry.group.receiver,
            group_labels=group_labels(entry.group),
            sent_at=entry.sent_at,
            firing=alert_keys_json(entry.firing),
            resolved=alert_keys_json(entry.resolved),
        )
    )


def _enqueue(
    conn: Connection, scope: str, n: Notification, now: datetime, expires_at: datetime
) -> int:
    result = conn.execute(insert(outbox).values(outbox_values(scope, n, now, expires_at)))
    key = result.inserted_primary_key
    assert key is not None  # an insert of one row always has one
    return int(key[0])


def outbox_values(
    scope: str, n: Notification, now: datetime, expires_at: datetime
) -> dict[str, object]:
    """A new outbox row (the database's, or the local one's during an outage)."""
    return {
        "scope": scope,
        "receiver": n.receiver,
        "group_labels": group_labels(n.group),
        "reason": n.reason.value,
        "payload": notification_json(n),
        "created_at": now,
        "expires_at": expires_at,
        "next_attempt_at": now,
        "attempts": 0,
        "status": PENDING,
    }


def due(conn: Connection, scope: str, now: datetime) -> list[OutboxRow]:
    """Pending rows of this scope whose next attempt is due, oldest first (see ``first_due``)."""
    query = (
        select(outbox)
        .where(outbox.c.scope == scope, outbox.c.status == PENDING)
        .order_by(outbox.c.id)
    )
    return first_due(conn.execute(query).mappings(), now)


def first_due(pending: Iterable[Mapping[Any, Any]], now: datetime) -> list[OutboxRow]:
    """Of pending rows in queue order, those due, and only the oldest pending row of each
    group: a group's messages reach the receiver in order (a resolution never overtakes the
    firing message still being retried)."""
    seen: set[tuple[str, str]] = set()
    out = []
    for row in pending:
        group = (row["receiver"], row["group_labels"])
        if group in seen:
            continue
        seen.add(group)
        if row["next_attempt_at"] <= now:
            out.append(_outbox_row(row))
    return out


def outbox_rows(conn: Connection, *, status: str | None = None) -> list[OutboxRow]:
    query = select(outbox).order_by(outbox.c.id)
    if status is not None:
        query = query.where(outbox.c.status == status)
    return [_outbox_row(r) for r in conn.execute(query).mappings()]


def _outbox_row(row: Mapping[Any, Any]) -> OutboxRow:
    return OutboxRow(
        id=int(row["id"]),
        scope=str(row["scope"]),
        receiver=str(row["receiver"]),
        group=group_key(str(row["receiver"]), str(row["group_labels"])),
        payload=str(row["payload"]),
        created_at=row["created_at"],
        expires_at=row["expires_at"],
        attempts=int(row["attempts"]),
        status=str(row["status"]),
        last_error=row["last_error"],
        finished_at=row["finished_at"],
    )


def mark(
    conn: Connection,
    row_id: int,
    status: str,
    now: datetime,
    *,
    attempts: int,
    error: str | None = None,
    next_attempt_at: datetime | None = None,
) -> None:
    """Record one delivery attempt: delivered, failed for good, expired, or to retry."""
    values = mark_values(status, now, attempts, error, next_attempt_at)
    conn.execute(update(outbox).where(outbox.c.id == row_id).values(**values))


def mark_values(
    status: str, now: datetime, attempts: int, error: str | None, next_attempt_at: datetime | None
) -> dict[str, object]:
    values: dict[str, object] = {"status": status, "attempts": attempts, "last_error": error}
    if status == PENDING:
        values["next_attempt_at"] = next_attempt_at or now
    else:
        values["finished_at"] = now
    return values


def import_outbox(conn: Connection, rows: Iterable[Mapping[str, Any]]) -> None:
    """Rows of the local outbox (an outage's notifications, agent.alerting.local_outbox), as
    they stand: delivered ones stay delivered, pending ones are the database's to deliver now.
    A row already imported (a crash between this commit and the local delete) is skipped."""
    c = outbox.c
    for row in rows:
        values = {k: v for k, v in row.items() if k != "id"}
        same = select(c.id).where(
            c.scope == values["scope"], c.receiver == values["receiver"],
            c.group_labels == values["group_labels"], c.created_at == values["created_at"],
            c.payload == values["payload"],
        )  # fmt: skip
        if conn.execute(same.limit(1)).first() is None:
            conn.execute(insert(outbox).values(values))


def prune_outbox(conn: Connection, before: datetime) -> int:
    """Forget finished rows older than ``before`` (they were kept to explain deliveries)."""
    result = conn.execute(
        delete(outbox).where(outbox.c.status != PENDING, outbox.c.finished_at < before)
    )
    return int(result.rowcount or 0)


# -- silences (fleet-wide: `gpuwatch silence add` on any host mutes the alert everywhere) ----


def load_silences(conn: Connection) -> list[Silence]:
    query = select(silences).order_by(silences.c.created_at, silences.c.id)
    return [_silence(r) for r in conn.execute(query).mappings()]


def _silence(row: RowMapping) -> Silence:
    return Silence(
        id=str(row["id"]),
        matchers=tuple(parse_matcher(m) for m in json.loads(str(row["matchers"]))),
        starts_at=row["starts_at"],
        ends_at=row["ends_at"],
        created_by=str(row["created_by"]),
        comment=str(row["comment"]),
    )


def add_silence(conn: Connection, silence: Silence, now: datetime) -> None:
    conn.execute(
        insert(silences).values(
            id=silence.id,
            matchers=json.dumps([str(m) for m in silence.matchers]),
            starts_at=silence.starts_at,
            ends_at=silence.ends_at,
            created_by=silence.created_by,
            comment=silence.comment,
            created_at=now,
        )
    )


def save_silence_end(conn: Connection, silence: Silence) -> None:
    conn.execute(
        update(silences)
        .where(silences.c.id == silence.id)
        .values(starts_at=silence.starts_at, ends_at=silence.ends_at)
    )


def all_states(conn: Connection) -> list[tuple[str, AlertState]]:
    """Every stored alert state with its scope, for `gpuwatch alerts`."""
    query = select(alert_states).order_by(
        alert_states.c.rule, alert_states.c.scope, alert_states.c.labels
    )
    return [(str(r["scope"]), from_row(dict(r))) for r in conn.execute(query).mappings()]
