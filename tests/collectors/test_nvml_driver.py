"""NvmlCollector over the real pynvml and the fake libnvidia-ml.so.1 when the driver or the
library is in trouble: not loaded, failing, shut down by someone else, mismatched or absent,
and drivers lacking newer functions (missing from the fake, or not exported at all).

Values are asserted exactly, in base units, as a user sees them on /metrics.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from pathlib import Path

import pynvml
import pytest

from collectors.base import CollectError, Sample
from tests.collectors.nvml_helpers import (
    NOW,
    UUID0,
    UUID1,
    Key,
    MakeCollector,
    busy_series,
    clean_env,
    counting,
    idle_series,
    key,
    labels,
    make_proc_root,
    run_python,
    series,
    two_gpus,
)
from tests.conftest import FakeNvml
from tests.fakenvml.build import LIB_NAME, OLD_DRIVER_DIR, FakeProcess, GiB, write_config

# -- driver and library ----------------------------------------------------------------------


def test_driver_not_loaded_fails_then_recovers_when_it_comes_back(
    fake_nvml: FakeNvml, make_collector: MakeCollector
) -> None:
    calls: Counter[str] = Counter()
    collector = make_collector(nvml=counting(pynvml, calls))

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
    env = clean_env() | {"FAKE_NVML_CONFIG": str(tmp_path / "absent.txt")}
    env.pop("LD_LIBRARY_PATH", None)

    done = run_python(script, env)

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
    proc_root = make_proc_root(tmp_path, {4242: "0::/system.slice/vllm.service\n"})
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
    proc_root = make_proc_root(tmp_path, {4242: "0::/system.slice/vllm.service\n"})
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
    env = clean_env() | {
        "FAKE_NVML_CONFIG": str(config),
        "LD_LIBRARY_PATH": str(fake_nvml_dir / OLD_DRIVER_DIR),
    }

    done = run_python(script, env)

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
