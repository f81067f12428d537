"""The values alerts are made of: identity, severity, state and transitions.

An alert's identity is its rule name plus its labels (Prometheus): the same rule on two GPUs is
two alerts. Times are UTC-aware datetimes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum


class Severity(Enum):
    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"
    PAGE = "page"


class State(Enum):
    INACTIVE = "inactive"
    PENDING = "pending"  # the condition holds, ``for`` has not elapsed yet
    FIRING = "firing"
    RESOLVED = "resolved"  # was firing, condition cleared (kept a while so it is notified)


@dataclass(frozen=True, slots=True, order=True)
class AlertKey:
    """Rule name plus identifying labels (sorted): the identity of one alert."""

    rule: str
    labels: tuple[tuple[str, str], ...]

    @classmethod
    def of(cls, rule: str, labels: Mapping[str, str]) -> AlertKey:
        return cls(rule, tuple(sorted(labels.items())))

    def label_map(self) -> dict[str, str]:
        return dict(self.labels)


@dataclass(frozen=True, slots=True)
class Condition:
    """A rule's condition holding for one label set at one evaluation, with what to say."""

    key: AlertKey
    value: float | None = None  # the live value, for the message
    annotations: Mapping[str, str] = field(default_factory=dict)  # summary, description


@dataclass(frozen=True, slots=True)
class AlertState:
    """What is remembered of one alert between evaluations (and across restarts)."""

    key: AlertKey
    state: State
    active_at: datetime | None = None  # when the condition started holding (pending since)
    fired_at: datetime | None = None
    resolved_at: datetime | None = None
    last_true_at: datetime | None = None  # last evaluation the condition held
    value: float | None = None
    annotations: Mapping[str, str] = field(default_factory=dict)
    severity: Severity = Severity.WARNING
    # The first evaluation a firing alert's condition did not hold: keep_firing_for counts
    # from here (Prometheus' KeepFiringSince); None while it holds.
    keep_firing_since: datetime | None = None


@dataclass(frozen=True, slots=True)
class Transition:
    """A change worth notifying: an alert started firing, or resolved."""

    key: AlertKey
    to: State  # FIRING, RESOLVED, or PENDING again (a firing alert whose `for` grew past it)
    at: datetime
    alert: AlertState
