"""Shared by the NvmlCollector tests: two fake GPUs (one idle, one busy) and the series a user
sees on /metrics for each, samples read back as {(metric, labels): value}, a fake /proc, and
running Python without the fake or with every nvml* call counted."""

from __future__ import annotations

import os
import subprocess
import sys
import types
from collections import Counter
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from collectors.base import Sample
from collectors.nvml import NvmlCollector
from collectors.signals import GPU_SIGNALS
from tests.fakenvml.build import LIB_NAME, FakeGpu, FakeNvmlConfig, GiB, is_fake

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


def fields_of(gpu: FakeGpu) -> dict[str, Any]:
    """A fake GPU's fields, to build a copy with some of them changed."""
    return {name: getattr(gpu, name) for name in gpu.__dataclass_fields__}


def make_proc_root(tmp_path: Path, cgroups: dict[int, str]) -> Path:
    """A /proc with these processes' cgroup files (pid -> content), for the collector."""
    root = tmp_path / "proc"
    for pid, text in cgroups.items():
        (root / str(pid)).mkdir(parents=True)
        (root / str(pid) / "cgroup").write_text(text)
    return root


def clean_env() -> dict[str, str]:
    """This environment without the fake: no config, no preload, no fake on the search path."""
    env = {k: v for k, v in os.environ.items() if k not in ("FAKE_NVML_CONFIG", "LD_PRELOAD")}
    search = [
        d for d in env.get("LD_LIBRARY_PATH", "").split(":")
        if d and not is_fake(Path(d) / LIB_NAME)
    ]  # fmt: skip
    env["LD_LIBRARY_PATH"] = ":".join(search)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


def run_python(
    script: str, env: dict[str, str], timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", script], env=env, cwd=REPO, capture_output=True, text=True,
        timeout=timeout, check=False,
    )  # fmt: skip


def counting(module: types.ModuleType, calls: Counter[str]) -> types.ModuleType:
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
