"""Restart-safe counter increases and histogram quantiles, on literal samples and simulated streams.

Time is injected: every timestamp is T0 plus literal seconds, and `_created` values are the
matching Unix seconds, so nothing here reads a clock or sleeps.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

from agent.storage.series_math import (
    HistogramPoint,
    Point,
    Segment,
    bucket_increases,
    coarsened_buckets,
    histogram_quantile,
    increase,
    increase_many,
    window_quantile,
)

T0 = datetime(2025, 1, 1, tzinfo=UTC)
INF = math.inf


def t(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def unix(seconds: float) -> float:
    """The `_created` value (Unix seconds) of the instant t(seconds)."""
    return T0.timestamp() + seconds


def pts(*samples: tuple[float, ...]) -> list[Point]:
    """Points from (seconds, value) or (seconds, value, created seconds) literals."""
    return [Point(t(s[0]), s[1], unix(s[2]) if len(s) > 2 else None) for s in samples]


def hist(
    seconds: float,
    buckets: Sequence[tuple[float, float]],
    created: float | None = None,
    total: float | None = None,
) -> HistogramPoint:
    born = unix(created) if created is not None else None
    return HistogramPoint(t(seconds), tuple(buckets), born, total)


# --- increase ---------------------------------------------------------------------------------


def test_increase_without_resets_is_last_minus_baseline() -> None:
    points = pts((0, 100), (10, 150), (20, 180), (30, 260))
    assert increase(points, t(0), t(30)) == 160.0


def test_reset_by_decrease_counts_the_value_after_it_entirely() -> None:
    # 1000 tokens before the restart (0 -> 1000), then 350 after it (restart from 0 -> 350).
    points = pts((0, 0), (10, 600), (20, 1000), (30, 200), (40, 350))
    assert increase(points, t(0), t(40)) == 1350.0


def test_reset_hidden_from_decrease_test_is_seen_through_created() -> None:
    # Restart between 10 s and 20 s; the new process climbed to 700 > 500 before the scrape.
    points = pts((0, 0, -100), (10, 500, -100), (20, 700, 15), (30, 750, 15))
    assert increase(points, t(0), t(30)) == 500 + 700 + 50
    # Without created, the same values look like +200: that is why created matters.
    blind = pts((0, 0), (10, 500), (20, 700), (30, 750))
    assert increase(blind, t(0), t(30)) == 750.0


def test_unknown_created_on_one_side_falls_back_to_the_decrease_test() -> None:
    points = [Point(t(0), 10, None), Point(t(10), 30, unix(5)), Point(t(20), 35, unix(5))]
    assert increase(points, t(0), t(20)) == 25.0


def test_a_created_not_before_its_own_sample_says_nothing() -> None:
    # Prometheus reads a start after its sample as invalid, one at it as "unknown start".
    invalid_then_valid = pts((0, 10, 5), (10, 30, 8))
    assert increase(invalid_then_valid, t(0), t(10)) == 20.0  # no restart: 5 was no start
    assert increase(pts((0, 10, 0), (10, 30, 8)), t(0), t(10)) == 20.0
    assert increase(pts((15, 40, 16), (25, 90, 16)), t(10), t(30)) == 50.0  # not born at 16


def test_series_born_in_window_counts_its_first_value_from_zero() -> None:
    points = pts((15, 40, 12), (25, 90, 12))
    assert increase(points, t(10), t(30)) == 90.0


def test_first_point_is_the_baseline_when_birth_is_unknown_or_before_the_window() -> None:
    assert increase(pts((15, 40), (25, 90)), t(10), t(30)) == 50.0
    assert increase(pts((15, 40, 5), (25, 90, 5)), t(10), t(30)) == 50.0


def test_no_points_in_window_is_unknown_not_zero() -> None:
    assert increase([], t(0), t(10)) is None
    # A baseline alone says nothing about what happened after it.
    assert increase(pts((0, 5)), t(0), t(10)) is None
    assert increase(pts((-30, 5)), t(0), t(10)) is None


def test_flat_counter_is_zero() -> None:
    assert increase(pts((0, 42), (10, 42), (20, 42)), t(0), t(20)) == 0.0
    # A single sample with no baseline and no birth time: data, nothing measurable moved.
    assert increase(pts((5, 42)), t(0), t(20)) == 0.0


def test_baseline_before_start_is_not_counted_and_earlier_points_are_ignored() -> None:
    points = pts((-20, 10), (-10, 100), (10, 130), (20, 170))
    assert increase(points, t(0), t(20)) == 70.0
    # A point exactly at start is the baseline: the value at start.
    assert increase(points, t(-10), t(20)) == 70.0
    assert increase(points, t(10), t(20)) == 40.0


def test_points_after_end_are_ignored() -> None:
    assert increase(pts((0, 0), (10, 5), (20, 9)), t(0), t(10)) == 5.0


def test_never_negative_nor_counted_twice_across_several_resets() -> None:
    points = pts((0, 50), (10, 3), (20, 2), (30, 0), (40, 7), (50, 1))
    result = increase(points, t(0), t(50))
    assert result == 3 + 2 + 0 + 7 + 1
    assert result is not None and result >= 0


def test_window_must_not_be_reversed() -> None:
    with pytest.raises(ValueError, match="after its end"):
        increase(pts((0, 1)), t(10), t(0))


def test_increase_many_sums_known_series_and_is_none_only_when_all_are() -> None:
    a = pts((0, 0), (10, 7))
    b = pts((0, 10), (10, 4))  # a reset: 4 after it
    assert increase_many([a, b, []], t(0), t(10)) == 11.0
    assert increase_many([[], pts((-5, 1))], t(0), t(10)) is None
    assert increase_many([], t(0), t(10)) is None


# --- histogram_quantile -----------------------------------------------------------------------

BUCKETS = ((1.0, 10.0), (2.0, 30.0), (4.0, 40.0), (INF, 50.0))


@pytest.mark.parametrize(
    ("q", "expected"),
    [
        (0.0, 0.0),  # rank 0 -> first bucket, interpolated from its natural lower bound 0
        (0.1, 0.5),  # rank 5 in (0, 1]: 0 + 1 * 5/10
        (0.5, 1.75),  # rank 25 in (1, 2]: 1 + 1 * (25-10)/(30-10)
        (0.8, 4.0),  # rank 40 == count of le=4: found there, 2 + 2 * 10/10
        (0.99, 4.0),  # rank 49.5 beyond le=4: the +Inf bucket -> second-highest le
        (1.0, 4.0),  # rank 50: the +Inf bucket as well
    ],
)
def test_histogram_quantile_matches_prometheus(q: float, expected: float) -> None:
    assert histogram_quantile(q, BUCKETS) == expected


def test_histogram_quantile_out_of_range_q() -> None:
    assert histogram_quantile(-0.1, BUCKETS) == -INF
    assert histogram_quantile(1.1, BUCKETS) == INF
    nan = histogram_quantile(math.nan, BUCKETS)
    assert nan is not None and math.isnan(nan)


def test_first_bucket_at_zero_as_sglang_exposes_returns_its_bound() -> None:
    buckets = ((0.0, 5.0), (1.0, 10.0), (INF, 10.0))
    assert histogram_quantile(0.25, buckets) == 0.0  # rank 2.5 in the le=0 bucket
    assert histogram_quantile(0.75, buckets) == 0.5  # rank 7.5 in (0, 1]: 0 + 2.5/5


def test_non_monotonic_buckets_are_raised_to_the_envelope() -> None:
    # le=2 reads 8 < 10: treated as 10, so rank 12 interpolates in (2, 4] as 2 + 2 * 2/10.
    assert histogram_quantile(0.6, ((1.0, 10.0), (2.0, 8.0), (4.0, 20.0), (INF, 20.0))) == 2.4
    # A +Inf count below an earlier bucket is raised too, so the total is 10, not 8.
    assert histogram_quantile(0.5, ((1.0, 5.0), (2.0, 10.0), (INF, 8.0))) == 1.0


def test_unsorted_and_duplicate_bounds_are_sorted_and_coalesced() -> None:
    shuffled = ((INF, 50.0), (2.0, 30.0), (1.0, 10.0), (4.0, 40.0))
    assert histogram_quantile(0.5, shuffled) == 1.75
    # Duplicate le=1 buckets are summed, as Prometheus' coalesceBuckets does.
    assert histogram_quantile(0.5, ((1.0, 4.0), (1.0, 6.0), (2.0, 30.0), (INF, 50.0))) == 1.75


def test_histogram_quantile_unknown_cases_are_none() -> None:
    assert histogram_quantile(0.5, ((1.0, 0.0), (INF, 0.0))) is None  # no observations
    assert histogram_quantile(0.5, ((1.0, 3.0), (2.0, 5.0))) is None  # no +Inf bucket
    assert histogram_quantile(0.5, ((INF, 5.0),)) is None  # fewer than 2 buckets
    assert histogram_quantile(0.5, ()) is None
    # q=0 over an empty first bucket: Prometheus computes 0/0 = NaN.
    assert histogram_quantile(0.0, ((1.0, 0.0), (2.0, 4.0), (INF, 4.0))) is None


# --- bucket_increases and window_quantile -----------------------------------------------------

A = (0.5, 1.0, INF)
B = (0.25, 1.0, 4.0, INF)


def with_les(les: Sequence[float], counts: Sequence[float]) -> tuple[tuple[float, float], ...]:
    return tuple(zip(les, counts, strict=True))


def test_bucket_increases_without_reset() -> None:
    points = [
        hist(0, with_les(A, (1, 2, 3)), total=1.5),
        hist(10, with_les(A, (4, 6, 8)), total=5.0),
        hist(20, with_les(A, (5, 9, 12)), total=9.5),
    ]
    (segment,) = bucket_increases(points, t(0), t(20))
    assert segment == Segment(t(0), t(20), A, (4.0, 7.0, 9.0), 8.0)


def test_restart_that_keeps_the_bucket_set_is_one_exact_segment() -> None:
    points = [
        hist(0, with_les(A, (10, 20, 30)), created=-500),
        hist(10, with_les(A, (15, 25, 40)), created=-500),
        # Restarted at 12 s: every count fell back and climbed again.
        hist(20, with_les(A, (2, 3, 5)), created=12),
        hist(30, with_les(A, (4, 6, 9)), created=12),
    ]
    (segment,) = bucket_increases(points, t(0), t(30))
    assert segment.les == A
    assert segment.increases == (5 + 2 + 2, 5 + 3 + 3, 10 + 5 + 4)


def test_restart_hidden_in_the_buckets_is_seen_through_created() -> None:
    points = [
        hist(0, with_les(A, (1, 1, 1)), created=-500),
        hist(10, with_les(A, (3, 5, 6)), created=5),  # grew past the old counts after restart
    ]
    (segment,) = bucket_increases(points, t(0), t(10))
    assert segment.increases == (3.0, 5.0, 6.0)


def test_restart_with_another_bucket_set_gives_two_segments_never_merged() -> None:
    points = [
        hist(0, with_les(A, (1, 2, 2))),
        hist(10, with_les(A, (3, 5, 6))),
        hist(20, with_les(B, (1, 2, 3, 3))),  # restarted with other buckets: counted from 0
        hist(30, with_les(B, (2, 4, 6, 7))),
    ]
    first, second = bucket_increases(points, t(0), t(30))
    assert first == Segment(t(0), t(10), A, (2.0, 3.0, 4.0), None)
    assert second == Segment(t(10), t(30), B, (2.0, 4.0, 6.0, 7.0), None)


def test_baseline_of_another_bucket_set_yields_no_empty_segment() -> None:
    points = [hist(-5, with_les(A, (1, 2, 2))), hist(10, with_les(B, (1, 1, 2, 2)))]
    (segment,) = bucket_increases(points, t(0), t(10))
    assert segment == Segment(t(0), t(10), B, (1.0, 1.0, 2.0, 2.0), None)


def test_bucket_increases_baseline_rules_match_increase() -> None:
    born = [hist(15, with_les(A, (1, 2, 3)), created=12), hist(25, with_les(A, (2, 3, 4)))]
    assert bucket_increases(born, t(10), t(30))[0].increases == (2.0, 3.0, 4.0)
    unborn = [hist(15, with_les(A, (1, 2, 3))), hist(25, with_les(A, (2, 3, 4)))]
    assert bucket_increases(unborn, t(10), t(30)) == [
        Segment(t(15), t(25), A, (1.0, 1.0, 1.0), None)
    ]
    single = [hist(15, with_les(A, (1, 2, 3)))]
    assert bucket_increases(single, t(10), t(30)) == [
        Segment(t(15), t(15), A, (0.0, 0.0, 0.0), None)
    ]
    assert bucket_increases([hist(-5, with_les(A, (1, 2, 3)))], t(0), t(10)) == []


def test_histogram_point_rejects_unordered_bounds() -> None:
    with pytest.raises(ValueError, match="strictly increasing"):
        HistogramPoint(t(0), ((1.0, 1.0), (0.5, 1.0)))
    with pytest.raises(ValueError, match="at least one bucket"):
        HistogramPoint(t(0), ())


def test_window_quantile_single_segment_equals_quantile_of_true_increases() -> None:
    points = [
        hist(0, with_les(B, (100, 200, 300, 400))),  # history before the window: not counted
        hist(10, with_les(B, (101, 210, 320, 430))),
        hist(20, with_les(B, (1, 2, 9, 10)), created=15),  # restart, same buckets
    ]
    true_increases = with_les(B, (1 + 1, 10 + 2, 20 + 9, 30 + 10))
    result = window_quantile(0.5, points, t(0), t(20))
    assert result.value == histogram_quantile(0.5, true_increases)
    assert result.value == pytest.approx(1.0 + 3.0 * (20 - 12) / (29 - 12))
    assert [q for _, q in result.segments] == [result.value]


def test_window_quantile_across_bucket_sets_uses_only_shared_bounds() -> None:
    points = [
        hist(0, with_les(A, (0, 0, 0))),
        hist(10, with_les(A, (4, 6, 10))),
        hist(20, with_les(B, (1, 2, 8, 10))),
    ]
    result = window_quantile(0.5, points, t(0), t(20))
    (seg_a, q_a), (seg_b, q_b) = result.segments
    assert q_a == histogram_quantile(0.5, seg_a.buckets) == 0.5 + 0.5 * 1 / 2
    assert q_b == histogram_quantile(0.5, seg_b.buckets) == 1.0 + 3.0 * 3 / 6
    # Shared bounds {1, +Inf}: 6 + 2 = 8 observations <= 1, 20 in all; rank 10 lies in (1, +Inf].
    assert coarsened_buckets([seg_a, seg_b]) == ((1.0, 8.0), (INF, 20.0))
    assert result.value == 1.0


def test_window_quantile_without_samples_is_unknown() -> None:
    result = window_quantile(0.5, [], t(0), t(10))
    assert result.value is None
    assert result.segments == ()


# --- property tests: simulated engines with random restarts -----------------------------------

SETS = (A, B, (1.0, 2.0, INF))
SCRAPE_EVERY = 10.0


@dataclass(frozen=True, slots=True)
class Event:
    """One observation: when (seconds after T0), its value, and the bucket set then in force."""

    at: float
    value: float
    les: tuple[float, ...]


@dataclass(frozen=True, slots=True)
class Stream:
    born: float
    counter: list[Point]
    histogram: list[HistogramPoint]
    events: list[Event]


def simulate(rng: random.Random, scrapes: int) -> Stream:
    """An engine born at 3 s, scraped every 10 s, restarting right after some scrapes.

    Counters and histograms observe the same events; the counter counts one per event. A
    restart may switch the bucket set, and the new process may climb past the old values before
    the next scrape (a reset only `created` reveals).
    """
    born = created = 3.0
    les = rng.choice(SETS)
    events: list[Event] = []
    counter: list[Point] = []
    histogram: list[HistogramPoint] = []
    count = 0
    buckets = [0] * len(les)
    total = 0.0
    for k in range(1, scrapes + 1):
        previous = (k - 1) * SCRAPE_EVERY if k > 1 else born
        if k > 1 and rng.random() < 0.25:
            created = previous + 0.5
            les = rng.choice(SETS) if rng.random() < 0.5 else les
            count, buckets, total = 0, [0] * len(les), 0.0
        for _ in range(rng.randrange(0, 30)):
            at = rng.uniform(max(previous, created) + 0.5, k * SCRAPE_EVERY - 0.5)
            value = rng.randrange(0, 24) * 0.25  # exact binary fractions: sums stay exact
            events.append(Event(at, value, les))
            count += 1
            total += value
            buckets = [n + (value <= le) for n, le in zip(buckets, les, strict=True)]
        now = k * SCRAPE_EVERY
        counter.append(Point(t(now), float(count), unix(created)))
        snapshot = with_les(les, tuple(float(n) for n in buckets))
        histogram.append(HistogramPoint(t(now), snapshot, unix(created), total))
    return Stream(born, counter, histogram, events)


def random_window(rng: random.Random, stream: Stream) -> tuple[float, float]:
    """A window starting at a scrape (baseline exactly at start) or before birth, ending at one."""
    scrape_times = [p.ts for p in stream.counter]
    ends = [(ts - T0).total_seconds() for ts in scrape_times]
    start = rng.choice([0.0, *ends[:-1]])
    end = rng.choice([e for e in ends if e > start])
    return start, end


def true_counts_by_set(
    events: Sequence[Event], start: float, end: float
) -> dict[tuple[float, ...], tuple[float, ...]]:
    totals: dict[tuple[float, ...], list[float]] = {}
    for event in events:
        if start < event.at <= end:
            counts = totals.setdefault(event.les, [0.0] * len(event.les))
            for i, le in enumerate(event.les):
                counts[i] += event.value <= le
    return {les: tuple(counts) for les, counts in totals.items()}


@pytest.mark.parametrize("seed", range(40))
def test_increase_equals_the_true_number_of_increments(seed: int) -> None:
    rng = random.Random(seed)
    stream = simulate(rng, rng.randrange(2, 30))
    for _ in range(20):
        start, end = random_window(rng, stream)
        truth = sum(1 for e in stream.events if start < e.at <= end)
        assert increase(stream.counter, t(start), t(end)) == float(truth)


@pytest.mark.parametrize("seed", range(40))
def test_bucket_increases_equal_the_true_per_bucket_counts(seed: int) -> None:
    rng = random.Random(seed)
    stream = simulate(rng, rng.randrange(2, 30))
    for _ in range(20):
        start, end = random_window(rng, stream)
        segments = bucket_increases(stream.histogram, t(start), t(end))
        assert segments, "every window here holds at least one scrape"
        for before, after in zip(segments, segments[1:], strict=False):
            assert before.les != after.les, "a segment only ends at a change of bucket set"
            assert before.end <= after.start
        found: dict[tuple[float, ...], list[float]] = {}
        for segment in segments:
            counts = found.setdefault(segment.les, [0.0] * len(segment.les))
            found[segment.les] = [a + b for a, b in zip(counts, segment.increases, strict=True)]
        truth = true_counts_by_set(stream.events, start, end)
        nonzero = {les: tuple(c) for les, c in found.items() if any(c)}
        assert nonzero == truth
        in_window = [e for e in stream.events if start < e.at <= end]
        assert sum(s.sum_increase or 0.0 for s in segments) == sum(e.value for e in in_window)
        expected = histogram_quantile(0.9, coarsened_buckets(segments))
        assert window_quantile(0.9, stream.histogram, t(start), t(end)).value == expected
