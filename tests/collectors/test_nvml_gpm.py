"""NVML's GPM ("what the SMs did") through the NvmlCollector, over the real pynvml and the fake
libnvidia-ml.so.1: values between two rounds' samples, per GPU and per MIG instance, nothing
where GPM is unsupported, failing or unknown to the driver, no sample buffer leaked, and GPUs
that a dcgm-exporter target profiles left to it."""

from __future__ import annotations

import ctypes
import json
from collections.abc import Iterator
from pathlib import Path

import pynvml
import pytest

from agent.collect.runner import CollectorRunner
from agent.sim.server import EngineServer
from agent.sim.traffic import Traffic
from collectors.base import Sample
from collectors.scrape import ScrapeCollector, TargetSpec
from tests.collectors.nvml_helpers import (
    BUSY,
    IDLE,
    NOW,
    UUID0,
    UUID1,
    Key,
    MakeCollector,
    busy_series,
    clean_env,
    fields_of,
    idle_series,
    key,
    labels,
    run_python,
    series,
)
from tests.conftest import FakeNvml
from tests.fakenvml.build import OLD_DRIVER_DIR, FakeGpm, FakeGpu, FakeMig, FakeNvmlConfig, GiB
from tests.fakenvml.build import write_config as write_hardware

GPM_METRICS = {
    "gpuwatch_gpu_sm_active_ratio", "gpuwatch_gpu_sm_occupancy_ratio",
    "gpuwatch_gpu_tensor_active_ratio", "gpuwatch_gpu_dram_active_ratio",
    "gpuwatch_gpu_fp16_active_ratio", "gpuwatch_gpu_fp32_active_ratio",
    "gpuwatch_gpu_fp64_active_ratio",
}  # fmt: skip
FULL = FakeGpm(sm_active=25, sm_occupancy=12, tensor=8, dram=40, fp16=3, fp32=6, fp64=0)
MIG_MODE = 1


def live_samples() -> int:
    """GPM sample buffers allocated in the fake and not freed yet (the whole process)."""
    if pynvml.nvmlLib is None:  # the first test on this worker: pynvml loads it at init
        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
    return ctypes.c_int.in_dll(pynvml.nvmlLib, "gpuwatch_fake_gpm_live_samples").value


def gpm_of(got: dict[Key, float]) -> dict[Key, float]:
    return {k: v for k, v in got.items() if k[0] in GPM_METRICS}


def full_series(uuid: str, index: int, **extra: str) -> dict[Key, float]:
    """The four gauges read by default (the FP pipes are opt-in: pipe_series)."""
    g = labels(uuid, index, **extra)
    return {
        key("gpuwatch_gpu_sm_active_ratio", g): 0.25,
        key("gpuwatch_gpu_sm_occupancy_ratio", g): 0.12,
        key("gpuwatch_gpu_tensor_active_ratio", g): 0.08,
        key("gpuwatch_gpu_dram_active_ratio", g): 0.40,
    }


def pipe_series(uuid: str, index: int) -> dict[Key, float]:
    g = labels(uuid, index)
    return {
        key("gpuwatch_gpu_fp16_active_ratio", g): 0.03,
        key("gpuwatch_gpu_fp32_active_ratio", g): 0.06,
        key("gpuwatch_gpu_fp64_active_ratio", g): 0.0,  # measured 0: a value, not absent
    }


def with_gpm(gpu: FakeGpu, gpm: FakeGpm | None = FULL, **changes: object) -> FakeGpu:
    return FakeGpu(**{**fields_of(gpu), "gpm": gpm, **changes})


@pytest.fixture
def live_before(fake_nvml: FakeNvml) -> Iterator[int]:
    """The fake's live-sample count before the test; every collector closed must give it back."""
    fake_nvml.write(FakeNvmlConfig())
    before = live_samples()
    yield before


# -- values between two rounds -----------------------------------------------------------------


