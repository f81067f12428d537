"""Alert states to table rows and back, so a restart neither re-notifies nor forgets a timer.

Rows hold only column-friendly values: strings, floats, None and datetimes. Labels and
annotations become canonical JSON (sorted keys, no spaces), so equal label sets give equal
strings and can be indexed or compared in SQL. ``from_row(to_row(s)) == s`` exactly.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TypeVar

from alerts.model import AlertKey, AlertState, Severity, State

_E = TypeVar("_E", State, Severity)
_TIMES = ("active_at", "fired_at", "resolved_at", "last_true_at", "keep_firing_since")


def to_row(state: AlertState) -> dict[str, object]:
    """One row for ``state``: rule, labels, state, the four times, value, annotations, severity."""
    return {
        "rule": state.key.rule,
        "labels": _canonical(state.key.label_map()),
        "state": state.state.value,
        "active_at": state.active_at,
        "fired_at": state.fired_at,
        "resolved_at": state.resolved_at,
        "last_true_at": state.last_true_at,
        "value": state.value,
        "annotations": _canonical(dict(state.annotations)),
        "severity": state.severity.value,
        "keep_firing_since": state.keep_firing_since,
    }


def from_row(row: Mapping[str, object]) -> AlertState:
    """The state ``to_row`` wrote; ValueError naming the column when a row is malformed."""
    rule = row.get("rule")
    if not isinstance(rule, str) or not rule:
        raise ValueError(f"alert row: rule must be a non-empty string, got {rule!r}")
    times = {name: _time(row, name) for name in _TIMES}
    return AlertState(
        key=AlertKey.of(rule, _strings(row, "labels")),
        state=_enum(State, row, "state"),
        value=_value(row),
        annotations=_strings(row, "annotations"),
        severity=_enum(Severity, row, "severity"),
        **times,
    )


def _canonical(mapping: Mapping[str, str]) -> str:
    return json.dumps(mapping, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _strings(row: Mapping[str, object], column: str) -> dict[str, str]:
    raw = row.get(column)
    try:
        decoded = json.loads(raw) if isinstance(raw, str) else raw
    except json.JSONDecodeError as exc:
        raise ValueError(f"alert row: {column} is not JSON: {exc}") from None
    # A JSON column may hand back the object already decoded; accept that too.
    if not isinstance(decoded, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in decoded.items()
    ):
        raise ValueError(f"alert row: {column} must be a JSON object of strings, got {raw!r}")
    return dict(decoded)


def _enum(kind: type[_E], row: Mapping[str, object], column: str) -> _E:
    raw = row.get(column)
    try:
        return kind(raw)
    except ValueError:
        allowed = ", ".join(str(m.value) for m in kind)
        raise ValueError(f"alert row: {column} must be one of {allowed}, got {raw!r}") from None


def _time(row: Mapping[str, object], column: str) -> datetime | None:
    raw = row.get(column)
    if raw is None:
        return None
    if not isinstance(raw, datetime):
        raise ValueError(f"alert row: {column} must be a datetime or None, got {raw!r}")
    # SQLite hands back naive datetimes even for timezone-aware columns; gpuwatch stores UTC,
    # and comparing a naive time with the aware ``now`` would raise in the middle of a round.
    return raw.replace(tzinfo=UTC) if raw.tzinfo is None else raw


def _value(row: Mapping[str, object]) -> float | None:
    raw = row.get("value")
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        raise ValueError(f"alert row: value must be a number or None, got {raw!r}")
    return float(raw)
