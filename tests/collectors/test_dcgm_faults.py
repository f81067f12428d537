"""dcgm-exporter's fault fields as the canonical GPU fault signals: the last Xid and the row
remapper, read from the simulated exporter's body as a scrape keeps it."""

from __future__ import annotations

from datetime import UTC, datetime

from agent.sim.render import render
from collectors.engines import dcgm
from collectors.engines.exposition import Exposition
from collectors.engines.registry import read_by_a_mapper
from collectors.engines.rules import Context
from tests.enginesim.sim_helpers import traffic

NOW = datetime(2026, 12, 2, tzinfo=UTC)
CONTEXT = Context("h1", "dcgm", "dcgm", "", NOW)
FAULTS = (
    "gpuwatch_gpu_xid_errors_total",
    "gpuwatch_gpu_remapped_rows_total",
    "gpuwatch_gpu_row_remap_failure",
    "gpuwatch_gpu_row_remap_pending",
)


def faults(text: str, gpu: str) -> dict[str, float]:
    mapped = dcgm.map_samples(Exposition.parse(text, keep=read_by_a_mapper), CONTEXT)
    out = {}
    for s in mapped:
        if s.metric in FAULTS and s.labels["gpu_index"] == gpu:
            extra = "".join(f"{{{k}={s.labels[k]}}}" for k in ("xid", "cause") if k in s.labels)
            out[s.metric + extra] = s.value
    return out


def test_the_last_xid_and_the_row_remapper_are_mapped() -> None:
    t = traffic(gpus=2)
    t.set_gpu(1, xid=79, uncorrectable_remapped_rows=2, correctable_remapped_rows=5)
    t.set_gpu(1, row_remap_failure=1)

    assert faults(render("dcgm", t), "1") == {
        "gpuwatch_gpu_xid_errors_total{xid=79}": 1.0,  # "Xid 79 happened"; the count is unknown
        "gpuwatch_gpu_remapped_rows_total{cause=uncorrectable}": 2.0,
        "gpuwatch_gpu_remapped_rows_total{cause=correctable}": 5.0,
        "gpuwatch_gpu_row_remap_failure": 1.0,
    }


def test_no_xid_yet_is_no_xid_series_and_a_healthy_remapper_reads_zero() -> None:
    got = faults(render("dcgm", traffic(gpus=1)), "0")

    assert got == {
        "gpuwatch_gpu_remapped_rows_total{cause=uncorrectable}": 0.0,
        "gpuwatch_gpu_remapped_rows_total{cause=correctable}": 0.0,
        "gpuwatch_gpu_row_remap_failure": 0.0,
    }


def test_a_csv_that_enables_row_remap_pending_and_declares_gauges_is_read_too() -> None:
    uuid = "GPU-1111"
    text = "".join(
        f'# TYPE {name} gauge\n{name}{{gpu="0",UUID="{uuid}",modelName="H100"}} {value}\n'
        for name, value in (
            ("DCGM_FI_DEV_GPU_UTIL", 10),
            ("DCGM_FI_DEV_ROW_REMAP_PENDING", 1),
            ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", 3),
        )
    )

    assert faults(text, "0") == {
        "gpuwatch_gpu_row_remap_pending": 1.0,
        "gpuwatch_gpu_remapped_rows_total{cause=correctable}": 3.0,
    }
