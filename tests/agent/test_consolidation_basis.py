"""The consolidation advice weighs GPUs by SM activity where GPM or dcgm-exporter gave it: two
GPUs that NVML's flag calls fully busy while a fifth of their SMs work are one GPU's work, which
the flag alone never showed; without a profiling source the advice stays on the flag and says
so."""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal

from agent.reporting.model import GpuRow
from agent.reporting.recommendations import _consolidation

HOURS = 720.0


def gpu(index: str, sm_active: float | None) -> GpuRow:
    return GpuRow(
        host="box", gpu_uuid=f"GPU-{index}", gpu_index=index, gpu_name="NVIDIA H100 80GB HBM3",
        cost_usd=Decimal("2.72") * Decimal(repr(HOURS)), idle_cost_usd=Decimal(0),
        observed_hours=HOURS, busy_hours=HOURS, utilization_ratio=1.0, vram_peak_bytes=None,
        vram_total_bytes=None, sm_active_ratio=sm_active,
        activity_basis="utilization_flag" if sm_active is None else "sm_active",
    )  # fmt: skip


def test_gpus_busy_by_the_flag_and_a_fifth_active_by_their_sms_consolidate() -> None:
    (advice,) = _consolidation([gpu("0", 0.2), gpu("1", 0.2)], least=24.0)
    assert advice.title == "Consolidate 2 low-utilization GPU(s) onto 1"
    assert "busy by SM activity (GPM or dcgm-exporter)" in advice.detail
    assert "box/0 20.0 %" in advice.detail
    assert advice.saving_usd_per_month == Decimal("2.72") * 730


def test_without_sm_activity_the_flag_decides_and_is_named() -> None:
    assert _consolidation([gpu("0", None), gpu("1", None)], least=24.0) == []
    low = [replace(gpu("0", None), utilization_ratio=0.2), replace(gpu("1", 0.2))]
    (advice,) = _consolidation(low, least=24.0)
    assert "busy by SM activity for 1, by NVML's utilization flag for 1" in advice.detail
