"""The fake NVML's "hardware" file, written from Python values (format: fakenvml.c's header).

Values are in NVML's own units (percent, bytes, mW, mJ, MHz), as the driver reports them, so a
test can check the collector's conversion to base units. ``None`` means "not supported".
The library reads the file named by ``$FAKE_NVML_CONFIG`` (see :mod:`agent.sim.fakenvml.build`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

GiB = 1024**3


@dataclass(frozen=True, slots=True, kw_only=True)
class FakeGpm:
    """GPM metrics (Hopper and newer), in percent as nvmlGpmMetricsGet gives them; None: that
    metric answers NOT_SUPPORTED in its own nvmlReturn."""

    sm_active: int | None = None  # NVML_GPM_METRIC_SM_UTIL
    sm_occupancy: int | None = None  # NVML_GPM_METRIC_SM_OCCUPANCY
    tensor: int | None = None  # NVML_GPM_METRIC_ANY_TENSOR_UTIL
    dram: int | None = None  # NVML_GPM_METRIC_DRAM_BW_UTIL
    fp16: int | None = None
    fp32: int | None = None
    fp64: int | None = None

    def render(self) -> str:
        """The config keys, with a leading space; absent metrics are left out."""
        fields = {
            "smactive": self.sm_active, "smocc": self.sm_occupancy, "tensor": self.tensor,
            "dram": self.dram, "fp16": self.fp16, "fp32": self.fp32, "fp64": self.fp64,
        }  # fmt: skip
        return "".join(f" {k}={int(v)}" for k, v in fields.items() if v is not None)


@dataclass(frozen=True, slots=True, kw_only=True)
class FakeMig:
    """A MIG device in slot ``slot`` of its GPU (nvmlDeviceGetMigDeviceHandleByIndex)."""

    slot: int
    uuid: str
    total: int | None = 10 * GiB
    used: int = 0
    reserved: int = 0
    gi: int = 0  # GPU instance id
    ci: int = 0  # compute instance id
    gpm: FakeGpm | None = None  # read through the parent GPU (nvmlGpmMigSampleGet with gi)
    # its GPU instance's slices (nvmlDeviceGetAttributes_v2); None: that call not supported
    slices: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class FakeRemap:
    """nvmlDeviceGetRemappedRows: rows remapped for correctable and uncorrectable errors, a
    remap pending (applied at the next GPU reset) and a remap that failed."""

    correctable: int = 0
    uncorrectable: int = 0
    pending: bool = False
    failure: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class FakeXid:
    """An Xid event on GPU ``gpu`` (index), delivered once to each event set registered for
    it that existed before the event was written (see fakenvml.c)."""

    gpu: int
    code: int


@dataclass(frozen=True, slots=True, kw_only=True)
class FakeGpu:
    """One GPU. The defaults are a healthy, idle-ish H100 with MIG disabled."""

    uuid: str
    name: str = "NVIDIA H100 80GB HBM3"
    util: int | None = 3  # percent
    memutil: int | None = 1  # percent
    total: int | None = 80 * GiB  # bytes
    used: int = 1 * GiB
    reserved: int = 0  # v2 memory info reports it apart; v1 counts it as used
    power_mw: int | None = 65_000
    limit_mw: int | None = 700_000
    temp_c: int | None = 34
    sm_mhz: int | None = 1_980
    energy_mj: int | None = 123_456_789
    ecc_corrected: int | None = 0
    ecc_uncorrected: int | None = 0
    throttle: int | None = 0x1  # nvmlClocksEventReasonGpuIdle
    mig_mode: int | None = 0  # None: not MIG-capable
    mig_max: int | None = None  # the fake defaults to 7 when MIG-capable
    lost: bool = False
    bus: str | None = None  # PCI bus id; None: the fake's 00000000:<0x18 + index>:00.0
    # nvmlDeviceGetRemappedRows; None: not supported (a GPU before Ampere has no row remapper)
    remapped_rows: FakeRemap | None = None
    migs: tuple[FakeMig, ...] = ()
    # None: GPM unsupported (before Hopper); nvmlGpmQueryDeviceSupport says so
    gpm: FakeGpm | None = None
    gpm_fail: int | None = None  # nvmlReturn_t code this GPU's GPM sample calls answer


@dataclass(frozen=True, slots=True, kw_only=True)
class FakeProcess:
    gpu: int
    pid: int
    mem: int | None  # bytes; None: NVML_VALUE_NOT_AVAILABLE
    type: Literal["compute", "graphics", "both"] = "compute"
    mig: int | None = None  # MIG slot the process runs in
    # Percent, for nvmlDeviceGetProcessUtilization; None: no sample (on a GPU where no process
    # has one, that call is not supported).
    smutil: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class FakeNvmlConfig:
    driver: str = "550.54.15"
    gpus: tuple[FakeGpu, ...] = ()
    processes: tuple[FakeProcess, ...] = ()
    missing: tuple[str, ...] = ()  # functions answering NVML_ERROR_FUNCTION_NOT_FOUND
    fail: Mapping[str, int] = field(default_factory=dict)  # function -> nvmlReturn_t code
    xids: tuple[FakeXid, ...] = ()  # in the order raised; write one more to raise another
    # function -> seconds that call blocks before answering (a driver call stuck in the kernel)
    hang: Mapping[str, int] = field(default_factory=dict)

    def render(self) -> str:
        lines = [f"driver {_word(self.driver)}"]
        for index, gpu in enumerate(self.gpus):
            lines.append(_gpu_line(gpu))
            lines.extend(_mig_line(index, mig) for mig in gpu.migs)
        lines.extend(_proc_line(proc) for proc in self.processes)
        lines.extend(f"missing {_word(fn)}" for fn in self.missing)
        lines.extend(f"fail {_word(fn)} {int(code)}" for fn, code in self.fail.items())
        lines.extend(f"xid gpu={int(x.gpu)} code={int(x.code)}" for x in self.xids)
        lines.extend(f"hang {_word(fn)} {int(seconds)}" for fn, seconds in self.hang.items())
        return "\n".join(lines) + "\n"


def write_config(path: Path, config: FakeNvmlConfig) -> Path:
    """Write ``config`` to ``path`` atomically (the fake re-reads it on every call)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(config.render(), encoding="utf-8")
    tmp.replace(path)
    return path


