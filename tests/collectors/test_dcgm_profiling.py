"""dcgm-exporter's profiling (DCP) fields as the canonical SM-activity gauges, per GPU and per
MIG instance, read from a body as a scrape keeps it (the simulator's, and a hand-written MIG
one). dcgm-exporter already gives these as ratios (0-1), so they are taken as they are."""

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
UUID = "GPU-8f2a6b0e-1c2d-4e5f-8a9b-0c1d2e3f4a5b"


def profiling(text: str) -> dict[tuple[str, str, str], float]:
    """(metric, gpu_index, mig_instance or "") -> value, for the profiling gauges only."""
    mapped = dcgm.map_samples(Exposition.parse(text, keep=read_by_a_mapper), CONTEXT)
    wanted = set(dcgm.PROFILING.values())
    return {
        (s.metric, s.labels["gpu_index"], s.labels.get("mig_instance", "")): s.value
        for s in mapped
        if s.metric in wanted
    }


def test_sm_active_025_is_sm_active_ratio_025_for_that_gpu() -> None:
    t = traffic(gpus=2)
    t.set_gpu(1, sm_active=0.25)

    got = profiling(render("dcgm", t))

    assert got[("gpuwatch_gpu_sm_active_ratio", "1", "")] == 0.25
    assert ("gpuwatch_gpu_sm_active_ratio", "0", "") not in got  # not set there: absent


def test_every_profiling_field_maps_to_its_gauge_as_a_ratio() -> None:
    t = traffic(gpus=1)
    t.set_gpu(0, sm_active=0.5, sm_occupancy=0.2, tensor_active=0.125, dram_active=0.75)
    t.set_gpu(0, fp16_active=0.0625, fp32_active=0.03125, fp64_active=0.0)

    assert profiling(render("dcgm", t)) == {
        ("gpuwatch_gpu_sm_active_ratio", "0", ""): 0.5,
        ("gpuwatch_gpu_sm_occupancy_ratio", "0", ""): 0.2,
        ("gpuwatch_gpu_tensor_active_ratio", "0", ""): 0.125,
        ("gpuwatch_gpu_dram_active_ratio", "0", ""): 0.75,
        ("gpuwatch_gpu_fp16_active_ratio", "0", ""): 0.0625,
        ("gpuwatch_gpu_fp32_active_ratio", "0", ""): 0.03125,
        ("gpuwatch_gpu_fp64_active_ratio", "0", ""): 0.0,
    }


def test_the_default_csv_gives_tensor_and_dram_but_no_sm_activity() -> None:
    text = render("dcgm", traffic(gpus=1))

    assert "DCGM_FI_PROF_SM_ACTIVE" not in text  # commented out in dcp-metrics-included.csv
    assert set(profiling(text)) == {
        ("gpuwatch_gpu_tensor_active_ratio", "0", ""),
        ("gpuwatch_gpu_dram_active_ratio", "0", ""),
    }


def test_mig_instances_get_their_own_profiling_values() -> None:
    labels = f'gpu="0",UUID="{UUID}",device="nvidia0",modelName="NVIDIA H100 80GB HBM3"'
    text = (
        "# TYPE DCGM_FI_PROF_SM_ACTIVE gauge\n"
        f'DCGM_FI_PROF_SM_ACTIVE{{{labels},GPU_I_PROFILE="3g.40gb",GPU_I_ID="1"}} 0.600000\n'
        f'DCGM_FI_PROF_SM_ACTIVE{{{labels},GPU_I_PROFILE="3g.40gb",GPU_I_ID="2"}} 0.100000\n'
        "# TYPE DCGM_FI_PROF_PIPE_TENSOR_ACTIVE gauge\n"
        f'DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{{{labels},GPU_I_PROFILE="3g.40gb",GPU_I_ID="2"}} 0.05\n'
    )

    assert profiling(text) == {
        ("gpuwatch_gpu_sm_active_ratio", "0", "1"): 0.6,
        ("gpuwatch_gpu_sm_active_ratio", "0", "2"): 0.1,
        ("gpuwatch_gpu_tensor_active_ratio", "0", "2"): 0.05,
    }


def test_the_profiling_fields_are_kept_by_a_scrape() -> None:
    assert set(dcgm.PROFILING) <= set(dcgm.READS)
    assert all(read_by_a_mapper(field) for field in dcgm.PROFILING)
