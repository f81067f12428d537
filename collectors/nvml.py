"""GPU telemetry from NVML (``nvidia-ml-py``), as canonical samples in base units.

Every pynvml call goes through one choke point, :class:`_Nvml` (nvitop's ``nvmlQuery`` idea),
which turns NVML's error codes into three outcomes:

- the value is unavailable (not supported, not found, no permission, function missing from this
  driver): ``None``, and the sample is omitted: never a 0 or NaN standing in for "unknown";
- one device failed (GPU lost, reset required, anything else): that GPU is dropped for this round
  and the others are still reported;
- the driver or library is gone (not found, not loaded, uninitialised, version mismatch): the
  round fails with :class:`CollectError` and the next round starts NVML afresh, so the collector
  recovers by itself once the driver is back.

Handles, UUIDs and names are read once per NVML session; MIG mode and MIG instances are read
every round because they change without NVML being restarted.
"""

from __future__ import annotations

import importlib
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from types import ModuleType
from typing import Any

from collectors import nvml_faults as faults
from collectors.base import CollectError, Sample
from collectors.nvml_gpm import GpmReader
from collectors.nvml_process_util import PodLookup, ProcessLabels, ProcessUtilization
from collectors.nvml_process_util import merge_processes as _merge_processes
from collectors.proc import UnitCache

log = logging.getLogger(__name__)

# nvmlReturn_t codes (nvml.h): part of the C ABI, so stable across driver and binding versions.
_UNINITIALIZED = 1
_NOT_SUPPORTED = 3
_NO_PERMISSION = 4
_NOT_FOUND = 6
_DRIVER_NOT_LOADED = 9
_TIMEOUT = 10  # nvmlEventSetWait with no event waiting
_LIBRARY_NOT_FOUND = 12
_FUNCTION_NOT_FOUND = 13
_GPU_IS_LOST = 15
_LIB_RM_VERSION_MISMATCH = 18
_NO_DATA = 21
_ARGUMENT_VERSION_MISMATCH = 25

# pynvml's two-call wrappers raise NVMLError(NVML_SUCCESS) when the sizing call answers success
# with nothing to size (nvmlDeviceGetProcessUtilization on some drivers): nothing to read.
_SUCCESS_BUT_EMPTY = 0
_UNAVAILABLE = frozenset({_NOT_SUPPORTED, _NOT_FOUND, _NO_DATA, _TIMEOUT, _SUCCESS_BUT_EMPTY})
# This driver cannot answer that call at all: remember it, so it is asked once per session.
_UNKNOWN_TO_DRIVER = frozenset({_FUNCTION_NOT_FOUND, _ARGUMENT_VERSION_MISMATCH})
_DRIVER_DOWN = frozenset(
    {_UNINITIALIZED, _DRIVER_NOT_LOADED, _LIBRARY_NOT_FOUND, _LIB_RM_VERSION_MISMATCH}
)
_INIT_HINTS = {
    _LIBRARY_NOT_FOUND: "NVML library libnvidia-ml.so.1 not found; is the NVIDIA driver installed?",
    _DRIVER_NOT_LOADED: "NVIDIA driver not loaded; is the kernel module loaded?",
    _LIB_RM_VERSION_MISMATCH: "NVML and kernel driver versions differ; reboot after an upgrade",
    _NO_PERMISSION: "no permission to open the NVIDIA devices",
}

# nvml.h constants this collector passes in.
_TEMPERATURE_GPU = 0
_CLOCK_SM = 1
_MEMORY_ERROR_CORRECTED = 0
_MEMORY_ERROR_UNCORRECTED = 1
_VOLATILE_ECC = 0
_MIG_ENABLED = 1
_ATTRIBUTES = "nvmlDeviceGetAttributes_v2"  # a MIG instance's slices

# Newest first: an old driver lacks the newer symbol, and the older one still answers.
_TEMPERATURE = ("nvmlDeviceGetTemperatureV", "nvmlDeviceGetTemperature")
_THROTTLE = ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons")
_COMPUTE = ("nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2")
_GRAPHICS = ("nvmlDeviceGetGraphicsRunningProcesses_v3", "nvmlDeviceGetGraphicsRunningProcesses_v2")
_MEMORY_V2 = "nvmlDeviceGetMemoryInfo_v2"


class _DriverDown(Exception):
    """NVML as a whole stopped working; the session must be restarted."""