def _word(value: str) -> str:
    if not value or any(c.isspace() or c in '"#=' for c in value):
        raise ValueError(f"{value!r}: must be one word without quotes, '#' or '='")
    return value


def _quoted(value: str) -> str:
    if any(c in '"#\n' for c in value):
        raise ValueError(f"{value!r}: must not contain a quote, '#' or a newline")
    return f'"{value}"'


def _number(value: int | None) -> str:
    return "-1" if value is None else str(int(value))


def _gpu_line(gpu: FakeGpu) -> str:
    fields = {
        "util": gpu.util, "memutil": gpu.memutil,
        "total": gpu.total, "used": gpu.used, "reserved": gpu.reserved,
        "power": gpu.power_mw, "limit": gpu.limit_mw, "temp": gpu.temp_c, "sm": gpu.sm_mhz,
        "energy": gpu.energy_mj, "ecc_corrected": gpu.ecc_corrected,
        "ecc_uncorrected": gpu.ecc_uncorrected, "throttle": gpu.throttle,
        "migmode": gpu.mig_mode, "migmax": gpu.mig_max, "lost": int(gpu.lost),
    }  # fmt: skip
    numbers = " ".join(f"{key}={_number(value)}" for key, value in fields.items())
    bus = "" if gpu.bus is None else f" bus={_word(gpu.bus)}"
    gpm = "" if gpu.gpm is None else " gpm=1" + gpu.gpm.render()
    gpm += "" if gpu.gpm_fail is None else f" gpmfail={int(gpu.gpm_fail)}"
    return f"gpu uuid={_word(gpu.uuid)} name={_quoted(gpu.name)} {numbers}{bus}{_remap(gpu)}{gpm}"


def _remap(gpu: FakeGpu) -> str:
    rows = gpu.remapped_rows
    if rows is None:
        return ""
    return (
        f" remap_corr={int(rows.correctable)} remap_unc={int(rows.uncorrectable)}"
        f" remap_pending={int(rows.pending)} remap_failure={int(rows.failure)}"
    )


def _mig_line(gpu_index: int, mig: FakeMig) -> str:
    return (
        f"mig gpu={gpu_index} idx={mig.slot} uuid={_word(mig.uuid)} total={_number(mig.total)}"
        f" used={mig.used} reserved={mig.reserved} gi={mig.gi} ci={mig.ci}"
        + ("" if mig.slices is None else f" slices={mig.slices}")
        + ("" if mig.gpm is None else mig.gpm.render())
    )


def _proc_line(proc: FakeProcess) -> str:
    mig = "" if proc.mig is None else f" mig={proc.mig}"
    util = "" if proc.smutil is None else f" smutil={proc.smutil}"
    return f"proc gpu={proc.gpu} pid={proc.pid} mem={_number(proc.mem)} type={proc.type}{mig}{util}"
