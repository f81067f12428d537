"""Per-process SM utilization over the real pynvml and the fake libnvidia-ml.so.1
(``nvmlDeviceGetProcessUtilization``): reported where the driver gives it, 0 for a process it
lists as running but leaves out of its answer (idle), and absent, never 0, where it is not
supported or finds no sample."""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any

import pynvml

from tests.collectors.nvml_helpers import (
    BUSY,
    IDLE,
    NOW,
    UUID0,
    UUID1,
    MakeCollector,
    key,
    labels,
    make_proc_root,
    series,
)
from tests.conftest import FakeNvml
from tests.fakenvml.build import FakeNvmlConfig, FakeProcess, GiB

METRIC = "gpuwatch_gpu_process_utilization_ratio"


def utilization(got: dict[Any, float]) -> dict[Any, float]:
    return {k: v for k, v in got.items() if k[0] == METRIC}


def test_processes_get_their_sm_utilization_where_the_driver_gives_it(
    fake_nvml: FakeNvml, make_collector: MakeCollector, tmp_path: Path
) -> None:
    proc_root = make_proc_root(tmp_path, {
        100: "0::/system.slice/vllm-a.service\n",
        200: "0::/system.slice/vllm-b.service\n",
        300: "0::/system.slice/sglang-c.service\n",
    })  # fmt: skip
    fake_nvml.write(FakeNvmlConfig(gpus=(IDLE, BUSY), processes=(
        FakeProcess(gpu=0, pid=100, mem=30 * GiB, smutil=70),
        FakeProcess(gpu=0, pid=200, mem=10 * GiB, smutil=0),  # idle: NVML leaves it out
        FakeProcess(gpu=1, pid=300, mem=60 * GiB),  # GPU 1's driver: not supported
    )))  # fmt: skip

    got = series(make_collector(proc_root=proc_root).collect(NOW))

    assert utilization(got) == {
        key(METRIC, labels(UUID0, 0), pid="100", unit="vllm-a.service"): 0.7,
        key(METRIC, labels(UUID0, 0), pid="200", unit="vllm-b.service"): 0.0,
    }
    # The memory series are unchanged beside it.
    memory = "gpuwatch_gpu_process_memory_bytes"
    assert got[key(memory, labels(UUID1, 1), pid="300", unit="sglang-c.service")] == 60 * GiB


def test_no_sample_at_all_is_unknown_not_zero(
    fake_nvml: FakeNvml, make_collector: MakeCollector
) -> None:
    # Supported, but every process idle: NVML answers NOT_FOUND, and nothing is reported.
    fake_nvml.write(FakeNvmlConfig(gpus=(IDLE,), processes=(
        FakeProcess(gpu=0, pid=100, mem=GiB, smutil=0),
        FakeProcess(gpu=0, pid=200, mem=GiB, smutil=0),
    )))  # fmt: skip
    collector = make_collector()
    assert utilization(series(collector.collect(NOW))) == {}

    # The call failing with "not supported" on a driver that once had it: absent again.
    fake_nvml.write(FakeNvmlConfig(
        gpus=(IDLE,), processes=(FakeProcess(gpu=0, pid=100, mem=GiB, smutil=50),),
        fail={"nvmlDeviceGetProcessUtilization": pynvml.NVML_ERROR_NOT_SUPPORTED},
    ))  # fmt: skip
    got = series(collector.collect(NOW))
    assert utilization(got) == {}
    assert got[key("gpuwatch_gpu_process_memory_bytes", labels(UUID0, 0), pid="100",
                   unit="")] == GiB  # fmt: skip


def test_each_round_asks_for_the_samples_since_the_previous_one(
    fake_nvml: FakeNvml, make_collector: MakeCollector
) -> None:
    fake_nvml.write(FakeNvmlConfig(gpus=(IDLE,), processes=(
        FakeProcess(gpu=0, pid=100, mem=GiB, smutil=40),)))  # fmt: skip
    asked: list[int] = []
    real = pynvml.nvmlDeviceGetProcessUtilization

    def recording(handle: Any, last_seen: int) -> Any:
        asked.append(last_seen)
        samples = real(handle, last_seen)
        stamps.append(max(s.timeStamp for s in samples))
        return samples

    stamps: list[int] = []
    module = types.ModuleType("recording_pynvml")
    module.__dict__.update(pynvml.__dict__)
    module.nvmlDeviceGetProcessUtilization = recording  # type: ignore[attr-defined]
    collector = make_collector(nvml=module)

    for _ in range(3):
        assert utilization(series(collector.collect(NOW))) == {
            key(METRIC, labels(UUID0, 0), pid="100", unit=""): 0.4
        }

    assert asked == [0, stamps[0], stamps[1]]  # 0 first: every sample the driver holds


def test_a_sizing_call_that_answers_success_reads_nothing_and_keeps_the_gpu(
    fake_nvml: FakeNvml, make_collector: MakeCollector
) -> None:
    # pynvml raises NVMLError(NVML_SUCCESS) when the first (sizing) call succeeds with no
    # sample to size: not a failed GPU.
    fake_nvml.write(FakeNvmlConfig(gpus=(IDLE,), processes=(
        FakeProcess(gpu=0, pid=100, mem=GiB, smutil=40),)))  # fmt: skip

    def empty_success(handle: Any, last_seen: int) -> Any:
        raise pynvml.NVMLError(pynvml.NVML_SUCCESS)

    module = types.ModuleType("empty_success_pynvml")
    module.__dict__.update(pynvml.__dict__)
    module.nvmlDeviceGetProcessUtilization = empty_success  # type: ignore[attr-defined]

    got = series(make_collector(nvml=module).collect(NOW))

    assert utilization(got) == {}
    assert got[key("gpuwatch_gpu_process_memory_bytes", labels(UUID0, 0), pid="100",
                   unit="")] == GiB  # fmt: skip