class _DeviceFailed(Exception):
    """One device (or MIG instance) failed; only it is dropped. ``lost``: it fell off the bus."""

    def __init__(self, message: str, *, lost: bool = False) -> None:
        super().__init__(message)
        self.lost = lost


def _describe(fn: str, exc: BaseException) -> str:
    return f"{fn}: {exc}"


class _Nvml:
    """The one place that calls pynvml: lazy symbols, error classification, fallbacks."""

    def __init__(self, module: Any) -> None:
        self._m = module
        self._error: type[BaseException] = module.NVMLError
        self._missing: set[str] = set()  # per session; bounded by the names this module calls
        self._logged: set[str] = set()

    def init(self) -> None:
        """nvmlInit, every failure turned into a CollectError with a hint for the operator."""
        self._missing.clear()
        try:
            self._m.nvmlInit()
        except self._error as exc:
            code = getattr(exc, "value", None)
            hint = _INIT_HINTS.get(code) if isinstance(code, int) else None
            raise CollectError(f"{hint or 'NVML failed to initialise'} (nvmlInit: {exc})") from exc

    def shutdown(self) -> None:
        """nvmlShutdown; its failures do not matter (the old session is being let go anyway)."""
        try:
            self._m.nvmlShutdown()
        except self._error as exc:
            log.debug("nvmlShutdown failed: %s", exc)

    def query(self, fn: str, *args: Any, symbol: str | None = None, **kwargs: Any) -> Any:
        """``pynvml.<fn>(*args, **kwargs)``, or None when the value is unavailable.

        ``symbol`` names the C function when it differs from the wrapper's name (a versioned
        struct), so a missing one is remembered on its own. Raises _DeviceFailed or _DriverDown.
        """
        key = symbol or fn
        if key in self._missing:
            return None
        func: Callable[..., Any] | None = getattr(self._m, fn, None)
        if func is None:  # an older nvidia-ml-py without this wrapper
            self._forget(key, "not in this nvidia-ml-py")
            return None
        try:
            return func(*args, **kwargs)
        except self._error as exc:
            self._classify(key, exc)
            return None

    def query_first(self, fns: Iterable[str], *args: Any) -> Any:
        """The first of ``fns`` (newest first) that this driver has, called with ``args``."""
        for fn in fns:
            value = self.query(fn, *args)
            if value is not None or fn not in self._missing:
                return value
        return None

    def is_missing(self, fn: str) -> bool:
        return fn in self._missing

    def constant(self, name: str) -> Any:
        """A pynvml module constant (no call), None when this binding lacks it."""
        return getattr(self._m, name, None)

    def _classify(self, key: str, exc: BaseException) -> None:
        """Return quietly when the value is merely unavailable, else raise the failure's kind."""
        code = getattr(exc, "value", None)
        if code in _UNAVAILABLE:
            return
        if code in _UNKNOWN_TO_DRIVER:
            self._forget(key, str(exc))
            return
        if code == _NO_PERMISSION:
            self._log_once(key, f"NVML {key}: {exc}; the values it reads are omitted")
            return
        if code in _DRIVER_DOWN:
            raise _DriverDown(_describe(key, exc)) from exc
        raise _DeviceFailed(_describe(key, exc), lost=code == _GPU_IS_LOST) from exc

    def _forget(self, key: str, why: str) -> None:
        self._missing.add(key)
        self._log_once(key, f"NVML {key} unavailable ({why}); the values it reads are omitted")

    def _log_once(self, key: str, message: str) -> None:
        if key not in self._logged:
            self._logged.add(key)
            log.info("%s", message)


@dataclass(frozen=True, slots=True)
class _Gpu:
    """A device as enumerated once per NVML session."""

    index: int
    handle: Any
    uuid: str
    name: str
    labels: Mapping[str, str]  # host, gpu_uuid, gpu_index
    identity: faults.Identity  # what names it once it is lost


@dataclass(frozen=True, slots=True)
class _Session:
    driver_version: str
    gpus: tuple[_Gpu, ...]
    failures: Mapping[int, str]  # index -> why it could not be enumerated
    lost: frozenset[int]  # of those, the indexes that answered "GPU is lost"


@dataclass(frozen=True, slots=True)
class _Reading:
    """One round's samples, and the PIDs seen (for the unit cache)."""

    samples: list[Sample]
    pids: set[int]


