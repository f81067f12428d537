"""Attainment from histograms, joint bounds, the met tri-state and burn-rate arithmetic."""

from __future__ import annotations

import math
from bisect import bisect_left

import pytest

from agent.cost.slo_math import (
    WORKBOOK_WINDOWS,
    Attainment,
    BurnWindow,
    attainment,
    budget_spent,
    burn_rate,
    fires,
    joint,
    met,
)
from agent.sim.vllm_spec import LATENCY
from agent.storage.series_math import histogram_quantile

INF = math.inf
# 10 observations: 2 <= 0.1, 6 <= 0.5, 9 <= 1.0, 10 in all.
SMALL = {0.1: 2.0, 0.5: 6.0, 1.0: 9.0, INF: 10.0}


def cumulative(les: tuple[float, ...], observations: list[float]) -> dict[float, float]:
    """Cumulative bucket counts of ``observations``, as an engine's histogram would hold them."""
    counts = dict.fromkeys((*les, INF), 0.0)
    for le in counts:
        counts[le] = float(sum(1 for x in observations if x <= le))
    return counts


def test_exact_at_a_bound_and_within_float_tolerance() -> None:
    result = attainment(SMALL, 0.5)
    assert result == Attainment(0.6, 0.6, 0.6, True, 10.0, 6.0)
    # Float noise on either side of a bound still reads the bound.
    assert attainment(SMALL, 0.5000000001) == result
    assert attainment(SMALL, 0.4999999999) == result
    # A real difference does not.
    off = attainment(SMALL, 0.501)
    assert off is not None and not off.exact


def test_interpolated_between_bounds_with_bounds() -> None:
    result = attainment(SMALL, 0.3)  # halfway through (0.1, 0.5], which holds 4
    assert result is not None
    assert not result.exact
    assert result.value == pytest.approx(0.4)
    assert result.good == pytest.approx(4.0)
    assert (result.lower, result.upper) == (0.2, 0.6)
    assert result.count == 10.0


def test_interpolation_agrees_with_histogram_quantile() -> None:
    # The inverse of the quantile's interpolation: same uniform-within-a-bucket convention.
    result = attainment(SMALL, 0.75)
    assert result is not None
    assert histogram_quantile(result.value, sorted(SMALL.items())) == pytest.approx(0.75)


def test_above_the_top_finite_bound() -> None:
    result = attainment(SMALL, 5.0)
    assert result == Attainment(0.9, 0.9, 1.0, False, 10.0, 9.0)


def test_above_the_top_bound_with_an_empty_inf_bucket_is_exact() -> None:
    result = attainment({0.5: 3.0, 1.0: 4.0, INF: 4.0}, 7.0)
    assert result == Attainment(1.0, 1.0, 1.0, True, 4.0, 4.0)


def test_below_the_first_bound_starts_from_zero() -> None:
    result = attainment(SMALL, 0.05)  # half of (0, 0.1], which holds 2
    assert result is not None
    assert (result.value, result.lower, result.upper, result.exact) == (0.1, 0.0, 0.2, False)
    assert attainment(SMALL, 0.0) == Attainment(0.0, 0.0, 0.2, False, 10.0, 0.0)


def test_inside_an_empty_bucket_is_exact() -> None:
    result = attainment({0.1: 0.0, 0.5: 0.0, 1.0: 5.0, INF: 5.0}, 0.3)
    assert result == Attainment(0.0, 0.0, 0.0, True, 5.0, 0.0)


def test_unknown_is_none_never_zero_or_one() -> None:
    assert attainment({}, 1.0) is None
    assert attainment([], 1.0) is None
    assert attainment({0.5: 0.0, 1.0: 0.0, INF: 0.0}, 1.0) is None
    # No +Inf bucket: the total is not counted. +Inf alone: no bound to measure against.
    assert attainment({0.5: 3.0, 1.0: 4.0}, 1.0) is None
    assert attainment({INF: 4.0}, 1.0) is None