def test_first_round_has_no_gpm_values_the_second_has_sm_active_below_full_utilization(
    fake_nvml: FakeNvml, make_collector: MakeCollector
) -> None:
    fake_nvml.write(FakeNvmlConfig(gpus=(with_gpm(IDLE, util=100),)))
    collector = make_collector()

    first = series(collector.collect(NOW))
    second = series(collector.collect(NOW))

    busy = key("gpuwatch_gpu_utilization_ratio", labels(UUID0, 0))
    assert first[busy] == second[busy] == 1.0
    assert gpm_of(first) == {}  # absent, never 0, until there are two samples
    assert gpm_of(second) == full_series(UUID0, 0)
    assert second[key("gpuwatch_gpu_sm_active_ratio", labels(UUID0, 0))] == 0.25


def test_the_fp_pipes_are_read_when_asked_for(
    fake_nvml: FakeNvml, make_collector: MakeCollector
) -> None:
    fake_nvml.write(FakeNvmlConfig(gpus=(with_gpm(IDLE, util=100),)))
    collector = make_collector(gpm_pipes=True)

    collector.collect(NOW)
    second = series(collector.collect(NOW))

    assert gpm_of(second) == full_series(UUID0, 0) | pipe_series(UUID0, 0)


def test_a_metric_the_gpu_does_not_give_is_absent_and_values_follow_the_hardware(
    fake_nvml: FakeNvml, make_collector: MakeCollector
) -> None:
    fake_nvml.write(FakeNvmlConfig(gpus=(with_gpm(IDLE, FakeGpm(sm_active=25, dram=40)),)))
    collector = make_collector()
    collector.collect(NOW)
    g = labels(UUID0, 0)

    assert gpm_of(series(collector.collect(NOW))) == {
        key("gpuwatch_gpu_sm_active_ratio", g): 0.25,
        key("gpuwatch_gpu_dram_active_ratio", g): 0.40,
    }
    fake_nvml.write(FakeNvmlConfig(gpus=(with_gpm(IDLE, FakeGpm(sm_active=90)),)))
    assert gpm_of(series(collector.collect(NOW))) == {key("gpuwatch_gpu_sm_active_ratio", g): 0.9}


def test_a_gpu_without_gpm_has_no_series_and_holds_no_samples(
    fake_nvml: FakeNvml, make_collector: MakeCollector, live_before: int
) -> None:
    fake_nvml.write(FakeNvmlConfig(gpus=(with_gpm(IDLE), BUSY)))
    collector = make_collector()

    rounds = [series(collector.collect(NOW)) for _ in range(3)]

    assert gpm_of(rounds[-1]) == full_series(UUID0, 0)  # nothing for the GPU without GPM
    assert rounds[-1] == idle_series() | full_series(UUID0, 0) | busy_series()
    assert live_samples() - live_before == 2  # the supported GPU's pair only


def test_mig_instances_get_their_own_values_with_mig_instance(
    fake_nvml: FakeNvml, make_collector: MakeCollector
) -> None:
    migs = (
        FakeMig(slot=0, uuid="MIG-aaaa", gi=1, total=40 * GiB, gpm=FakeGpm(sm_active=60)),
        FakeMig(slot=1, uuid="MIG-bbbb", gi=2, total=40 * GiB, gpm=FakeGpm(sm_active=10, dram=5)),
        FakeMig(slot=2, uuid="MIG-cccc", gi=3, total=40 * GiB),  # no metric: nothing
    )
    fake_nvml.write(FakeNvmlConfig(gpus=(with_gpm(IDLE, FakeGpm(sm_active=35), mig_mode=MIG_MODE,
                                                  migs=migs),)))  # fmt: skip
    collector = make_collector()
    collector.collect(NOW)

    got = gpm_of(series(collector.collect(NOW)))

    g = labels(UUID0, 0)
    assert got == {
        key("gpuwatch_gpu_sm_active_ratio", g): 0.35,
        key("gpuwatch_gpu_sm_active_ratio", g, mig_instance="MIG-aaaa"): 0.6,
        key("gpuwatch_gpu_sm_active_ratio", g, mig_instance="MIG-bbbb"): 0.1,
        key("gpuwatch_gpu_dram_active_ratio", g, mig_instance="MIG-bbbb"): 0.05,
    }


