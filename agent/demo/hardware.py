"""The demo's GPUs: the fake libnvidia-ml.so.1 under the real pynvml, fed from the scenario.

The library is compiled once into the demo's folder (gcc and nvml.h from PyPI
``nvidia-nvml-dev``, which `make demo` installs) and loaded into this process before pynvml
looks for a driver, so the demo never touches a real GPU, even on a GPU box. Each host has a
hardware file; :class:`HostHardware` writes what its GPUs show at an instant, and
``$FAKE_NVML_CONFIG`` names the file of the host being collected.

The H100s give GPM (SM activity) values, the L40Ss none (Ada has no GPM, so their real work is
unknown, not zero). SM activity sits at 0.3 to 0.6 of NVML's utilization flag, as it does for
LLM serving; one GPU looks saturated (the flag near 100 % whenever it serves) while a quarter
of its SMs are active: a small model decoding few sequences keeps a kernel resident all the
time, which the flag counts as busy.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from agent.demo.scenario import DemoHost
from agent.sim.fakenvml.build import LIB_NAME, SOURCE, build, find_header_dir
from agent.sim.fakenvml.hardware import FakeGpm, FakeGpu, FakeNvmlConfig, GiB, write_config
from foundation.errors import GpuwatchError

CONFIG_ENV = "FAKE_NVML_CONFIG"
# (host, GPU index) whose utilization flag says ~100 % while about a quarter of its SMs work.
SATURATED_LOOKING = ("demo-h100", 2)


class DemoSetupError(GpuwatchError):
    """The demo cannot set itself up (no compiler, no nvml.h, a real NVML already loaded)."""


def fake_library(folder: Path) -> Path:
    """The fake library in ``folder``, compiled there when missing or older than its source."""
    library = folder / LIB_NAME
    if library.is_file() and library.stat().st_mtime >= SOURCE.stat().st_mtime:
        return library
    compiler = os.environ.get("CC", "gcc")
    if shutil.which(compiler) is None:
        raise DemoSetupError(
            f"the demo builds a simulated NVML library and needs a C compiler: {compiler} "
            "not found (apt-get install gcc, or set CC)"
        )
    try:
        find_header_dir()
    except FileNotFoundError:
        raise DemoSetupError(
            "the demo builds a simulated NVML library and needs nvml.h: "
            "pip install nvidia-nvml-dev (or `make demo`, which does)"
        ) from None
    try:
        return build(folder)
    except subprocess.CalledProcessError as exc:
        raise DemoSetupError(f"compiling {SOURCE} failed (exit {exc.returncode})") from None


def load(library: Path) -> None:
    """Load the fake so that pynvml's ``CDLL("libnvidia-ml.so.1")`` finds it (same soname)."""
    ctypes.CDLL(str(library))
    loaded = ctypes.CDLL(LIB_NAME)
    if not hasattr(loaded, "gpuwatch_fake_nvml"):
        raise DemoSetupError("a real libnvidia-ml.so.1 is already loaded; run the demo alone")


def use_hardware(path: Path) -> None:
    """Point the fake at one host's hardware file (the C side reads the environment)."""
    os.environ[CONFIG_ENV] = str(path)


@dataclass
class HostHardware:
    """One host's GPUs as the fake shows them; energy counters run on between writes.

    ``alternate``: write two files in turn, each in place, and return the one written (the
    history, which collects only after writing: renaming a file took 3 ms here, 5 s of a
    month). Otherwise one file replaced atomically, for a daemon reading it at any moment.
    """

    host: DemoHost
    path: Path
    alternate: bool = False
    energy_mj: dict[int, float] = field(default_factory=dict)
    _writes: int = 0

    def __post_init__(self) -> None:
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)

    def write(self, loads: Mapping[int, float], seconds: float) -> Path:
        """The GPUs at their ``loads`` (GPU index -> 0..1, absent: no work) over the last
        ``seconds``; an index with a target but no load still holds its model's memory."""
        # No process list: the targets name their GPUs, and a simulated pid would belong to
        # no target on this machine (allocation.py matches processes by unit or port).
        gpus = tuple(
            self._gpu(i, loads.get(i, 0.0), seconds, serving=self.host.target_on(i) is not None)
            for i in range(self.host.gpus)
        )
        config = FakeNvmlConfig(driver="550.54.15", gpus=gpus)
        if not self.alternate:
            return write_config(self.path, config)
        # A new path each round: the fake parses a file again when its path changes.
        self._writes += 1
        path = self.path.with_name(f"{self.path.name}.{self._writes % 2}")
        path.write_text(config.render(), encoding="utf-8")
        return path

    def _model_memory(self) -> int:
        # vLLM and SGLang take most of the GPU for weights and KV cache up front.
        return int(self.host.kind.memory * 0.80)

    def _gpu(self, index: int, load: float, seconds: float, *, serving: bool) -> FakeGpu:
        kind = self.host.kind
        util = round(100 * min(1.0, 0.04 + 0.92 * load)) if load > 0 else 0
        saturated = (self.host.name, index) == SATURATED_LOOKING
        if saturated and util:
            util = 100
        watts = kind.idle_watts + (kind.busy_watts - kind.idle_watts) * util / 100
        if serving:
            watts += 18.0  # a loaded model keeps memory clocks up even when idle
        energy = self.energy_mj.get(index, 5.0e9 + 1.0e8 * index) + watts * seconds * 1000
        self.energy_mj[index] = energy
        used = self._model_memory() + 512 * 1024**2 if serving else 600 * 1024**2
        return FakeGpu(
            uuid=self.host.uuid(index),
            name=kind.name,
            util=util,
            memutil=round(util * 0.55),
            total=kind.memory,
            used=min(used, kind.memory - GiB),
            power_mw=int(watts * 1000),
            limit_mw=int(kind.limit_watts * 1000),
            temp_c=31 + round(42 * util / 100),
            sm_mhz=1980 if util else 345,
            energy_mj=int(energy),
            throttle=0x1 if util < 5 else 0x0,  # nvmlClocksEventReasonGpuIdle
            gpm=_gpm(util, load, saturated=saturated) if kind.gpm else None,
        )


def _gpm(util: int, load: float, *, saturated: bool) -> FakeGpm:
    """GPM percentages for a GPU at ``util`` % (the flag) and ``load`` (0..1)."""
    # Saturated-looking: ~25 % of the SMs active while the flag says 100 %. Otherwise busier
    # batches fill more SMs: 0.3 to 0.6 of the flag.
    busy = round(20 + 8 * load) if saturated and util else round(util * (0.3 + 0.3 * load))
    return FakeGpm(
        sm_active=busy,
        sm_occupancy=round(busy * 0.45),
        tensor=round(busy * 0.6),
        dram=round(min(95, busy * 1.2)),  # decode is memory-bound
        fp16=round(busy * 0.08),
        fp32=round(busy * 0.12),
        fp64=0,
    )
