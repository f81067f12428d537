"""Attainment of latency objectives from Prometheus histograms, and error-budget burn rates.

Pure arithmetic, no I/O. The input is the shape a report window gives per model and histogram
(TTFT, inter-token latency, end-to-end, queue time): the restart-safe increase of each cumulative
bucket, ``le -> count`` with ``+Inf`` included (:func:`agent.storage.series_math.bucket_increases`).

Bases, said out loud (DESIGN.md): a histogram knows the fraction of observations at or below each
of its bucket bounds and nothing in between. So

- at a bound the fraction is exact;
- between two bounds it is interpolated linearly, the uniform-within-a-bucket assumption of
  Prometheus' ``histogram_quantile``, and the truth is only known to lie between the fractions at
  the two bounds, which :class:`Attainment` carries as ``lower`` and ``upper``;
- above the highest finite bound nothing is interpolated (the ``+Inf`` bucket has no width):
  the estimate is the fraction at that bound, the upper bound 1;
- with no observation, or no ``+Inf`` bucket to count them all, the fraction is unknown (None),
  never 0 and never 1.

Several objectives measured by separate histograms (TTFT <= 0.5 s and e2e <= 10 s) are never
multiplied: that would assume the two latencies independent, and they are not (a long queue
delays both). :func:`joint` gives the Fréchet bounds, which hold whatever the dependence.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

# The cleaning steps of Prometheus' bucketQuantile, shared with histogram_quantile so a
# quantile and an attainment read the very same buckets (coalesced duplicates, float noise
# flattened, a restart artefact below an earlier bucket raised to it).
from agent.storage.series_math import (
    _coalesce,
    _correct_precision_errors,
    _ensure_monotonic,
)

__all__ = [
    "BOUND_REL_TOLERANCE",
    "WORKBOOK_WINDOWS",
    "Attainment",
    "BurnWindow",
    "JointAttainment",
    "attainment",
    "budget_spent",
    "burn_rate",
    "fires",
    "joint",
    "met",
]

# A threshold within this relative distance of a bucket bound *is* that bound (0.5 vs
# 0.5000000001). Bounds reach us through text exposition, where an exporter may print
# 0.30000000000000004 for 0.1 + 0.2; rounding noise is ~1e-16 relative, while neighbouring
# bucket bounds of any real engine differ by several percent, so 1e-9 (math.isclose's default)
# catches the noise and can never confuse two buckets. There is no absolute tolerance: a
# threshold of 0 matches only a bound of exactly 0.
BOUND_REL_TOLERANCE = 1e-9

_THIRTY_DAYS = 30 * 86400.0


@dataclass(frozen=True)
class Attainment:
    """The fraction of ``count`` observations at or below a threshold.

    ``good`` is the number of observations within the threshold, the count at the bound when
    exact, else interpolated like ``value`` (so it may be fractional); ``value`` is
    ``good / count``. The truth lies in ``[lower, upper]``; ``exact`` means those bounds coincide
    (a threshold on a bucket bound, or inside a bucket that holds no observation).
    """

    value: float
    lower: float
    upper: float
    exact: bool
    count: float
    good: float

    def __post_init__(self) -> None:
        if not 0.0 <= self.lower <= self.value <= self.upper <= 1.0:
            raise ValueError(f"need 0 <= lower <= value <= upper <= 1, got {self!r}")
        if self.exact != (self.lower == self.upper):
            raise ValueError(f"exact must say whether the bounds coincide, got {self!r}")

    @property
    def bad(self) -> float:
        """Observations above the threshold (estimated like ``good``)."""
        return self.count - self.good

    @property
    def bad_fraction(self) -> float:
        """``bad / count``, formed from counts so 1 of 10 is 0.1 exactly, not 1 - 0.9."""
        return self.bad / self.count

    @classmethod
    def counted(cls, good: float, count: float) -> Attainment | None:
        """An exact attainment from counts (request spans know each latency); None if count 0."""
        if count <= 0:
            return None
        fraction = good / count
        return cls(fraction, fraction, fraction, True, count, good)


@dataclass(frozen=True)
class JointAttainment:
    """The fraction of requests meeting every one of several objectives, as bounds.

    ``value`` is None unless the bounds coincide, and then ``exact`` is True: the truth is pinned
    whatever the parts' bases (a part with upper bound 0 pins the joint to 0 even when another
    part was interpolated).
    """

    value: float | None
    lower: float
    upper: float
    exact: bool
    parts: tuple[Attainment, ...]


def _normalised(
    buckets: Sequence[tuple[float, float]] | Mapping[float, float],
) -> tuple[list[float], list[float]] | None:
    """Sorted bounds and cleaned cumulative counts, or None where histogram_quantile gives None."""
    pairs = list(buckets.items()) if isinstance(buckets, Mapping) else list(buckets)
    if not pairs:
        return None
    ordered = _coalesce(sorted(pairs, key=lambda bucket: bucket[0]))
    # Without +Inf the observations above the top bound are not counted, so no fraction of the
    # total can be formed; with +Inf alone there is no finite bound to measure against.
    if ordered[-1][0] != math.inf or len(ordered) < 2:
        return None
    les = [le for le, _ in ordered]
    counts = _ensure_monotonic(_correct_precision_errors([count for _, count in ordered]))
    return les, counts


def attainment(
    buckets: Sequence[tuple[float, float]] | Mapping[float, float], threshold: float
) -> Attainment | None:
    """The fraction of observations <= ``threshold`` in (le, cumulative count) buckets.

    Buckets are cleaned exactly as :func:`~agent.storage.series_math.histogram_quantile` cleans
    them. None when there is no observation, no ``+Inf`` bucket, or no finite bound.

    The lowest bucket's lower edge is 0 when its bound is > 0 (latencies are never negative; the
    same assumption histogram_quantile makes), so a threshold below the first bound interpolates
    from (0, 0). Thresholds must be >= 0; ``+Inf`` gives 1, exactly.
    """
    if math.isnan(threshold) or threshold < 0:
        raise ValueError(f"a latency threshold must be >= 0, got {threshold!r}")
    cleaned = _normalised(buckets)
    if cleaned is None:
        return None
    les, counts = cleaned
    total = counts[-1]
    if total <= 0:
        return None
    b = bisect_left(les, threshold)
    for i in (b - 1, b):
        if 0 <= i < len(les) and math.isclose(threshold, les[i], rel_tol=BOUND_REL_TOLERANCE):
            return Attainment.counted(counts[i], total)
    # Not on a bound: les[b - 1] < threshold < les[b], with b == 0 below the first bound (whose
    # lower edge is then 0: threshold >= 0 and les[0] > threshold) and les[b] == +Inf above the
    # top finite bound.
    low_le, low_count = (les[b - 1], counts[b - 1]) if b > 0 else (0.0, 0.0)
    high_le, high_count = les[b], counts[b]
    if high_le == math.inf:
        good = low_count  # no width to interpolate into: the estimate is the floor
    else:
        good = low_count + (high_count - low_count) * (threshold - low_le) / (high_le - low_le)
    lower, upper = low_count / total, high_count / total
    # Clamped because interpolation can land an ulp outside [lower, upper].
    value = min(max(good / total, lower), upper)
    return Attainment(value, lower, upper, lower == upper, total, good)


def joint(parts: Sequence[Attainment]) -> JointAttainment:
    """Bounds on the fraction of requests meeting all of ``parts``' objectives at once.

    Fréchet bounds: ``max(0, sum(lower_i) - (n - 1)) <= P(all) <= min(upper_i)``, true for any
    dependence between the latencies. Example: 90 % of requests have TTFT <= 0.5 s and 95 % have
    e2e <= 10 s (both exact): at least 85 % meet both (the 10 % and 5 % that fail may all be
    different requests) and at most 90 % (they may all be the same ones); a product would claim
    85.5 %, a figure the histograms cannot support. Only when the bounds coincide (one part, or
    every part but one at exactly 1) is there a value.

    The parts must count the same requests (same model and window). TTFT is observed at the first
    token and e2e at the finish, so requests straddling a window edge make the counts differ a
    little; the bounds are then as good as that overlap.
    """
    if not parts:
        raise ValueError("a joint attainment needs at least one part")
    # fsum is exact until its single final rounding, so lowers of 0.9 and 1.0 give 0.9, not
    # 0.8999999999999999, and bounds that coincide in truth compare equal.
    lower = max(0.0, math.fsum([*(part.lower for part in parts), -(len(parts) - 1.0)]))
    upper = min(part.upper for part in parts)
    pinned = lower == upper
    return JointAttainment(lower if pinned else None, lower, upper, pinned, tuple(parts))


def met(result: Attainment | JointAttainment | None, objective: float) -> bool | None:
    """Whether the attained fraction reaches ``objective`` (e.g. 0.95), as far as bounds tell.

    True when even the lower bound reaches it, False when even the upper bound falls short, None
    when the objective lies between the bounds: the histograms cannot tell. An unknown
    attainment (None) stays unknown.
    """
    if not 0.0 <= objective <= 1.0:
        raise ValueError(f"an objective is a fraction in [0, 1], got {objective!r}")
    if result is None:
        return None
    if result.lower >= objective:
        return True
    if result.upper < objective:
        return False
    return None


def burn_rate(bad_fraction: float, objective: float) -> float:
    """How fast the error budget burns: ``bad_fraction / (1 - objective)``.

    1 spends exactly the budget over the SLO period; 2 spends it in half the period. Example:
    10 % of requests over the threshold against a 95 % objective burns at 0.1 / 0.05 = 2.
    """
    if not 0.0 <= objective < 1.0:
        raise ValueError(f"an objective below 1 leaves a budget to burn, got {objective!r}")
    if not 0.0 <= bad_fraction <= 1.0:
        raise ValueError(f"a bad fraction lies in [0, 1], got {bad_fraction!r}")
    return bad_fraction / (1.0 - objective)


@dataclass(frozen=True)
class BurnWindow:
    """One multiwindow burn-rate alert: fire when both windows burn faster than ``factor``.

    The long window says the budget spent is significant; the short one (1/12 of it) says the
    burn is still going on, so the alert resets soon after the problem stops.
    """

    long_seconds: float
    short_seconds: float
    factor: float
    severity: Literal["page", "ticket"]


# The Google SRE Workbook, ch. 5 "Alerting on SLOs", Table 5-8 (recommended parameters for a
# 30-day SLO, https://sre.google/workbook/alerting-on-slos/):
#   page    1 h long,  5 min short, burn 14.4,  2 % of the budget spent
#   page    6 h long, 30 min short, burn 6,     5 %
#   ticket  3 d long,  6 h   short, burn 1,    10 %
WORKBOOK_WINDOWS: tuple[BurnWindow, ...] = (
    BurnWindow(3600.0, 300.0, 14.4, "page"),
    BurnWindow(6 * 3600.0, 1800.0, 6.0, "page"),
    BurnWindow(3 * 86400.0, 6 * 3600.0, 1.0, "ticket"),
)


def budget_spent(window: BurnWindow, period_seconds: float = _THIRTY_DAYS) -> float:
    """The fraction of a period's budget that burning at ``factor`` for the long window spends."""
    return window.factor * window.long_seconds / period_seconds


def fires(window: BurnWindow, long_burn: float | None, short_burn: float | None) -> bool | None:
    """The workbook's condition: both burn rates above ``factor``.

    Strictly above, as its rules write ``> (14.4 * 0.001)``. One window known to be at or below
    the factor settles it (False) even when the other is unknown; otherwise an unknown burn rate
    (None) leaves the answer unknown.
    """
    burns = (long_burn, short_burn)
    if any(burn is not None and burn <= window.factor for burn in burns):
        return False
    if long_burn is None or short_burn is None:
        return None
    return True