# -- failures ------------------------------------------------------------------------------------


def test_gpm_failing_on_one_gpu_keeps_its_other_samples_and_the_other_gpus(
    fake_nvml: FakeNvml, make_collector: MakeCollector
) -> None:
    unknown_error = 999  # NVML_ERROR_UNKNOWN: a per-device failure, not "unsupported"
    fake_nvml.write(FakeNvmlConfig(gpus=(with_gpm(IDLE), with_gpm(BUSY, gpm_fail=unknown_error))))
    collector = make_collector()

    rounds = [series(collector.collect(NOW)) for _ in range(3)]

    assert rounds[-1] == idle_series() | full_series(UUID0, 0) | busy_series()


def test_old_driver_without_gpm_symbols_invents_nothing_and_raises_nothing(
    fake_nvml_dir: Path, tmp_path: Path
) -> None:
    # IDLE has no reserved memory, which v1 memory info would count as used.
    config = write_hardware(tmp_path / "fake.txt", FakeNvmlConfig(gpus=(with_gpm(IDLE),)))
    script = (
        "import json, sys\n"
        "from datetime import datetime\n"
        "import pynvml\n"
        "from collectors.nvml import NvmlCollector\n"
        "c = NvmlCollector(host='box-1')\n"
        f"now = datetime.fromisoformat({NOW.isoformat()!r})\n"
        "rounds = [c.collect(now) for _ in range(3)]\n"
        "assert not hasattr(pynvml.nvmlLib, 'nvmlGpmSampleGet')\n"
        "c.close()\n"
        "json.dump([[s.metric, s.labels, s.value] for s in rounds[-1]], sys.stdout)\n"
    )
    env = clean_env() | {
        "FAKE_NVML_CONFIG": str(config),
        "LD_LIBRARY_PATH": str(fake_nvml_dir / OLD_DRIVER_DIR),
    }

    done = run_python(script, env)

    assert done.returncode == 0, done.stderr
    got = series(
        Sample(metric=m, labels=lab, value=v, ts=NOW) for m, lab, v in json.loads(done.stdout)
    )
    assert got == idle_series()


def test_support_unknown_to_this_driver_is_asked_once_and_nothing_invented(
    fake_nvml: FakeNvml, make_collector: MakeCollector, live_before: int
) -> None:
    fake_nvml.write(FakeNvmlConfig(gpus=(with_gpm(IDLE),), missing=("nvmlGpmQueryDeviceSupport",)))
    collector = make_collector()

    rounds = [series(collector.collect(NOW)) for _ in range(3)]

    assert rounds[-1] == idle_series()
    assert live_samples() == live_before


# -- sample buffers: bounded, freed ----------------------------------------------------------------


def test_samples_stay_two_per_device_over_many_rounds_and_are_freed_on_close(
    fake_nvml: FakeNvml, make_collector: MakeCollector, live_before: int
) -> None:
    mig = FakeMig(slot=0, uuid="MIG-aaaa", gi=1, gpm=FakeGpm(sm_active=60))
    fake_nvml.write(FakeNvmlConfig(gpus=(
        with_gpm(IDLE), with_gpm(BUSY, mig_mode=MIG_MODE, migs=(mig,)),
    )))  # fmt: skip
    collector = make_collector()

    for _ in range(200):
        collector.collect(NOW)
        assert live_samples() - live_before == 6  # two GPUs and one MIG instance, two each
    collector.close()

    assert live_samples() == live_before