def test_inf_threshold_and_inf_bucket_count_everything() -> None:
    assert attainment(SMALL, INF) == Attainment(1.0, 1.0, 1.0, True, 10.0, 10.0)


def test_sequence_input_unsorted_and_duplicate_bounds_coalesced() -> None:
    pairs = [(INF, 10.0), (1.0, 9.0), (0.5, 6.0), (0.1, 2.0)]
    assert attainment(pairs, 0.5) == attainment(SMALL, 0.5)
    # Prometheus' coalesceBuckets sums buckets with the same bound.
    doubled = [(0.5, 3.0), (0.5, 3.0), (INF, 10.0)]
    assert attainment(doubled, 0.5) == Attainment(0.6, 0.6, 0.6, True, 10.0, 6.0)


def test_non_monotonic_buckets_raised_to_the_envelope() -> None:
    # A restart artefact: the 1.0 bucket reads below the 0.5 bucket. histogram_quantile raises
    # it to 6 (ensureMonotonic); attainment reads the same cleaned buckets.
    broken = {0.1: 2.0, 0.5: 6.0, 1.0: 5.0, INF: 10.0}
    assert attainment(broken, 1.0) == Attainment(0.6, 0.6, 0.6, True, 10.0, 6.0)
    interpolated = attainment(broken, 0.75)
    assert interpolated is not None
    assert (interpolated.value, interpolated.lower, interpolated.upper) == (0.6, 0.6, 0.6)
    # The total is the +Inf bucket after the same repair.
    assert attainment({0.5: 8.0, INF: 6.0}, 0.5) == Attainment(1.0, 1.0, 1.0, True, 8.0, 8.0)


def test_bad_thresholds_rejected() -> None:
    with pytest.raises(ValueError):
        attainment(SMALL, -0.1)
    with pytest.raises(ValueError):
        attainment(SMALL, math.nan)


def test_issue_truth_on_vllm_e2e_buckets() -> None:
    # The issue's known truth: 90 % of requests take 0.6 s, 10 % take 3 s; vLLM's
    # e2e_request_latency_seconds buckets hold 1.0, so e2e <= 1 s is exactly 0.90.
    assert 1.0 in LATENCY
    buckets = cumulative(LATENCY, [0.6] * 90 + [3.0] * 10)
    result = attainment(buckets, 1.0)
    assert result == Attainment(0.9, 0.9, 0.9, True, 100.0, 90.0)
    assert met(result, 0.95) is False
    assert met(result, 0.9) is True
    # The loopback: 10 % bad against a 95 % objective burns the budget twice as fast.
    assert result is not None
    assert result.bad_fraction == 0.1
    assert burn_rate(result.bad_fraction, 0.95) == pytest.approx(2.0, rel=1e-12)


def test_issue_truth_between_vllm_bounds_is_bracketed() -> None:
    buckets = cumulative(LATENCY, [0.6] * 90 + [3.0] * 10)
    result = attainment(buckets, 0.7)  # inside (0.5, 0.8], which holds all 90
    assert result is not None
    assert (result.lower, result.upper, result.exact) == (0.0, 0.9, False)
    assert result.value == pytest.approx(0.6)  # uniform assumption: 2/3 of the bucket
    # The truth (0.9) lies in the bounds, which is all a histogram can promise.
    assert result.lower <= 0.9 <= result.upper
    assert LATENCY[bisect_left(LATENCY, 0.7)] == 0.8


def test_joint_two_parts_frechet_not_product() -> None:
    ttft = Attainment.counted(90.0, 100.0)
    e2e = Attainment.counted(95.0, 100.0)
    assert ttft is not None and e2e is not None
    both = joint([ttft, e2e])
    assert both.lower == pytest.approx(0.85)
    assert both.upper == 0.9
    assert both.value is None and not both.exact
    assert both.parts == (ttft, e2e)
    assert met(both, 0.8) is True
    assert met(both, 0.95) is False
    assert met(both, 0.87) is None  # 0.855 if independent; the histograms cannot tell


