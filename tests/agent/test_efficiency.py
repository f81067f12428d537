"""MFU, MBU and the MFU gap: the arithmetic, and unknown where it must be unknown."""

from __future__ import annotations

from decimal import Decimal

import pytest

from agent.cost.efficiency import (
    WorkWindow,
    combined_mfu,
    mbu,
    mfu,
    mfu_gap_usd,
    utilization,
)
from agent.cost.gpu_peaks import GpuPeak, Precision, peak_for

H100 = peak_for("NVIDIA H100 80GB HBM3")
L4 = peak_for("NVIDIA L4")


def test_mfu_is_flops_over_time_times_peak() -> None:
    work = WorkWindow(seconds=60, flops_per_gpu=2.97e16, tokens=1000)
    assert mfu(work, H100) == pytest.approx(2.97e16 / (60 * 989.5e12))
    assert mfu(work, H100, Precision.FP8) == pytest.approx(2.97e16 / (60 * 1979e12))


def test_mbu_counts_read_and_written_bytes() -> None:
    work = WorkWindow(60, 1e15, read_bytes_per_gpu=9e13, write_bytes_per_gpu=1e12, tokens=5)
    assert mbu(work, H100) == pytest.approx((9e13 + 1e12) / (60 * 3.35e12))
    assert mbu(WorkWindow(60, 1e15, read_bytes_per_gpu=9e13, tokens=5), H100) is None


def test_unknown_peak_or_no_time_is_unknown() -> None:
    work = WorkWindow(60, 1e15, 1e12, 1e10, tokens=5)
    assert mfu(work, None) is None
    assert mfu(WorkWindow(0, 1e15, tokens=5), H100) is None
    a10g = peak_for("NVIDIA A10G")  # bandwidth printed, FLOPs not
    assert mfu(work, a10g) is None and mbu(work, a10g) is not None
    assert mfu(WorkWindow(60, 1e15, tokens=5), H100, Precision.FP8) is not None
    a100 = peak_for("NVIDIA A100-SXM4-40GB")
    assert mfu(WorkWindow(60, 1e15, tokens=5), a100, Precision.FP8) is None


def test_a_counter_that_stood_still_while_tokens_flowed_means_the_flag_is_off() -> None:
    assert mfu(WorkWindow(60, 0.0, 0.0, 0.0, tokens=500), H100) is None
    assert mbu(WorkWindow(60, 0.0, 0.0, 0.0, tokens=500), H100) is None
    assert mfu(WorkWindow(60, 0.0, tokens=None), H100) is None  # cannot tell
    assert mfu(WorkWindow(60, None, tokens=500), H100) is None  # no such counter


def test_an_idle_engine_with_the_flag_did_no_work() -> None:
    assert mfu(WorkWindow(60, 0.0, 0.0, 0.0, tokens=0), H100) == 0.0
    assert mbu(WorkWindow(60, 0.0, 0.0, 0.0, tokens=0), H100) == 0.0


def test_negative_or_non_finite_increases_are_refused() -> None:
    with pytest.raises(ValueError):
        WorkWindow(60, -1.0)
    with pytest.raises(ValueError):
        WorkWindow(60, float("nan"))
    with pytest.raises(ValueError):
        WorkWindow(60, 1.0, gpus=0)


def test_utilization_is_the_shared_arithmetic() -> None:
    assert utilization(30.0, 2.0, 10.0, tokens=1) == 1.5  # not capped: shown as estimated
    assert utilization(30.0, 2.0, None) is None


def test_combined_mfu_weighs_by_gpu_seconds_at_each_peak() -> None:
    assert H100 is not None and L4 is not None
    big = WorkWindow(60, 0.5 * 60 * 989.5e12, tokens=1, gpus=8)  # 8 H100s at 0.5
    small = WorkWindow(30, 0.1 * 30 * 121e12, tokens=1, gpus=1)  # 1 L4 at 0.1
    done = 0.5 * 60 * 989.5e12 * 8 + 0.1 * 30 * 121e12
    possible = 60 * 8 * 989.5e12 + 30 * 121e12
    assert combined_mfu([(big, H100), (small, L4)]) == pytest.approx(done / possible)
    assert combined_mfu([(big, H100), (small, None)]) is None  # never from a subset
    assert combined_mfu([]) is None


def test_one_figure_per_gpu_of_data_parallel_ranks_is_the_mean() -> None:
    """The mapper stores the ranks' mean: MFU of 2 ranks at 0.6 and 0.2 is 0.4, not 0.8."""
    peak = GpuPeak("test", 100.0, None, None, "a test peak")
    ranks = [0.6 * 100.0 * 10, 0.2 * 100.0 * 10]  # per-GPU FLOPs of each rank over 10 s
    work = WorkWindow(10, sum(ranks) / len(ranks), tokens=1)
    assert mfu(work, peak) == pytest.approx(0.4)


def test_mfu_gap_is_the_share_of_cost_a_target_mfu_would_have_saved() -> None:
    assert mfu_gap_usd(Decimal("100"), 0.2, 0.4) == Decimal("50.000000000000")
    assert mfu_gap_usd(Decimal("100"), 0.4, 0.4) == Decimal(0)
    assert mfu_gap_usd(Decimal("100"), 0.6, 0.4) == Decimal(0)
    assert mfu_gap_usd(Decimal("100"), None, 0.4) is None
    assert mfu_gap_usd(Decimal("100"), 0.2, None) is None
    assert mfu_gap_usd(Decimal("3.30"), 0.1, 0.3) == Decimal("2.200000000000")
    with pytest.raises(ValueError):
        mfu_gap_usd(Decimal("1"), 0.2, 0.0)
    with pytest.raises(ValueError):
        mfu_gap_usd(Decimal("1"), -0.1, 0.5)
