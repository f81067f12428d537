"""Notifications, group keys and notification-log entries to JSON text and back.

The outbox stores a notification as it was decided, so that a retry after a restart sends the
same message (same alerts, same values, same times) rather than one rebuilt from newer state.
Alert states reuse ``state_codec``; times travel as ISO 8601 with their UTC offset.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from alerts.dedup import GroupKey, Notification, Reason, SentEntry
from alerts.model import AlertKey, AlertState
from alerts.state_codec import from_row, to_row

_TIMES = ("active_at", "fired_at", "resolved_at", "last_true_at", "keep_firing_since")


def group_labels(group: GroupKey) -> str:
    """The group's labels as canonical JSON (the key's receiver is stored beside it)."""
    return json.dumps(dict(group.labels), sort_keys=True, separators=(",", ":"))


def group_key(receiver: str, labels_json: str) -> GroupKey:
    labels = json.loads(labels_json)
    return GroupKey(receiver, tuple(sorted((str(k), str(v)) for k, v in labels.items())))


def alert_keys_json(keys: frozenset[AlertKey]) -> str:
    """A set of alert keys as a sorted JSON list of [rule, labels-object]."""
    return json.dumps([[k.rule, dict(k.labels)] for k in sorted(keys)], separators=(",", ":"))


def alert_keys(text: str) -> frozenset[AlertKey]:
    return frozenset(AlertKey.of(str(rule), labels) for rule, labels in json.loads(text))


def notification_json(notification: Notification) -> str:
    entry = notification.entry
    return json.dumps(
        {
            "receiver": notification.receiver,
            "group": dict(notification.group.labels),
            "reason": notification.reason.value,
            "firing": [_state(s) for s in notification.firing],
            "resolved": [_state(s) for s in notification.resolved],
            "sent_at": entry.sent_at.isoformat(),
            "entry_firing": json.loads(alert_keys_json(entry.firing)),
            "entry_resolved": json.loads(alert_keys_json(entry.resolved)),
        },
        sort_keys=True,
    )


def notification_from_json(text: str) -> Notification:
    """The notification ``notification_json`` wrote; ValueError when the text is not one."""
    try:
        data = json.loads(text)
        group = GroupKey(data["receiver"], tuple(sorted(data["group"].items())))
        entry = SentEntry(
            group,
            datetime.fromisoformat(data["sent_at"]),
            alert_keys(json.dumps(data["entry_firing"])),
            alert_keys(json.dumps(data["entry_resolved"])),
        )
        return Notification(
            group,
            data["receiver"],
            tuple(_from_state(s) for s in data["firing"]),
            tuple(_from_state(s) for s in data["resolved"]),
            Reason(data["reason"]),
            entry,
        )
    except (KeyError, TypeError, AttributeError, json.JSONDecodeError) as exc:
        raise ValueError(f"stored notification is malformed: {exc!r}") from None


def _state(state: AlertState) -> dict[str, Any]:
    row = to_row(state)
    for name in _TIMES:
        moment = row[name]
        row[name] = moment.isoformat() if isinstance(moment, datetime) else None
    return row


def _from_state(data: dict[str, Any]) -> AlertState:
    row: dict[str, object] = dict(data)
    for name in _TIMES:
        text = data.get(name)
        row[name] = datetime.fromisoformat(text) if isinstance(text, str) else None
    return from_row(row)