def test_joint_three_parts_with_interpolated_bounds() -> None:
    a = Attainment(0.85, 0.8, 0.9, False, 10.0, 8.5)
    b = Attainment(0.95, 0.95, 0.95, True, 10.0, 9.5)
    c = Attainment(0.75, 0.7, 1.0, False, 10.0, 7.5)
    both = joint([a, b, c])
    assert both.lower == pytest.approx(0.45)  # 0.8 + 0.95 + 0.7 - 2
    assert both.upper == 0.9
    assert both.value is None
    # Far apart parts: the lower bound stops at 0.
    low = Attainment(0.3, 0.3, 0.3, True, 10.0, 3.0)
    assert joint([low, low, low]).lower == 0.0


def test_joint_bounds_coincide() -> None:
    only = Attainment(0.9, 0.9, 0.9, True, 10.0, 9.0)
    assert joint([only]).value == 0.9 and joint([only]).exact
    everyone = Attainment(1.0, 1.0, 1.0, True, 10.0, 10.0)
    pinned = joint([only, everyone])  # fsum keeps 0.9 + 1.0 - 1 at 0.9 exactly
    assert (pinned.value, pinned.lower, pinned.upper, pinned.exact) == (0.9, 0.9, 0.9, True)
    # A part nobody met pins the joint at 0 whatever the other's basis.
    nobody = Attainment(0.0, 0.0, 0.0, True, 10.0, 0.0)
    vague = Attainment(0.85, 0.8, 0.9, False, 10.0, 8.5)
    assert joint([vague, nobody]).value == 0.0
    with pytest.raises(ValueError):
        joint([])


def test_met_tri_state_on_a_single_part() -> None:
    result = attainment(SMALL, 0.3)  # bounds [0.2, 0.6]
    assert met(result, 0.2) is True
    assert met(result, 0.61) is False
    assert met(result, 0.5) is None
    assert met(None, 0.5) is None
    with pytest.raises(ValueError):
        met(result, 1.5)


def test_attainment_validates_itself() -> None:
    with pytest.raises(ValueError):
        Attainment(0.5, 0.6, 0.7, False, 10.0, 5.0)
    with pytest.raises(ValueError):
        Attainment(0.5, 0.5, 0.5, False, 10.0, 5.0)
    assert Attainment.counted(0.0, 0.0) is None


def test_burn_rate_values() -> None:
    assert burn_rate(0.1, 0.95) == pytest.approx(2.0, rel=1e-12)
    assert burn_rate(0.0, 0.99) == 0.0
    assert burn_rate(0.0144, 0.999) == pytest.approx(14.4, rel=1e-9)
    with pytest.raises(ValueError):
        burn_rate(0.1, 1.0)
    with pytest.raises(ValueError):
        burn_rate(1.1, 0.9)


def test_workbook_windows_spend_2_5_10_percent_of_30_days() -> None:
    spent = [budget_spent(window) for window in WORKBOOK_WINDOWS]
    assert spent == pytest.approx([0.02, 0.05, 0.10])
    assert [w.severity for w in WORKBOOK_WINDOWS] == ["page", "page", "ticket"]
    # The workbook's guideline: the short window is 1/12 of the long one.
    assert all(w.short_seconds * 12 == w.long_seconds for w in WORKBOOK_WINDOWS)


def test_fires_needs_both_windows_above_the_factor() -> None:
    page = BurnWindow(3600.0, 300.0, 14.4, "page")
    assert fires(page, 20.0, 15.0) is True
    assert fires(page, 20.0, 14.4) is False  # strictly above, as the workbook's rules
    assert fires(page, 3.0, None) is False  # one quiet window settles it
    assert fires(page, 20.0, None) is None