def test_samples_of_a_gpu_or_mig_instance_that_goes_away_are_freed(
    fake_nvml: FakeNvml, make_collector: MakeCollector, live_before: int
) -> None:
    mig = FakeMig(slot=0, uuid="MIG-aaaa", gi=1, gpm=FakeGpm(sm_active=60))
    both = (with_gpm(IDLE), with_gpm(BUSY, mig_mode=MIG_MODE, migs=(mig,)))
    fake_nvml.write(FakeNvmlConfig(gpus=both))
    collector = make_collector()
    collector.collect(NOW)
    assert live_samples() - live_before == 6

    fake_nvml.write(FakeNvmlConfig(gpus=(both[0], with_gpm(BUSY, mig_mode=MIG_MODE))))
    collector.collect(NOW)
    assert live_samples() - live_before == 4  # the MIG instance was destroyed

    fake_nvml.write(FakeNvmlConfig(gpus=(both[0], with_gpm(BUSY, lost=True))))
    collector.collect(NOW)
    assert live_samples() - live_before == 2  # the GPU fell off the bus


def test_samples_are_freed_when_nvml_restarts_and_values_start_over(
    fake_nvml: FakeNvml, make_collector: MakeCollector, live_before: int
) -> None:
    hardware = FakeNvmlConfig(gpus=(with_gpm(IDLE),))
    fake_nvml.write(hardware)
    collector = make_collector()
    collector.collect(NOW)
    collector.collect(NOW)

    fake_nvml.remove()  # driver unloaded: the round fails
    with pytest.raises(Exception, match="NVML"):
        collector.collect(NOW)
    fake_nvml.write(hardware)
    again = series(collector.collect(NOW))

    assert gpm_of(again) == {}  # a new session's first round
    assert live_samples() - live_before == 2  # the old session's pair freed, a new one held
    assert gpm_of(series(collector.collect(NOW))) == full_series(UUID0, 0)


# -- GPUs a dcgm-exporter target profiles --------------------------------------------------------


def test_a_gpu_profiled_elsewhere_is_not_armed_and_its_samples_are_freed(
    fake_nvml: FakeNvml, make_collector: MakeCollector, live_before: int
) -> None:
    fake_nvml.write(FakeNvmlConfig(gpus=(with_gpm(IDLE), with_gpm(BUSY))))
    collector = make_collector()
    collector.collect(NOW)
    assert live_samples() - live_before == 4

    collector.profiled_elsewhere(frozenset({UUID1}))
    got = series(collector.collect(NOW))

    assert gpm_of(got) == full_series(UUID0, 0)
    assert got == idle_series() | full_series(UUID0, 0) | busy_series()
    assert live_samples() - live_before == 2


def test_the_runner_hands_gpus_a_dcgm_target_profiles_to_nvml_for_the_next_round(
    fake_nvml: FakeNvml, make_collector: MakeCollector, live_before: int
) -> None:
    fake_nvml.write(FakeNvmlConfig(gpus=(with_gpm(IDLE), with_gpm(BUSY))))
    traffic = Traffic(gpus=1)
    traffic.set_gpu(0, uuid=UUID1, sm_active=0.3)  # dcgm-exporter profiles the busy GPU
    server = EngineServer("dcgm", traffic).start()
    scrape = ScrapeCollector(TargetSpec(name="dcgm", url=server.url, engine="dcgm"), host="box-1")
    runner = CollectorRunner(host="box-1", collectors=[make_collector(), scrape])
    try:
        runner.run(NOW)
        second = runner.run(NOW)
    finally:
        runner.close()
        server.stop()

    sm_active = {
        (run.collector, s.labels["gpu_uuid"]): s.value
        for run in second.runs
        for s in run.samples
        if s.metric == "gpuwatch_gpu_sm_active_ratio"
    }
    assert sm_active == {("nvml", UUID0): 0.25, ("target/dcgm", UUID1): 0.3}
    assert live_samples() - live_before == 2
