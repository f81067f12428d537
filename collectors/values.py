"""Sample values that cannot be true are dropped one by one, never a whole round for them.

A target that exposes ``NaN`` (an engine dividing by zero at start, a proxy's placeholder) must
cost that one sample, not the round: SQLite refuses NaN outright (NOT NULL), PostgreSQL stores
it and every sum over it becomes NaN (the fleet's cost per million tokens, ``$NaN``). So, for
every collector, before anything is stored or derived:

- a non-finite value (NaN, +Inf, -Inf) is dropped: for a gauge, absent means unknown, as a
  missing family does; for a counter or a histogram series there is no meaningful infinity;
- a negative counter, bucket count or observation count is dropped: those only ever count up
  from zero (a reset goes to 0, never below).

Prometheus stores such values as they are (NaN is a valid float sample to it); we differ because
every figure gpuwatch computes is money, and "unknown" is what an impossible value tells us.
The drops are counted per collector and reason (``gpuwatch_samples_dropped_total``).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable

from collectors.base import Sample
from collectors.signals import Kind, signal_of

NON_FINITE = "non_finite"
NEGATIVE_COUNT = "negative_count"


def checked(samples: Iterable[Sample]) -> tuple[tuple[Sample, ...], Counter[str]]:
    """The samples worth keeping, and how many were dropped, by reason."""
    kept: list[Sample] = []
    dropped: Counter[str] = Counter()
    for s in samples:
        reason = _problem(s)
        if reason is None:
            kept.append(s)
        else:
            dropped[reason] += 1
    return tuple(kept), dropped


def _problem(s: Sample) -> str | None:
    value = s.value
    if not math.isfinite(value):
        return NON_FINITE
    if value < 0 and _counts(s.metric):
        return NEGATIVE_COUNT
    return None


def _counts(metric: str) -> bool:
    """Whether the series only counts up from zero: a counter, a bucket or a count."""
    if metric.endswith(("_bucket", "_count")):
        return True
    signal = signal_of(metric)
    return signal is not None and signal.kind is Kind.COUNTER and not metric.endswith("_created")