class NvmlCollector:
    """Per-GPU, per-MIG-instance and per-process samples from NVML (DESIGN.md, GPU signals)."""

    name = "nvml"

    def __init__(  # gpm_pipes: GPM's FP16/32/64 pipe gauges too (collectors.nvml_gpm)
        self, *, host: str, nvml: ModuleType | None = None, proc_root: Path = Path("/proc"),
        gpm_pipes: bool = False, pods: PodLookup | None = None,
    ) -> None:  # fmt: skip
        self._host = host
        self._module = nvml
        self._nvml: _Nvml | None = None
        self._initialised = False  # nvmlInit succeeded and has not been shut down
        self._session: _Session | None = None
        self._reenumerate = False  # a device failed last round
        self._units = UnitCache(proc_root)
        self._labels = ProcessLabels(self._units, pods)  # pods: Kubernetes (collectors.kubelet)
        self._failing: set[int] = set()  # indexes of GPUs failing, to log changes only
        self._xids = faults.XidWatch()
        self._process_util = ProcessUtilization()
        self._lost = faults.LostGpus(host)
        self._gpm = GpmReader(_DeviceFailed, pipes=gpm_pipes)
        self._lock = threading.Lock()

    def collect(self, now: datetime) -> list[Sample]:
        """This round's samples, all stamped ``now``; CollectError when NVML is unusable."""
        with self._lock:
            nvml = self._api()
            try:
                session = self._current_session(nvml)
                reading = self._read(nvml, session, now)
            except (_DriverDown, _DeviceFailed) as exc:
                # Driver-level, or a host-wide call (device count) failed: next round starts
                # NVML afresh (nvmlShutdown + nvmlInit). Per-GPU failures never get here.
                self._session = None
                raise CollectError(f"NVML stopped working: {exc}") from exc
            self._units.retain(reading.pids)
            return reading.samples

    def profiled_elsewhere(self, uuids: frozenset[str]) -> None:
        """GPUs whose SM activity a dcgm-exporter target reports: GPM left unarmed on them."""
        with self._lock:
            self._gpm.profiled_elsewhere(uuids)

    def close(self) -> None:
        """Release NVML (nvmlShutdown) if this collector initialised it."""
        with self._lock:
            if self._nvml is not None and self._initialised:
                self._xids.close(self._nvml)
                self._gpm.release(self._nvml)
                self._nvml.shutdown()
            self._initialised = False
            self._session = None

    # -- session: init, enumeration, re-init ------------------------------------------------

    def _api(self) -> _Nvml:
        if self._nvml is None:
            module = self._module
            if module is None:
                try:
                    module = importlib.import_module("pynvml")
                except ImportError as exc:
                    raise CollectError(
                        "pynvml is not importable; install nvidia-ml-py", retryable=False
                    ) from exc
            self._nvml = _Nvml(module)
        return self._nvml

    def _current_session(self, nvml: _Nvml) -> _Session:
        session = self._session
        if session is None:
            if self._initialised:  # after a driver-level error: start NVML afresh
                self._xids.close(nvml)
                self._gpm.release(nvml)
                nvml.shutdown()
                self._initialised = False
            nvml.init()
            self._initialised = True
            self._xids.open(nvml)
            session = self._enumerate(nvml)
        elif self._reenumerate:  # a device failed: it may be back (after a reset) with a new handle
            session = self._enumerate(nvml, driver_version=session.driver_version)
        self._session = session
        return session

    def _enumerate(self, nvml: _Nvml, driver_version: str | None = None) -> _Session:
        if driver_version is None:
            driver_version = _text(nvml.query("nvmlSystemGetDriverVersion"))
        count = nvml.query("nvmlDeviceGetCount") or 0
        gpus: list[_Gpu] = []
        failures: dict[int, str] = {}
        lost: set[int] = set()
        for index in range(count):
            try:
                gpu = self._describe_gpu(nvml, index)
            except _DeviceFailed as exc:
                failures[index] = str(exc)
                if exc.lost:
                    lost.add(index)
                continue
            if gpu is not None:
                gpus.append(gpu)
        return _Session(driver_version, tuple(gpus), failures, frozenset(lost))

    def _describe_gpu(self, nvml: _Nvml, index: int) -> _Gpu | None:
        handle = nvml.query("nvmlDeviceGetHandleByIndex", index)
        if handle is None:  # e.g. no permission: not ours to watch
            return None
        uuid = _text(nvml.query("nvmlDeviceGetUUID", handle))
        if not uuid:
            return None
        labels = {"host": self._host, "gpu_uuid": uuid, "gpu_index": str(index)}
        name = _text(nvml.query("nvmlDeviceGetName", handle))
        identity = faults.Identity(uuid, index, faults.bus_id(nvml, handle), labels)
        self._lost.seen(identity)
        self._xids.register(nvml, handle, identity)
        return _Gpu(index, handle, uuid, name, labels, identity)

    # -- one round --------------------------------------------------------------------------

    def _read(self, nvml: _Nvml, session: _Session, now: datetime) -> _Reading:
        reading = _Reading([], set())
        failures = dict(session.failures)
        lost = set(session.lost)
        self._poll_xids(nvml)
        for gpu in session.gpus:
            try:
                samples = self._read_gpu(nvml, session, gpu, now, reading.pids)
            except _DeviceFailed as exc:
                failures[gpu.index] = f"{gpu.uuid}: {exc}"
                lost.update((gpu.index,) if exc.lost else ())
                continue
            reading.samples.extend(samples)
        self._gpm.end_round(nvml)
        self._log_failures(failures)
        enumerated = {gpu.uuid: gpu.index for gpu in session.gpus}
        gone = self._lost.lost(enumerated, lost, failures.keys() - lost)
        self._reenumerate = bool(failures or gone)  # a lost GPU may come back after a reset
        # A GPU lost while NVML answers is news about that GPU (GpuLost), not a blind NVML.
        if failures and not reading.samples and not gone:
            raise CollectError("no GPU could be read: " + "; ".join(failures.values()))
        reading.samples.extend(self._lost.samples(gone, now) + self._xids.samples(now))
        return reading

    def _poll_xids(self, nvml: _Nvml) -> None:
        try:
            self._xids.poll(nvml)
        except _DeviceFailed as exc:  # NVML says "GPU is lost" here too: read it per GPU below
            log.debug("Xid events not read this round: %s", exc)

    def _read_gpu(
        self, nvml: _Nvml, session: _Session, gpu: _Gpu, now: datetime, pids: set[int]
    ) -> list[Sample]:
        h = gpu.handle
        modes = nvml.query("nvmlDeviceGetMigMode", h)  # [current, pending]; None: not MIG-capable
        mig_on = modes is not None and modes[0] == _MIG_ENABLED
        mig_mode = "unsupported" if modes is None else ("enabled" if mig_on else "disabled")
        info = {"gpu_name": gpu.name, "driver_version": session.driver_version}
        out = _Samples(now, gpu.labels)
        out.add("gpuwatch_gpu_info", 1, info | {"mig_mode": mig_mode})
        self._read_device(nvml, h, out)
        self._gpm.read_gpu(nvml, gpu.uuid, h, out.add)
        faults.read_remapped_rows(nvml, h, out.add)
        if mig_on:  # processes per instance: the parent's list needs root and repeats them
            self._read_mig(nvml, gpu, out, pids)
        else:  # NVML gives no per-process utilization under MIG
            running = self._read_processes(nvml, h, gpu.uuid, out, pids)
            for pid, ratio in self._process_util.read(nvml, gpu.uuid, h, running).items():
                out.add("gpuwatch_gpu_process_utilization_ratio", ratio, running[pid])
        return out.samples

    def _read_device(self, nvml: _Nvml, h: Any, out: _Samples) -> None:
        util = nvml.query("nvmlDeviceGetUtilizationRates", h)
        if util is not None:
            out.add("gpuwatch_gpu_utilization_ratio", util.gpu / 100)
            out.add("gpuwatch_gpu_memory_utilization_ratio", util.memory / 100)
        self._read_memory(nvml, h, out)
        out.add("gpuwatch_gpu_power_watts", _from_milli(nvml.query("nvmlDeviceGetPowerUsage", h)))
        limit = nvml.query("nvmlDeviceGetEnforcedPowerLimit", h)
        out.add("gpuwatch_gpu_power_limit_watts", _from_milli(limit))
        temp = nvml.query_first(_TEMPERATURE, h, _TEMPERATURE_GPU)
        out.add("gpuwatch_gpu_temperature_celsius", temp)
        sm = nvml.query("nvmlDeviceGetClockInfo", h, _CLOCK_SM)
        out.add("gpuwatch_gpu_sm_clock_hertz", None if sm is None else sm * 1_000_000)
        energy = nvml.query("nvmlDeviceGetTotalEnergyConsumption", h)
        out.add("gpuwatch_gpu_energy_joules_total", _from_milli(energy))
        for kind, error_type in (
            ("corrected", _MEMORY_ERROR_CORRECTED),
            ("uncorrected", _MEMORY_ERROR_UNCORRECTED),
        ):
            ecc = nvml.query("nvmlDeviceGetTotalEccErrors", h, error_type, _VOLATILE_ECC)
            out.add("gpuwatch_gpu_ecc_errors_total", ecc, {"type": kind})
        out.add("gpuwatch_gpu_throttle_reasons", nvml.query_first(_THROTTLE, h))

    def _read_memory(self, nvml: _Nvml, h: Any, out: _Samples) -> None:
        # v2 reports the driver's reserved memory apart from "used"; v1 counts it as used.
        mem = None
        version = nvml.constant("nvmlMemory_v2")
        if version is not None:
            mem = nvml.query("nvmlDeviceGetMemoryInfo", h, version=version, symbol=_MEMORY_V2)
        if mem is None and (version is None or nvml.is_missing(_MEMORY_V2)):
            mem = nvml.query("nvmlDeviceGetMemoryInfo", h)
        if mem is not None:
            out.add("gpuwatch_gpu_memory_used_bytes", mem.used)
            out.add("gpuwatch_gpu_memory_total_bytes", mem.total)

    def _read_mig(self, nvml: _Nvml, gpu: _Gpu, out: _Samples, pids: set[int]) -> None:
        h = gpu.handle
        slots = nvml.query("nvmlDeviceGetMaxMigDeviceCount", h)
        out.add("gpuwatch_gpu_mig_slices", slots)  # 7 on an A100/H100: one per slice
        for slot in range(slots or 0):
            mig = nvml.query("nvmlDeviceGetMigDeviceHandleByIndex", h, slot)
            if mig is None:  # an empty slot
                continue
            try:
                uuid = _text(nvml.query("nvmlDeviceGetUUID", mig))
                if not uuid:
                    continue
                instance = out.child({"mig_instance": uuid})
                self._read_memory(nvml, mig, instance)
                attributes = nvml.query("nvmlDeviceGetAttributes", mig, symbol=_ATTRIBUTES)
                slices = None if attributes is None else attributes.gpuInstanceSliceCount
                instance.add("gpuwatch_gpu_mig_slices", slices)
                self._read_processes(nvml, mig, uuid, instance, pids)
                self._gpm.read_mig(nvml, gpu.uuid, h, uuid, mig, instance.add)
            except _DeviceFailed as exc:  # destroyed meanwhile: drop this instance only
                log.debug("MIG device %d skipped: %s", slot, exc)
                continue
            out.samples.extend(instance.samples)

    def _read_processes(
        self, nvml: _Nvml, h: Any, device: str, out: _Samples, pids: set[int]
    ) -> dict[int, dict[str, str]]:
        """The device's processes' memory; returns their labels (``device``: its UUID)."""
        listed = _merge_processes(nvml.query_first(_COMPUTE, h), nvml.query_first(_GRAPHICS, h))
        pids.update(listed)
        labels = self._labels.of(device, listed)
        for pid, used in listed.items():
            out.add("gpuwatch_gpu_process_memory_bytes", used, labels[pid])
        return labels

    def _log_failures(self, failures: Mapping[int, str]) -> None:
        """Warn when a GPU starts failing and note when it recovers; silence in between."""
        for index, why in failures.items():
            if index not in self._failing:
                log.warning("GPU %d dropped until it answers again: %s", index, why)
        for index in self._failing - failures.keys():
            log.info("GPU %d reported again", index)
        self._failing = set(failures)


class _Samples:
    """Samples sharing a timestamp and base labels; None values are skipped, never stored."""

    def __init__(self, now: datetime, labels: Mapping[str, str]) -> None:
        self.now = now
        self.labels = labels
        self.samples: list[Sample] = []

    def add(self, metric: str, value: float | None, extra: Mapping[str, str] | None = None) -> None:
        if value is None:
            return
        labels = {**self.labels, **extra} if extra else self.labels
        self.samples.append(Sample(metric=metric, value=float(value), labels=labels, ts=self.now))

    def child(self, extra: Mapping[str, str]) -> _Samples:
        return _Samples(self.now, {**self.labels, **extra})


def _text(value: str | bytes | None) -> str:
    """NVML strings; nvidia-ml-py before 11.515 returned bytes."""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return value or ""


def _from_milli(value: float | None) -> float | None:
    """mW -> W, mJ -> J. Dividing (not multiplying by 1e-3) keeps 65000 mW exactly 65.0."""
    return None if value is None else value / 1000
