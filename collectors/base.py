"""The collector contract: samples, the Collector protocol and a collector's errors.

Error hierarchy (the root is :mod:`foundation.errors`, shared by every package)::

    GpuwatchError
     +-- CollectError        a collector could not produce its samples this round
          +-- NoData         nothing to report, which is not a failure (node_exporter's ErrNoData)

Missing data is never a zero: a value the hardware or engine does not report is simply absent.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol, runtime_checkable

from foundation.errors import GpuwatchError


class CollectError(GpuwatchError):
    """A collector failed this round; ``retryable`` says whether the next round may succeed."""

    def __init__(self, message: str, *, retryable: bool = True) -> None:
        super().__init__(message)
        self.retryable = retryable


class NoData(CollectError):
    """The collector has nothing to report; logged at debug level, not counted as a failure."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Sample:
    """One value of one series at one instant.

    Attributes:
        metric: canonical metric name (``gpuwatch_...``, base units, counters end in ``_total``).
        value: the value in the metric's base unit.
        labels: low-cardinality labels; stored as a plain dict sorted by key.
        ts: UTC instant the value was read.
    """

    metric: str
    value: float
    labels: Mapping[str, str] = field(default_factory=dict)
    ts: datetime

    def __post_init__(self) -> None:
        # A sorted private copy: callers may reuse their dict, and equal label sets compare equal.
        object.__setattr__(self, "labels", dict(sorted(self.labels.items())))

    def label_key(self) -> tuple[tuple[str, str], ...]:
        """The labels as a hashable, sorted tuple (series identity together with ``metric``)."""
        return tuple(self.labels.items())


@runtime_checkable
class Collector(Protocol):
    """Anything with a name and a ``collect`` method (client_python's Collector, plus a name).

    ``collect`` raises :class:`CollectError` on failure; the runner isolates, times and logs it.
    """

    name: str

    def collect(self, now: datetime) -> Iterable[Sample]:
        """Return this round's samples, all stamped ``now`` unless the source gives its own time."""
        ...
