"""The box under test: is there a real NVIDIA GPU, and the processes that read it (gpuwatch's
CLI, a two-round probe of its NVML collector, nvidia-smi), each in an environment given by
the caller, so that the self-test can point the very same code at the fake NVML.

Everything runs in a subprocess: which ``libnvidia-ml.so.1`` a process loads is fixed when it
first loads it, and the pytest process must not pin one for the tests after it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tests.fakenvml.build import LIB_NAME, is_fake
from tests.realgpu.compare import SMI_QUERY

REPO = Path(__file__).resolve().parents[2]
CONSOLE_SCRIPT = Path(sys.executable).with_name("gpuwatch")  # `pip install -e .` puts it there

# Prints the path of the libnvidia-ml.so.1 the dynamic linker picks in this environment (what
# pynvml's CDLL gets), or "!" and the loader's error.
_WHICH_LIBRARY = f"""
import ctypes, sys
try:
    ctypes.CDLL({LIB_NAME!r})
except OSError as exc:
    print("!", exc)
    sys.exit(0)
with open("/proc/self/maps") as maps:
    for line in maps:
        if {LIB_NAME!r} in line or "libnvidia-ml.so" in line:
            print(line.split(None, 5)[-1].strip())
            break
"""

# Two rounds of the NVML collector `seconds` apart: GPM needs a sample pair, so the first
# round of any process (`collect --once` included) has none by design. Prints the second
# round as `collect --json` lines, then the driver's own GPM support per GPU.
_PROBE = """
import json, sys, time
from datetime import UTC, datetime
import pynvml
from collectors.nvml import NvmlCollector

collector = NvmlCollector(host="realgpu-probe")
collector.collect(datetime.now(UTC))
time.sleep(float(sys.argv[1]))
samples = collector.collect(datetime.now(UTC))
collector.close()
for s in samples:
    print(json.dumps({"collector": "nvml", "metric": s.metric, "labels": dict(s.labels),
                      "value": s.value, "ts": s.ts.isoformat()}))
pynvml.nvmlInit()
support = {}
for i in range(pynvml.nvmlDeviceGetCount()):
    h = pynvml.nvmlDeviceGetHandleByIndex(i)
    uuid = pynvml.nvmlDeviceGetUUID(h)
    uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
    try:
        support[uuid] = bool(pynvml.nvmlGpmQueryDeviceSupport(h).isSupportedDevice)
    except pynvml.NVMLError as exc:
        support[uuid] = f"query failed: {exc}"
pynvml.nvmlShutdown()
print(json.dumps({"gpm_support": support}))
"""


def base_env(**extra: str) -> dict[str, str]:
    """This process's environment without gpuwatch's own settings (a config or database of the
    caller's must not be used) and without the fake's hardware file. LD_LIBRARY_PATH stays:
    a real driver's library may be found through it (containers), and a fake one on it is
    told by :func:`why_no_gpu`."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("GPUWATCH_") and k not in ("FAKE_NVML_CONFIG", "LD_PRELOAD")
    }
    return {**env, **extra}


def nvml_library(env: Mapping[str, str]) -> tuple[Path | None, str]:
    """The libnvidia-ml.so.1 a process in ``env`` loads, or None and why none loads."""
    done = subprocess.run(
        [sys.executable, "-c", _WHICH_LIBRARY], env=dict(env), capture_output=True, text=True,
        timeout=60, check=False,
    )  # fmt: skip
    out = done.stdout.strip()
    if done.returncode != 0 or not out or out.startswith("!"):
        return None, out.removeprefix("!").strip() or done.stderr.strip()
    return Path(out), ""


def nvidia_smi(env: Mapping[str, str]) -> str | None:
    return shutil.which("nvidia-smi", path=env.get("PATH", os.defpath))


def why_no_gpu(env: Mapping[str, str], *, fake_ok: bool = False) -> str | None:
    """None when a real NVIDIA GPU is here (or, with ``fake_ok``, the fake stands in for one);
    otherwise the reason to skip, in the order a person would check."""
    smi = nvidia_smi(env)
    if smi is None:
        return "no nvidia-smi on PATH"
    library, error = nvml_library(env)
    if library is None:
        return f"no {LIB_NAME} loads here ({error})"
    if is_fake(library) and not fake_ok:
        return (
            f"the {LIB_NAME} found ({library}) is gpuwatch's fake NVML, not a driver's "
            f"(LD_LIBRARY_PATH={env.get('LD_LIBRARY_PATH', '')!r})"
        )
    done = subprocess.run(
        [smi, "-L"], env=dict(env), capture_output=True, text=True, timeout=60, check=False
    )
    if done.returncode != 0 or not any(
        line.startswith("GPU ") for line in done.stdout.splitlines()
    ):
        said = (done.stdout + done.stderr).strip().splitlines()
        return f"nvidia-smi lists no GPU (exit {done.returncode}: {' / '.join(said[:3])})"
    return None


@dataclass(frozen=True)
class Run:
    """One process's output, and the wall-clock instants around it."""

    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    started: float
    ended: float


def _run(argv: list[str], env: Mapping[str, str], timeout: float = 120) -> Run:
    started = time.time()
    done = subprocess.run(
        argv, env=dict(env), cwd=REPO, capture_output=True, text=True, timeout=timeout,
        check=False,
    )  # fmt: skip
    return Run(argv, done.returncode, done.stdout, done.stderr, started, time.time())


def gpuwatch_collect(env: Mapping[str, str], workdir: Path) -> Run:
    """``gpuwatch collect --once --json`` as a user runs it: the installed console script (or
    the module, where it is not installed), on a SQLite database of its own under ``workdir``."""
    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "gpuwatch.toml"
    config.write_text(
        f'host = "realgpu-check"\ndatabase_url = "sqlite:///{workdir / "gpuwatch.db"}"\n'
    )
    command = (
        [str(CONSOLE_SCRIPT)]
        if CONSOLE_SCRIPT.exists()
        else [sys.executable, "-m", "agent.cli.main"]
    )
    state = {"XDG_STATE_HOME": str(workdir / "state")}
    return _run([*command, "collect", "--once", "--json", "--config", str(config)],
                {**env, **state})  # fmt: skip


def smi_query(env: Mapping[str, str]) -> Run:
    smi = nvidia_smi(env)
    assert smi is not None, "nvidia-smi left PATH"
    return _run([smi, *SMI_QUERY], env, timeout=60)


def probe(env: Mapping[str, str], seconds: float) -> Run:
    """Two rounds of the NVML collector ``seconds`` apart (see ``_PROBE``)."""
    pythonpath = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return _run([sys.executable, "-c", _PROBE, str(seconds)], {**env, "PYTHONPATH": pythonpath})
