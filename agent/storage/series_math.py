"""Restart-safe arithmetic over stored raw samples: counter increases and histogram quantiles.

Engines (vLLM, SGLang, ...) expose counters and cumulative histograms that fall back to 0 when
the engine restarts. gpuwatch stores the raw value of every scrape; these pure functions turn
those samples into exact figures over any window [start, end]:

- ``increase`` is Prometheus' ``increase()`` without its extrapolation to the window edges:
  billing needs exact integers (tokens, requests), not estimates.
- ``bucket_increases`` applies the same reset rules to a histogram as a whole and never merges
  samples taken with different bucket sets.
- ``histogram_quantile`` replicates Prometheus' classic ``bucketQuantile`` exactly, with None
  where Prometheus answers NaN for "unknown".

Window convention, shared by every function: the baseline is the last sample at or before
``start`` (the value the counter had when the window opened, not counted itself); the samples
"in" the window are those with ``start < ts <= end``. No sample in the window means unknown
(None, or no segment), never 0. Values must be finite: a NaN (a Prometheus staleness marker) is
the caller's to drop before it gets here.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

__all__ = [
    "HistogramPoint",
    "Point",
    "QuantileResult",
    "Segment",
    "bucket_increases",
    "coarsened_buckets",
    "histogram_quantile",
    "increase",
    "increase_many",
    "started_anew",
    "window_quantile",
]

# Prometheus' correctPrecisionErrors tolerance (promql/quantile.go): relative differences
# between adjacent cumulative buckets at or below this are float noise, not observations.
_PRECISION_TOLERANCE = 1e-12


@dataclass(frozen=True, slots=True)
class Point:
    """One stored sample of a counter series.

    ts: scrape time, timezone-aware (UTC).
    value: the raw cumulative counter value, in the counter's own unit (tokens, requests, s).
    created: the engine's ``<name>_created`` gauge at ts, in Unix seconds; None when the engine
        does not expose it, in which case a reset is detected only by a decrease.
    """

    ts: datetime
    value: float
    created: float | None = None


@dataclass(frozen=True, slots=True)
class HistogramPoint:
    """One stored sample of a cumulative (classic Prometheus) histogram series.

    ts: scrape time, timezone-aware (UTC).
    buckets: (le, cumulative count) pairs, le strictly increasing; normally ends with +Inf,
        whose count is the histogram's total count.
    created: the ``<name>_created`` gauge at ts (Unix seconds); None when not exposed.
    sum: the ``<name>_sum`` value at ts (the observations' unit); None when not stored.
    """

    ts: datetime
    buckets: tuple[tuple[float, float], ...]
    created: float | None = None
    sum: float | None = None

    def __post_init__(self) -> None:
        les = self.les
        if not les:
            raise ValueError("a histogram sample needs at least one bucket")
        # Reset and bucket-set comparisons are done position by position, which is only
        # sound when every sample lists its buckets in one canonical order.
        if any(a >= b for a, b in zip(les, les[1:], strict=False)):
            raise ValueError(f"bucket bounds must be strictly increasing, got {les!r}")

    @property
    def les(self) -> tuple[float, ...]:
        """The bucket upper bounds, ascending."""
        return tuple(le for le, _ in self.buckets)

    @property
    def counts(self) -> tuple[float, ...]:
        """The cumulative counts, in the order of ``les``."""
        return tuple(count for _, count in self.buckets)


@dataclass(frozen=True, slots=True)
class Segment:
    """The per-bucket increase of a histogram over one run of samples sharing a bucket set.

    start, end: the observations counted happened in (start, end]. start is the window start
        when the run opens the window (from a baseline, or born in the window); the first
        sample's time when that sample stands in for a missing baseline; after a change of
        bucket set, the time of the last sample before it (the restart happened after that).
        end is the time of the run's last sample.
    les: the run's bucket upper bounds, ascending.
    increases: cumulative observation counts per le over (start, end], like Prometheus buckets.
    sum_increase: increase of ``<name>_sum`` over the same span, None when a sample lacked it.
    """

    start: datetime
    end: datetime
    les: tuple[float, ...]
    increases: tuple[float, ...]
    sum_increase: float | None = None

    @property
    def buckets(self) -> tuple[tuple[float, float], ...]:
        """(le, cumulative increase) pairs, the input ``histogram_quantile`` takes."""
        return tuple(zip(self.les, self.increases, strict=True))


@dataclass(frozen=True, slots=True)
class QuantileResult:
    """A quantile over a window of histogram samples.

    value: the quantile over the whole window, on the buckets all segments share; None when
        unknown (no samples, no observations, or no +Inf bucket).
    segments: every segment with its own quantile (None when unknown), in time order.
    """

    value: float | None
    segments: tuple[tuple[Segment, float | None], ...]


_Sample = TypeVar("_Sample", Point, HistogramPoint)


def _ts(sample: Point | HistogramPoint) -> datetime:
    return sample.ts


def _split_window(
    samples: Sequence[_Sample], start: datetime, end: datetime
) -> tuple[_Sample | None, Sequence[_Sample]]:
    """(last sample at or before start or None, the samples with start < ts <= end)."""
    if start > end:
        raise ValueError(f"window start {start} is after its end {end}")
    first_inside = bisect_right(samples, start, key=_ts)
    past_end = bisect_right(samples, end, key=_ts)
    baseline = samples[first_inside - 1] if first_inside else None
    return baseline, samples[first_inside:past_end]


def _born_within(created: float | None, ts: datetime, start: datetime, end: datetime) -> bool:
    """Whether a sample at ``ts`` with this ``_created`` time (Unix seconds) was born within
    [start, end]. A ``created`` not before its own sample says nothing (see ``started_anew``)."""
    born = _start_of(ts, created)
    return born is not None and start.timestamp() <= born <= end.timestamp()


def _start_of(ts: datetime, created: float | None) -> float | None:
    """A sample's start (``_created``) time where it means one: before the sample's own time
    (see ``started_anew``)."""
    return created if created is not None and created < ts.timestamp() else None


def started_anew(
    before: datetime, before_created: float | None, after: datetime, after_created: float | None
) -> bool:
    """Whether the ``_created`` times of two consecutive samples (at ``before`` and ``after``)
    show a restart between them: both known and different.

    A ``_created`` not before its own sample is not known: Prometheus reads a start timestamp
    after its sample as invalid and one equal to it as OpenTelemetry's "unknown start"
    (promql/functions.go isStartTimestampReset), so an invalid one on the earlier sample does
    not make the next a restart. Unknown on either side proves nothing; a decrease still is a
    restart, the caller's test.
    """
    earlier, later = _start_of(before, before_created), _start_of(after, after_created)
    return earlier is not None and later is not None and earlier != later


def _counter_step(before: Point, after: Point) -> float:
    """The increase between two consecutive samples; after a reset the counter began at 0."""
    restarted = started_anew(before.ts, before.created, after.ts, after.created)
    if restarted or after.value < before.value:
        return after.value
    return after.value - before.value


def increase(points: Sequence[Point], start: datetime, end: datetime) -> float | None:
    """Exact increase of one counter series over [start, end], in the counter's unit.

    ``points`` are sorted by ts; the last one at or before start is the baseline. Each reset
    (a decrease, or a change of a known ``created``: ``started_anew``) counts the value after it
    in full. Without a baseline the first sample in the window counts in full only when its
    ``created`` lies in [start, end] (born in the window); otherwise it is the baseline. None
    when no sample lies in (start, end]; 0.0 when samples exist but nothing moved.
    """
    baseline, inside = _split_window(points, start, end)
    if not inside:
        return None
    if baseline is None:
        first = inside[0]
        total = first.value if _born_within(first.created, first.ts, start, end) else 0.0
        previous, rest = first, inside[1:]
    else:
        total, previous, rest = 0.0, baseline, inside
    for point in rest:
        total += _counter_step(previous, point)
        previous = point
    return total


def increase_many(
    series: Iterable[Sequence[Point]], start: datetime, end: datetime
) -> float | None:
    """Sum of ``increase`` over several series (e.g. label sets); None only if every one is None."""
    known = [inc for points in series if (inc := increase(points, start, end)) is not None]
    return math.fsum(known) if known else None


def _histogram_reset(before: HistogramPoint, after: HistogramPoint) -> bool:
    """A restart between two samples of the same bucket set: any bucket fell, or a known
    ``created`` changed (``started_anew``)."""
    if started_anew(before.ts, before.created, after.ts, after.created):
        return True
    return any(b < a for a, b in zip(before.counts, after.counts, strict=True))


@dataclass(slots=True)
class _RunBuilder:
    """The mutable accumulator behind one Segment; private so Segment itself stays frozen."""

    start: datetime
    end: datetime
    les: tuple[float, ...]
    increases: list[float]
    sum_increase: float | None
    counted: bool = False

    @classmethod
    def empty(cls, baseline: HistogramPoint, start: datetime) -> _RunBuilder:
        """A run measured from ``baseline``: nothing counted yet."""
        zero_sum = None if baseline.sum is None else 0.0
        return cls(start, start, baseline.les, [0.0] * len(baseline.les), zero_sum)

    @classmethod
    def from_zero(cls, sample: HistogramPoint, start: datetime) -> _RunBuilder:
        """A run whose first sample counts in full: the histogram (re)started from 0."""
        return cls(start, sample.ts, sample.les, list(sample.counts), sample.sum, counted=True)

    def add(self, before: HistogramPoint, after: HistogramPoint) -> None:
        reset = _histogram_reset(before, after)
        pairs = zip(before.counts, after.counts, strict=True)
        steps = after.counts if reset else tuple(b - a for a, b in pairs)
        self.increases = [total + step for total, step in zip(self.increases, steps, strict=True)]
        self.sum_increase = _sum_step(self.sum_increase, before, after, reset)
        self.end, self.counted = after.ts, True

    def freeze(self) -> Segment:
        return Segment(self.start, self.end, self.les, tuple(self.increases), self.sum_increase)


def _sum_step(
    total: float | None, before: HistogramPoint, after: HistogramPoint, reset: bool
) -> float | None:
    # The reset decision comes from the buckets: a sum may fall legitimately (negative values).
    if total is None or before.sum is None or after.sum is None:
        return None
    return total + (after.sum if reset else after.sum - before.sum)


def _first_run(
    baseline: HistogramPoint | None, first: HistogramPoint, start: datetime, end: datetime
) -> tuple[_RunBuilder, HistogramPoint, bool]:
    """(the opening run, the sample it is measured from, whether that sample is ``first``)."""
    if baseline is not None:
        return _RunBuilder.empty(baseline, start), baseline, False
    if _born_within(first.created, first.ts, start, end):
        return _RunBuilder.from_zero(first, start), first, True
    return _RunBuilder.empty(first, first.ts), first, True


def bucket_increases(
    points: Sequence[HistogramPoint], start: datetime, end: datetime
) -> list[Segment]:
    """Per-bucket increase of one histogram series over [start, end], one Segment per bucket set.

    Same baseline rules as ``increase``; a reset is a fall of any bucket, a change of a known
    ``created`` (``started_anew``), or a change of the bucket set, and the sample after it counts
    in full. A change of bucket set also closes the segment, so buckets of different sets are
    never merged. A run that covers no interval (a baseline immediately followed by another
    bucket set) yields no segment, except that samples with nothing to count still yield one
    all-zero segment. Empty when no sample lies in (start, end].
    """
    baseline, inside = _split_window(points, start, end)
    if not inside:
        return []
    run, previous, first_used = _first_run(baseline, inside[0], start, end)
    done: list[Segment] = []
    for sample in inside[1:] if first_used else inside:
        if sample.les != previous.les:
            if run.counted:
                done.append(run.freeze())
            run = _RunBuilder.from_zero(sample, max(previous.ts, start))
        else:
            run.add(previous, sample)
        previous = sample
    if run.counted or not done:
        done.append(run.freeze())
    return done


def _coalesce(ordered: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """Merge buckets with the same upper bound by summing them (Prometheus' coalesceBuckets)."""
    merged: list[tuple[float, float]] = []
    for le, count in ordered:
        if merged and merged[-1][0] == le:
            merged[-1] = (le, merged[-1][1] + count)
        else:
            merged.append((le, count))
    return merged


def _correct_precision_errors(counts: list[float]) -> list[float]:
    """Prometheus' correctPrecisionErrors: flatten relative steps of at most 1e-12 (float noise)."""
    fixed, previous = list(counts), counts[0]
    for i in range(1, len(fixed)):
        delta = abs(fixed[i] - previous)
        if delta == 0:
            continue
        # Go divides by zero to +Inf here; Python would raise, so spell that case out.
        relative = delta / fixed[i] if fixed[i] != 0 else math.inf
        if relative <= _PRECISION_TOLERANCE:
            fixed[i] = previous
        else:
            previous = fixed[i]
    return fixed


def _ensure_monotonic(counts: list[float]) -> list[float]:
    """Prometheus' ensureMonotonic: a bucket below an earlier one is raised to it (the envelope)."""
    fixed, highest = list(counts), counts[0]
    for i in range(1, len(fixed)):
        if fixed[i] > highest:
            highest = fixed[i]
        elif fixed[i] < highest:
            fixed[i] = highest
    return fixed


def histogram_quantile(q: float, buckets: Sequence[tuple[float, float]]) -> float | None:
    """The q-quantile of (le, cumulative count) buckets, in the unit of the bucket bounds.

    Replicates promql/quantile.go bucketQuantile (classic histograms) step for step: NaN q gives
    NaN, q < 0 gives -Inf, q > 1 gives +Inf; then buckets are sorted, coalesced, corrected for
    float noise and made monotonic. None (Prometheus: NaN) when the highest bound is not +Inf,
    fewer than 2 buckets remain, or there are no observations. A rank in the +Inf bucket gives
    the second-highest bound; a rank in a first bucket whose bound is <= 0 gives that bound.
    """
    if math.isnan(q):
        return math.nan
    if q < 0:
        return -math.inf
    if q > 1:
        return math.inf
    if not buckets:
        return None
    ordered = _coalesce(sorted(buckets, key=lambda bucket: bucket[0]))
    if ordered[-1][0] != math.inf:
        return None
    les = [le for le, _ in ordered]
    counts = _ensure_monotonic(_correct_precision_errors([count for _, count in ordered]))
    if len(counts) < 2 or counts[-1] == 0:
        return None
    return _interpolate(q * counts[-1], les, counts)


def _interpolate(rank: float, les: list[float], counts: list[float]) -> float | None:
    """bucketQuantile's search and linear interpolation, on sorted monotonic buckets."""
    # sort.Search(len(buckets)-1, count >= rank): the +Inf bucket is outside the search range,
    # so "not found" (b == len-1) means the rank lies in the +Inf bucket.
    b = bisect_left(counts, rank, 0, len(counts) - 1)
    if b == len(counts) - 1:
        return les[-2]
    if b == 0 and les[0] <= 0:
        return les[0]
    lower, upper, count = 0.0, les[b], counts[b]
    if b > 0:
        lower = les[b - 1]
        count -= counts[b - 1]
        rank -= counts[b - 1]
    if count == 0:
        # Only q == 0 over an empty first bucket gets here: Prometheus computes 0/0 = NaN.
        return None
    return lower + (upper - lower) * (rank / count)


def coarsened_buckets(segments: Sequence[Segment]) -> tuple[tuple[float, float], ...]:
    """One histogram from segments with possibly different bucket sets, without merging them.

    Keeps only the bounds every segment has (their intersection, which holds +Inf when each
    segment has it) and sums the cumulative increases there. A cumulative count at a shared
    bound means "observations <= le" in every segment, so the sum is exact: resolution is lost
    where sets differ, but no observation is invented or moved to another bucket.
    """
    if not segments:
        return ()
    shared = set(segments[0].les).intersection(*(segment.les for segment in segments[1:]))
    totals = dict.fromkeys(sorted(shared), 0.0)
    for segment in segments:
        for le, count in zip(segment.les, segment.increases, strict=True):
            if le in totals:
                totals[le] += count
    return tuple(totals.items())


def window_quantile(
    q: float, points: Sequence[HistogramPoint], start: datetime, end: datetime
) -> QuantileResult:
    """The q-quantile of a histogram series over [start, end], overall and per segment.

    ``value`` is computed on ``coarsened_buckets`` of all segments (for one segment that is the
    segment itself); None when there is no sample in the window or no observation.
    """
    segments = bucket_increases(points, start, end)
    per_segment = tuple((segment, histogram_quantile(q, segment.buckets)) for segment in segments)
    value = histogram_quantile(q, coarsened_buckets(segments)) if segments else None
    return QuantileResult(value, per_segment)
