"""NvmlCollector over the real pynvml and the fake libnvidia-ml.so.1, one situation per test:
healthy and partial hardware, MIG, processes mapped to their units, the NVML calls of a
steady round, and a real GPU where there is one. Driver and library trouble is in
test_nvml_driver.py.

Values are asserted exactly, in base units, as a user sees them on /metrics.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from pathlib import Path

import pynvml
import pytest

from tests.collectors.nvml_helpers import (
    BUSY,
    GPU_METRICS,
    H100,
    IDLE,
    NOW,
    UUID0,
    UUID1,
    MakeCollector,
    busy_series,
    clean_env,
    counting,
    fields_of,
    idle_series,
    key,
    labels,
    make_proc_root,
    run_python,
    series,
    two_gpus,
)
from tests.conftest import FakeNvml
from tests.fakenvml.build import FakeGpu, FakeMig, FakeNvmlConfig, FakeProcess, GiB

# -- healthy and partial hardware ------------------------------------------------------------


def test_two_healthy_gpus_report_every_signal_in_base_units(
    fake_nvml: FakeNvml, make_collector: MakeCollector
) -> None:
    fake_nvml.write(two_gpus())

    got = series(make_collector().collect(NOW))

    assert got == idle_series() | busy_series()


def test_power_not_supported_omits_only_the_power_sample(
    fake_nvml: FakeNvml, make_collector: MakeCollector
) -> None:
    fake_nvml.write(FakeNvmlConfig(gpus=(IDLE, FakeGpu(**{**fields_of(BUSY), "power_mw": None}))))

    got = series(make_collector().collect(NOW))

    expected = idle_series() | busy_series()
    del expected[key("gpuwatch_gpu_power_watts", labels(UUID1, 1))]
    assert got == expected


def test_zero_devices_report_nothing_and_no_error(
    fake_nvml: FakeNvml, make_collector: MakeCollector
) -> None:
    fake_nvml.write(FakeNvmlConfig(gpus=()))

    assert make_collector().collect(NOW) == []


def test_gpu_lost_at_start_is_lost_by_index_and_the_other_still_reported(
    fake_nvml: FakeNvml, make_collector: MakeCollector
) -> None:
    fake_nvml.write(FakeNvmlConfig(gpus=(FakeGpu(uuid=UUID0, lost=True), BUSY)))
    collector = make_collector()

    got = series(collector.collect(NOW))
    fake_nvml.write(two_gpus())  # reset: GPU 0 answers again, with a handle to fetch anew
    after_reset = series(collector.collect(NOW))

    # Lost before gpuwatch could read it: NVML gives it no handle, so only its index is known.
    unknown = labels("unknown", 0, pci_bus_id="unknown")
    assert got == busy_series(index=1) | {key("gpuwatch_gpu_lost", unknown): 1.0}
    assert after_reset == idle_series() | busy_series()


def test_gpu_lost_while_running_is_reported_lost_warned_once_and_back_after_reset(
    fake_nvml: FakeNvml, make_collector: MakeCollector, caplog: pytest.LogCaptureFixture
) -> None:
    collector = make_collector()
    fake_nvml.write(two_gpus())
    collector.collect(NOW)

    fake_nvml.write(FakeNvmlConfig(gpus=(IDLE, FakeGpu(**{**fields_of(BUSY), "lost": True}))))
    with caplog.at_level(logging.WARNING, logger="collectors.nvml"):
        first = series(collector.collect(NOW))
        second = series(collector.collect(NOW))
    fake_nvml.write(two_gpus())
    after_reset = series(collector.collect(NOW))

    # NVML still answers: the lost GPU is named by its UUID and bus id, not merely dropped.
    lost = key("gpuwatch_gpu_lost", labels(UUID1, 1), pci_bus_id="00000000:19:00.0")
    assert first == second == idle_series() | {lost: 1.0}
    lost_warnings = [r for r in caplog.records if "GPU is lost" in r.getMessage()]
    assert len(lost_warnings) == 1
    assert after_reset == idle_series() | busy_series()


def test_every_gpu_lost_is_each_gpu_lost_not_an_idle_or_blind_host(
    fake_nvml: FakeNvml, make_collector: MakeCollector
) -> None:
    # NVML answers; each GPU is lost (not one CollectorDown once every GPU is gone).
    fake_nvml.write(FakeNvmlConfig(gpus=(FakeGpu(uuid=UUID0, lost=True),)))

    got = series(make_collector().collect(NOW))

    unknown = labels("unknown", 0, pci_bus_id="unknown")
    assert got == {key("gpuwatch_gpu_lost", unknown): 1.0}  # no utilization: never idle


# -- MIG -----------------------------------------------------------------------------------------


def test_mig_instances_are_reported_with_a_mig_instance_label(
    fake_nvml: FakeNvml, make_collector: MakeCollector, tmp_path: Path
) -> None:
    mig_a = "MIG-aaaaaaaa-0000-0000-0000-000000000000"
    mig_b = "MIG-bbbbbbbb-0000-0000-0000-000000000000"
    proc_root = make_proc_root(tmp_path, {
        100: "0::/system.slice/vllm-small.service\n", 200: "0::/system.slice/vllm-big.service\n",
    })  # fmt: skip
    mig_gpu = FakeGpu(
        uuid=UUID0, util=None, memutil=None, mig_mode=1, migs=(
            FakeMig(slot=0, uuid=mig_a, total=10 * GiB, used=2 * GiB, gi=7, ci=0),
            FakeMig(slot=3, uuid=mig_b, total=40 * GiB, used=30 * GiB, reserved=GiB, gi=1, ci=0,
                    slices=4),
        ),
    )  # fmt: skip
    fake_nvml.write(FakeNvmlConfig(gpus=(mig_gpu, BUSY), processes=(
        FakeProcess(gpu=0, mig=0, pid=100, mem=GiB),
        FakeProcess(gpu=0, mig=3, pid=200, mem=29 * GiB),
    )))  # fmt: skip

    got = series(make_collector(proc_root=proc_root).collect(NOW))

    g = labels(UUID0, 0)
    expected = idle_series() | busy_series()
    del expected[key("gpuwatch_gpu_utilization_ratio", g)]  # NVML: not supported with MIG on
    del expected[key("gpuwatch_gpu_memory_utilization_ratio", g)]
    del expected[key("gpuwatch_gpu_info", g, gpu_name=H100, driver_version="550.54.15",
                     mig_mode="disabled")]  # fmt: skip
    expected |= {
        key("gpuwatch_gpu_info", g, gpu_name=H100, driver_version="550.54.15",
            mig_mode="enabled"): 1.0,
        key("gpuwatch_gpu_mig_slices", g): 7.0,  # the H100's MIG device slots
        key("gpuwatch_gpu_mig_slices", g, mig_instance=mig_b): 4.0,  # mig_a: not supported
        key("gpuwatch_gpu_memory_used_bytes", g, mig_instance=mig_a): 2 * GiB,
        key("gpuwatch_gpu_memory_total_bytes", g, mig_instance=mig_a): 10 * GiB,
        key("gpuwatch_gpu_process_memory_bytes", g, mig_instance=mig_a, pid="100",
            unit="vllm-small.service"): GiB,
        key("gpuwatch_gpu_memory_used_bytes", g, mig_instance=mig_b): 30 * GiB,
        key("gpuwatch_gpu_memory_total_bytes", g, mig_instance=mig_b): 40 * GiB,
        key("gpuwatch_gpu_process_memory_bytes", g, mig_instance=mig_b, pid="200",
            unit="vllm-big.service"): 29 * GiB,
    }  # fmt: skip
    assert got == expected


# -- processes -------------------------------------------------------------------------------


def test_processes_are_mapped_to_their_systemd_unit_or_container(
    fake_nvml: FakeNvml, make_collector: MakeCollector, tmp_path: Path
) -> None:
    container = "4f1c0ffee" + "0" * 55
    proc_root = make_proc_root(tmp_path, {
        1234: "0::/system.slice/vllm.service\n",
        2345: f"0::/system.slice/docker-{container}.scope\n",
        4567: "0::/user.slice/user-1000.slice/user@1000.service/app.slice/comfyui.service\n",
    })  # 3456 has exited: NVML still lists it, /proc no longer has it  # fmt: skip
    fake_nvml.write(two_gpus(processes=(
        FakeProcess(gpu=0, pid=1234, mem=40 * GiB),
        FakeProcess(gpu=0, pid=2345, mem=20 * GiB),
        FakeProcess(gpu=1, pid=3456, mem=512 * 1024**2),
        FakeProcess(gpu=1, pid=4567, mem=3 * GiB, type="both"),  # compute and graphics
        FakeProcess(gpu=1, pid=5678, mem=None),  # usedGpuMemory not available
    )))  # fmt: skip

    got = series(make_collector(proc_root=proc_root).collect(NOW))

    processes = {k: v for k, v in got.items() if k[0] == "gpuwatch_gpu_process_memory_bytes"}
    metric = "gpuwatch_gpu_process_memory_bytes"
    assert processes == {
        key(metric, labels(UUID0, 0), pid="1234", unit="vllm.service"): 40 * GiB,
        key(metric, labels(UUID0, 0), pid="2345", unit=f"docker://{container}"): 20 * GiB,
        key(metric, labels(UUID1, 1), pid="3456", unit=""): 512 * 1024**2,
        key(metric, labels(UUID1, 1), pid="4567", unit="comfyui.service"): 3 * GiB,
    }
    assert {k: v for k, v in got.items() if k[0] != metric} == idle_series() | busy_series()


# -- cost per round --------------------------------------------------------------------------


def test_steady_rounds_do_not_ask_again_what_a_session_already_knows(
    fake_nvml: FakeNvml, make_collector: MakeCollector
) -> None:
    fake_nvml.write(two_gpus(missing=("nvmlDeviceGetCurrentClocksEventReasons",)))
    calls: Counter[str] = Counter()
    collector = make_collector(nvml=counting(pynvml, calls))

    for _ in range(3):
        collector.collect(NOW)

    assert calls["nvmlInit"] == 1
    assert calls["nvmlSystemGetDriverVersion"] == 1
    assert calls["nvmlDeviceGetCount"] == 1
    assert calls["nvmlDeviceGetHandleByIndex"] == 2
    assert calls["nvmlDeviceGetName"] == 2
    assert calls["nvmlDeviceGetUUID"] == 2
    assert calls["nvmlDeviceGetCurrentClocksEventReasons"] == 1  # missing: asked once only
    assert calls["nvmlDeviceGetCurrentClocksThrottleReasons"] == 6


# -- a real GPU ------------------------------------------------------------------------------


@pytest.mark.gpu
def test_real_gpu_reports_plausible_values(tmp_path: Path) -> None:
    script = (
        "import json, sys\n"
        "from datetime import datetime, UTC\n"
        "import pynvml\n"
        "try:\n"
        "    pynvml.nvmlInit()\n"
        "except pynvml.NVMLError as exc:\n"
        "    print(exc); sys.exit(77)\n"
        "assert not hasattr(pynvml.nvmlLib, 'gpuwatch_fake_nvml'), 'picked up the fake'\n"
        "from collectors.nvml import NvmlCollector\n"
        "c = NvmlCollector(host='box-1')\n"
        "samples = c.collect(datetime.now(UTC)) + c.collect(datetime.now(UTC))\n"
        "c.close()\n"
        "json.dump([[s.metric, s.labels, s.value] for s in samples], sys.stdout)\n"
    )

    done = run_python(script, clean_env(), timeout=120)

    if done.returncode == 77:
        pytest.skip(f"no real NVML here: {done.stdout.strip()}")
    assert done.returncode == 0, done.stderr
    samples = json.loads(done.stdout)
    info = [lab for metric, lab, _ in samples if metric == "gpuwatch_gpu_info"]
    assert info, "no GPU reported"
    assert all(lab["gpu_uuid"].startswith("GPU-") and lab["gpu_name"] for lab in info)
    for metric, lab, value in samples:
        assert metric in GPU_METRICS
        assert {"host", "gpu_uuid", "gpu_index"} <= lab.keys()
        if metric.endswith("_ratio"):
            assert 0 <= value <= 1, (metric, value)
        if metric in ("gpuwatch_gpu_memory_total_bytes", "gpuwatch_gpu_power_limit_watts"):
            assert value > 0, (metric, value)
        if metric == "gpuwatch_gpu_temperature_celsius":
            assert 0 < value < 120
