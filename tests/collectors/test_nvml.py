"""NvmlCollector over the real pynvml and the fake libnvidia-ml.so.1, one situation per test.

Values are asserted exactly, in base units, as a user sees them on /metrics.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import types
from collections import Counter
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pynvml
import pytest

from collectors.base import CollectError, Sample
from collectors.nvml import NvmlCollector
from collectors.signals import GPU_SIGNALS
from tests.conftest import FakeNvml
from tests.fakenvml.build import (
    LIB_NAME,
    OLD_DRIVER_DIR,
    FakeGpu,
    FakeMig,
    FakeNvmlConfig,
    FakeProcess,
    GiB,
    is_fake,
    write_config,
)

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
REPO = Path(__file__).resolve().parents[2]
GPU_METRICS = {signal.name for signal in GPU_SIGNALS}
UUID0 = "GPU-00000000-1111-2222-3333-444444444444"
UUID1 = "GPU-55555555-6666-7777-8888-999999999999"
H100 = "NVIDIA H100 80GB HBM3"

Key = tuple[str, tuple[tuple[str, str], ...]]
MakeCollector = Callable[..., NvmlCollector]

IDLE = FakeGpu(uuid=UUID0)  # the defaults: 3 % busy, 1 GiB of 80 used, 65 W of 700 W
BUSY = FakeGpu(
    uuid=UUID1, util=97, memutil=80, used=70 * GiB, reserved=512 * 1024**2, power_mw=690_000,
    temp_c=78, sm_mhz=1_755, energy_mj=9_876_543_210, ecc_corrected=3, ecc_uncorrected=1,
    throttle=0x4,
)  # fmt: skip


def labels(uuid: str, index: int, **extra: str) -> dict[str, str]:
    return {"host": "box-1", "gpu_uuid": uuid, "gpu_index": str(index), **extra}


def key(metric: str, base: dict[str, str], **extra: str) -> Key:
    return metric, tuple(sorted((base | extra).items()))


def series(samples: Iterable[Sample]) -> dict[Key, float]:
    """Samples as {(metric, labels): value}; checks names, timestamps and no duplicates."""
    out: dict[Key, float] = {}
    for sample in samples:
        assert sample.metric in GPU_METRICS, sample.metric
        assert sample.ts == NOW
        k = (sample.metric, sample.label_key())
        assert k not in out, f"duplicate series {k}"
        out[k] = sample.value
    return out


def idle_series(index: int = 0, uuid: str = UUID0) -> dict[Key, float]:
    g = labels(uuid, index)
    return {
        key("gpuwatch_gpu_info", g, gpu_name=H100, driver_version="550.54.15",
            mig_mode="disabled"): 1.0,
        key("gpuwatch_gpu_utilization_ratio", g): 0.03,
        key("gpuwatch_gpu_memory_utilization_ratio", g): 0.01,
        key("gpuwatch_gpu_memory_used_bytes", g): 1073741824.0,
        key("gpuwatch_gpu_memory_total_bytes", g): 85899345920.0,
        key("gpuwatch_gpu_power_watts", g): 65.0,
        key("gpuwatch_gpu_power_limit_watts", g): 700.0,
        key("gpuwatch_gpu_temperature_celsius", g): 34.0,
        key("gpuwatch_gpu_sm_clock_hertz", g): 1_980_000_000.0,
        key("gpuwatch_gpu_energy_joules_total", g): 123456.789,
        key("gpuwatch_gpu_ecc_errors_total", g, type="corrected"): 0.0,
        key("gpuwatch_gpu_ecc_errors_total", g, type="uncorrected"): 0.0,
        key("gpuwatch_gpu_throttle_reasons", g): 1.0,
    }  # fmt: skip


def busy_series(index: int = 1) -> dict[Key, float]:
    g = labels(UUID1, index)
    return {
        key("gpuwatch_gpu_info", g, gpu_name=H100, driver_version="550.54.15",
            mig_mode="disabled"): 1.0,
        key("gpuwatch_gpu_utilization_ratio", g): 0.97,
        key("gpuwatch_gpu_memory_utilization_ratio", g): 0.80,
        key("gpuwatch_gpu_memory_used_bytes", g): 75161927680.0,  # reserved memory not counted
        key("gpuwatch_gpu_memory_total_bytes", g): 85899345920.0,
        key("gpuwatch_gpu_power_watts", g): 690.0,
        key("gpuwatch_gpu_power_limit_watts", g): 700.0,
        key("gpuwatch_gpu_temperature_celsius", g): 78.0,
        key("gpuwatch_gpu_sm_clock_hertz", g): 1_755_000_000.0,
        key("gpuwatch_gpu_energy_joules_total", g): 9876543.21,
        key("gpuwatch_gpu_ecc_errors_total", g, type="corrected"): 3.0,
        key("gpuwatch_gpu_ecc_errors_total", g, type="uncorrected"): 1.0,
        key("gpuwatch_gpu_throttle_reasons", g): 4.0,
    }  # fmt: skip


def two_gpus(**config: Any) -> FakeNvmlConfig:
    return FakeNvmlConfig(gpus=(IDLE, BUSY), **config)


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
    fake_nvml.write(FakeNvmlConfig(gpus=(IDLE, FakeGpu(**{**_fields(BUSY), "power_mw": None}))))

    got = series(make_collector().collect(NOW))

    expected = idle_series() | busy_series()
    del expected[key("gpuwatch_gpu_power_watts", labels(UUID1, 1))]
    assert got == expected


def test_zero_devices_report_nothing_and_no_error(
    fake_nvml: FakeNvml, make_collector: MakeCollector
) -> None:
    fake_nvml.write(FakeNvmlConfig(gpus=()))

    assert make_collector().collect(NOW) == []


def test_gpu_lost_at_start_is_dropped_and_the_other_still_reported(
    fake_nvml: FakeNvml, make_collector: MakeCollector
) -> None:
    fake_nvml.write(FakeNvmlConfig(gpus=(FakeGpu(uuid=UUID0, lost=True), BUSY)))
    collector = make_collector()

    got = series(collector.collect(NOW))
    fake_nvml.write(two_gpus())  # reset: GPU 0 answers again, with a handle to fetch anew
    after_reset = series(collector.collect(NOW))

    assert got == busy_series(index=1)
    assert after_reset == idle_series() | busy_series()


def test_gpu_lost_while_running_is_dropped_warned_once_and_back_after_reset(
    fake_nvml: FakeNvml, make_collector: MakeCollector, caplog: pytest.LogCaptureFixture
) -> None:
    collector = make_collector()
    fake_nvml.write(two_gpus())
    collector.collect(NOW)

    fake_nvml.write(FakeNvmlConfig(gpus=(IDLE, FakeGpu(**{**_fields(BUSY), "lost": True}))))
    with caplog.at_level(logging.WARNING, logger="collectors.nvml"):
        first = series(collector.collect(NOW))
        second = series(collector.collect(NOW))
    fake_nvml.write(two_gpus())
    after_reset = series(collector.collect(NOW))

    assert first == second == idle_series()
    lost_warnings = [r for r in caplog.records if "GPU is lost" in r.getMessage()]
    assert len(lost_warnings) == 1
    assert after_reset == idle_series() | busy_series()


def test_every_gpu_lost_is_a_collect_error_not_an_idle_host(
    fake_nvml: FakeNvml, make_collector: MakeCollector
) -> None:
    fake_nvml.write(FakeNvmlConfig(gpus=(FakeGpu(uuid=UUID0, lost=True),)))

    with pytest.raises(CollectError, match="GPU is lost"):
        make_collector().collect(NOW)


# -- driver and library ----------------------------------------------------------------------


def test_driver_not_loaded_fails_then_recovers_when_it_comes_back(
    fake_nvml: FakeNvml, make_collector: MakeCollector
) -> None:
    calls: Counter[str] = Counter()
    collector = make_collector(nvml=_counting(pynvml, calls))

    with pytest.raises(CollectError, match="driver not loaded"):
        collector.collect(NOW)  # no config file: the fake has no driver
    fake_nvml.write(two_gpus())
    assert series(collector.collect(NOW)) == idle_series() | busy_series()

    fake_nvml.remove()  # the driver goes away under a running session
    with pytest.raises(CollectError, match="Driver Not Loaded"):
        collector.collect(NOW)
    with pytest.raises(CollectError, match="driver not loaded"):
        collector.collect(NOW)  # re-initialising fails while it is away
    fake_nvml.write(two_gpus())
    assert series(collector.collect(NOW)) == idle_series() | busy_series()
    # The broken session was let go exactly once before NVML was started again.
    assert (calls["nvmlShutdown"], calls["nvmlInit"]) == (1, 4)


def test_a_host_wide_call_failing_is_a_collect_error_and_retried(
    fake_nvml: FakeNvml, make_collector: MakeCollector
) -> None:
    collector = make_collector()
    fake_nvml.write(two_gpus(fail={"nvmlDeviceGetCount_v2": pynvml.NVML_ERROR_UNKNOWN}))

    with pytest.raises(CollectError, match="nvmlDeviceGetCount: Unknown Error"):
        collector.collect(NOW)

    fake_nvml.write(two_gpus())
    assert series(collector.collect(NOW)) == idle_series() | busy_series()


def test_nvml_shut_down_by_someone_else_is_reinitialised_next_round(
    fake_nvml: FakeNvml, make_collector: MakeCollector
) -> None:
    collector = make_collector()
    fake_nvml.write(two_gpus())
    collector.collect(NOW)

    pynvml.nvmlShutdown()  # another library in this process drops NVML's last reference
    with pytest.raises(CollectError, match="Uninitialized"):
        collector.collect(NOW)

    assert series(collector.collect(NOW)) == idle_series() | busy_series()


def test_driver_library_version_mismatch_says_to_reboot(
    fake_nvml: FakeNvml, make_collector: MakeCollector
) -> None:
    fake_nvml.write(two_gpus(fail={"nvmlInitWithFlags": pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH}))

    with pytest.raises(CollectError, match="reboot"):
        make_collector().collect(NOW)


def test_library_absent_names_the_missing_library(tmp_path: Path) -> None:
    script = (
        "import ctypes, sys\n"
        "from datetime import datetime, UTC\n"
        "try:\n"
        f"    ctypes.CDLL({LIB_NAME!r})\n"
        "except OSError:\n"
        "    pass\n"
        "else:\n"
        "    sys.exit(77)  # a real driver is installed on this machine\n"
        "from collectors.base import CollectError\n"
        "from collectors.nvml import NvmlCollector\n"
        "try:\n"
        "    NvmlCollector(host='box-1').collect(datetime.now(UTC))\n"
        "except CollectError as exc:\n"
        "    print(exc)\n"
        "    sys.exit(0)\n"
        "sys.exit(1)\n"
    )
    env = _clean_env() | {"FAKE_NVML_CONFIG": str(tmp_path / "absent.txt")}
    env.pop("LD_LIBRARY_PATH", None)

    done = _run_python(script, env)

    if done.returncode == 77:
        pytest.skip("a real libnvidia-ml.so.1 is installed here")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "libnvidia-ml.so.1 not found" in done.stdout


# -- drivers lacking newer functions ---------------------------------------------------------


def test_driver_lacking_functions_omits_only_their_fields(
    fake_nvml: FakeNvml, make_collector: MakeCollector, caplog: pytest.LogCaptureFixture
) -> None:
    fake_nvml.write(two_gpus(missing=(
        "nvmlDeviceGetPowerUsage", "nvmlDeviceGetTotalEnergyConsumption",
    )))  # fmt: skip
    collector = make_collector()

    with caplog.at_level(logging.INFO, logger="collectors.nvml"):
        got = series(collector.collect(NOW))
        again = series(collector.collect(NOW))

    expected = idle_series() | busy_series()
    for uuid, index in ((UUID0, 0), (UUID1, 1)):
        del expected[key("gpuwatch_gpu_power_watts", labels(uuid, index))]
        del expected[key("gpuwatch_gpu_energy_joules_total", labels(uuid, index))]
    assert got == again == expected
    said = Counter(r.getMessage().split()[1] for r in caplog.records if "unavailable" in r.message)
    assert said == {"nvmlDeviceGetPowerUsage": 1, "nvmlDeviceGetTotalEnergyConsumption": 1}


def test_driver_lacking_newer_versions_falls_back_to_older_ones(
    fake_nvml: FakeNvml, make_collector: MakeCollector, tmp_path: Path
) -> None:
    proc_root = _proc_root(tmp_path, {4242: "0::/system.slice/vllm.service\n"})
    fake_nvml.write(two_gpus(
        processes=(FakeProcess(gpu=1, pid=4242, mem=60 * GiB),),
        missing=(
            "nvmlDeviceGetMemoryInfo_v2", "nvmlDeviceGetTemperatureV",
            "nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetComputeRunningProcesses_v3",
            "nvmlDeviceGetGraphicsRunningProcesses_v3",
        ),
    ))  # fmt: skip

    got = series(make_collector(proc_root=proc_root).collect(NOW))

    assert got == _old_driver_expectation()


def test_old_driver_library_without_newer_symbols(fake_nvml_dir: Path, tmp_path: Path) -> None:
    """The realistic case: the symbols are not exported at all (pynvml's lookup fails)."""
    config = write_config(tmp_path / "fake.txt", two_gpus(
        processes=(FakeProcess(gpu=1, pid=4242, mem=60 * GiB),),
    ))  # fmt: skip
    proc_root = _proc_root(tmp_path, {4242: "0::/system.slice/vllm.service\n"})
    script = (
        "import json, sys\n"
        "from datetime import datetime, UTC\n"
        "from pathlib import Path\n"
        "import pynvml\n"
        "from collectors.nvml import NvmlCollector\n"
        f"c = NvmlCollector(host='box-1', proc_root=Path({str(proc_root)!r}))\n"
        f"samples = c.collect(datetime.fromisoformat({NOW.isoformat()!r}))\n"
        "lib = pynvml.nvmlLib\n"
        "assert hasattr(lib, 'gpuwatch_fake_nvml')\n"
        "assert not hasattr(lib, 'nvmlDeviceGetMemoryInfo_v2')\n"
        "json.dump([[s.metric, s.labels, s.value] for s in samples], sys.stdout)\n"
    )  # fmt: skip
    env = _clean_env() | {
        "FAKE_NVML_CONFIG": str(config),
        "LD_LIBRARY_PATH": str(fake_nvml_dir / OLD_DRIVER_DIR),
    }

    done = _run_python(script, env)

    assert done.returncode == 0, done.stderr
    got = series(
        Sample(metric=m, labels=lab, value=v, ts=NOW) for m, lab, v in json.loads(done.stdout)
    )
    assert got == _old_driver_expectation()


def _old_driver_expectation() -> dict[Key, float]:
    expected = idle_series() | busy_series()
    # nvmlDeviceGetMemoryInfo (v1) counts the driver's reserved memory as used.
    used = key("gpuwatch_gpu_memory_used_bytes", labels(UUID1, 1))
    expected[used] = 75161927680.0 + 512 * 1024**2
    expected[key("gpuwatch_gpu_process_memory_bytes", labels(UUID1, 1), pid="4242",
                 unit="vllm.service")] = 64424509440.0  # fmt: skip
    return expected


# -- MIG -----------------------------------------------------------------------------------------


def test_mig_instances_are_reported_with_a_mig_instance_label(
    fake_nvml: FakeNvml, make_collector: MakeCollector, tmp_path: Path
) -> None:
    mig_a = "MIG-aaaaaaaa-0000-0000-0000-000000000000"
    mig_b = "MIG-bbbbbbbb-0000-0000-0000-000000000000"
    proc_root = _proc_root(tmp_path, {
        100: "0::/system.slice/vllm-small.service\n", 200: "0::/system.slice/vllm-big.service\n",
    })  # fmt: skip
    mig_gpu = FakeGpu(
        uuid=UUID0, util=None, memutil=None, mig_mode=1, migs=(
            FakeMig(slot=0, uuid=mig_a, total=10 * GiB, used=2 * GiB, gi=7, ci=0),
            FakeMig(slot=3, uuid=mig_b, total=40 * GiB, used=30 * GiB, reserved=GiB, gi=1, ci=0),
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
    proc_root = _proc_root(tmp_path, {
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
    collector = make_collector(nvml=_counting(pynvml, calls))

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

    done = _run_python(script, _clean_env(), timeout=120)

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


# -- helpers ---------------------------------------------------------------------------------


def _fields(gpu: FakeGpu) -> dict[str, Any]:
    return {name: getattr(gpu, name) for name in gpu.__dataclass_fields__}


def _proc_root(tmp_path: Path, cgroups: dict[int, str]) -> Path:
    root = tmp_path / "proc"
    for pid, text in cgroups.items():
        (root / str(pid)).mkdir(parents=True)
        (root / str(pid) / "cgroup").write_text(text)
    return root


def _clean_env() -> dict[str, str]:
    """This environment without the fake: no config, no preload, no fake on the search path."""
    env = {k: v for k, v in os.environ.items() if k not in ("FAKE_NVML_CONFIG", "LD_PRELOAD")}
    search = [
        d for d in env.get("LD_LIBRARY_PATH", "").split(":")
        if d and not is_fake(Path(d) / LIB_NAME)
    ]  # fmt: skip
    env["LD_LIBRARY_PATH"] = ":".join(search)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


def _run_python(
    script: str, env: dict[str, str], timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", script], env=env, cwd=REPO, capture_output=True, text=True,
        timeout=timeout, check=False,
    )  # fmt: skip


def _counting(module: types.ModuleType, calls: Counter[str]) -> types.ModuleType:
    """``module`` with every nvml* function counting its calls by name."""
    proxy = types.ModuleType(f"counting_{module.__name__}")
    for name in dir(module):
        value = getattr(module, name)
        if name.startswith("nvml") and callable(value) and not isinstance(value, type):
            value = _counted(name, value, calls)
        setattr(proxy, name, value)
    return proxy


def _counted(name: str, fn: Callable[..., Any], calls: Counter[str]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        calls[name] += 1
        return fn(*args, **kwargs)

    return wrapper
