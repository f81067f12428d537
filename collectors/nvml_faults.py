"""GPU faults read through NVML: remapped rows, Xid events, GPUs lost while NVML still answers.

:class:`collectors.nvml.NvmlCollector` calls these each round through its one choke point (the
``Calls`` protocol below is that choke point's shape), so NVML's errors are classified there.

- Remapped rows (Ampere and newer; nvmlDeviceGetRemappedRows): rows remapped for correctable and
  uncorrectable errors, a remap pending (applied at the next GPU reset) and a remap failure.
  The counts live in the InfoROM, so they are counters over the GPU's life, not the driver's.
- Xid events: one NVML event set per NVML session, every GPU registered for
  nvmlEventTypeXidCriticalError, polled without waiting (timeout 0) once a round. NVML delivers
  only events raised after registration, each once, so the counts are this process's own: a
  counter from 0 at daemon start, kept across NVML sessions (a driver reload) by GPU UUID.
- Lost GPUs: a GPU that answers NVML_ERROR_GPU_IS_LOST, or that this process has read and is no
  longer enumerated at all, while NVML itself still answers (nvidia-smi: "Unable to determine
  the device handle ... GPU is lost"). Its last known UUID and PCI bus id name it; a GPU lost
  before this process could read it has only its index (NVML gives a lost GPU no handle).
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from collectors.base import Sample

log = logging.getLogger(__name__)

XID_EVENT = 0x8  # nvml.h nvmlEventTypeXidCriticalError (despite the name: every Xid)
# A storm of Xids must not stall a round; what is left waits in the set for the next one.
MAX_EVENTS_PER_ROUND = 1000
_WAIT = ("nvmlEventSetWait_v2", "nvmlEventSetWait")  # newest first, as in collectors.nvml

Add = Callable[[str, float | None, Mapping[str, str] | None], None]


class Calls(Protocol):
    """What these readers need of collectors.nvml's choke point (its ``_Nvml``)."""

    def query(self, fn: str, *args: Any, symbol: str | None = None, **kwargs: Any) -> Any: ...

    def query_first(self, fns: Iterable[str], *args: Any) -> Any: ...


@dataclass(frozen=True, slots=True)
class Identity:
    """A GPU as last read: enough to name it once it no longer answers."""

    uuid: str
    index: int
    bus_id: str  # "" when NVML did not say
    labels: Mapping[str, str]  # host, gpu_uuid, gpu_index


def read_remapped_rows(nvml: Calls, handle: Any, add: Add) -> None:
    """The row remapper's four values; nothing where the GPU has none (before Ampere)."""
    rows = nvml.query("nvmlDeviceGetRemappedRows", handle)
    if rows is None:
        return
    correctable, uncorrectable, pending, failure = rows
    add("gpuwatch_gpu_remapped_rows_total", correctable, {"cause": "correctable"})
    add("gpuwatch_gpu_remapped_rows_total", uncorrectable, {"cause": "uncorrectable"})
    add("gpuwatch_gpu_row_remap_pending", 1.0 if pending else 0.0, None)
    add("gpuwatch_gpu_row_remap_failure", 1.0 if failure else 0.0, None)


def bus_id(nvml: Calls, handle: Any) -> str:
    """The PCI bus id ("00000000:18:00.0"), "" when unavailable."""
    pci = nvml.query("nvmlDeviceGetPciInfo", handle)
    value = getattr(pci, "busId", b"") if pci is not None else b""
    return value.decode("ascii", errors="replace") if isinstance(value, bytes) else str(value)


def _address(handle: Any) -> int:
    """A device handle's pointer value: events name their GPU by handle, and a lost GPU's
    handle can no longer be asked for its UUID."""
    try:
        return int(ctypes.cast(handle, ctypes.c_void_p).value or 0)
    except (TypeError, ctypes.ArgumentError):  # a test double rather than a ctypes handle
        return id(handle)


class XidWatch:
    """Xid counts by GPU and code, from an event set polled once a round."""

    def __init__(self) -> None:
        self._set: Any = None
        self._gpus: dict[int, Identity] = {}  # handle address -> GPU, in this session's set
        self._counts: dict[tuple[str, int], int] = {}  # (uuid, xid) -> events this process
        self._labels: dict[str, Mapping[str, str]] = {}  # uuid -> labels when last seen

    def open(self, nvml: Calls) -> None:
        """A new event set for a new NVML session (None where the driver has no events)."""
        self._set = nvml.query("nvmlEventSetCreate")
        self._gpus.clear()

    def register(self, nvml: Calls, handle: Any, gpu: Identity) -> None:
        """Watch ``gpu`` for Xids, once per session; a GPU without Xid events is skipped."""
        self._labels[gpu.uuid] = gpu.labels
        address = _address(handle)
        if self._set is None or self._gpus.get(address) == gpu:
            return
        supported = nvml.query("nvmlDeviceGetSupportedEventTypes", handle) or 0
        if supported & XID_EVENT:
            nvml.query("nvmlDeviceRegisterEvents", handle, XID_EVENT, self._set)
            self._gpus[address] = gpu

    def poll(self, nvml: Calls) -> None:
        """Take every event waiting now (NVML_ERROR_TIMEOUT, read as None, ends it)."""
        if self._set is None:
            return
        for _ in range(MAX_EVENTS_PER_ROUND):
            event = nvml.query_first(_WAIT, self._set, 0)
            if event is None:
                return
            if event.eventType & XID_EVENT:
                self._count(_address(event.device), int(event.eventData))

    def _count(self, address: int, xid: int) -> None:
        gpu = self._gpus.get(address)
        if gpu is None:  # registered in this set, so it cannot be; logged rather than lost
            log.warning("Xid %d on a GPU gpuwatch does not know (handle %#x)", xid, address)
            return
        if (gpu.uuid, xid) not in self._counts:
            log.warning("Xid %d on GPU %d (%s, PCI %s)", xid, gpu.index, gpu.uuid, gpu.bus_id)
        self._counts[gpu.uuid, xid] = self._counts.get((gpu.uuid, xid), 0) + 1

    def close(self, nvml: Calls) -> None:
        """Free the set before nvmlShutdown; failures do not matter then."""
        if self._set is not None:
            try:
                nvml.query("nvmlEventSetFree", self._set)
            except Exception as exc:  # noqa: BLE001 - the session is being let go anyway
                log.debug("nvmlEventSetFree failed: %s", exc)
        self._set = None
        self._gpus.clear()

    def samples(self, now: datetime) -> list[Sample]:
        return [
            _sample("gpuwatch_gpu_xid_errors_total", n, {**self._labels[u], "xid": str(x)}, now)
            for (u, x), n in sorted(self._counts.items())
        ]


UNKNOWN = "unknown"


class LostGpus:
    """GPUs lost now while NVML answers: by their last identity when this process read them
    before, else (lost since before the daemon started) by index, UUID and bus id "unknown"."""

    def __init__(self, host: str) -> None:
        self._host = host
        self._known: dict[str, Identity] = {}  # uuid -> as last enumerated

    def seen(self, gpu: Identity) -> None:
        self._known[gpu.uuid] = gpu

    def lost(
        self, enumerated: Mapping[str, int], lost: Iterable[int], failed: Iterable[int]
    ) -> list[Identity]:
        """Which known GPUs are lost this round.

        ``enumerated``: uuid -> index of the GPUs enumerated now; ``lost``: indexes that
        answered NVML_ERROR_GPU_IS_LOST; ``failed``: indexes that failed otherwise (unknown,
        not lost). A known GPU no longer enumerated at all is lost too (it left the bus).
        """
        lost, failed = set(lost), set(failed)
        out = []
        for gpu in self._known.values():
            index = enumerated.get(gpu.uuid)
            gone = index is None and gpu.index not in failed
            if (index is not None and index in lost) or gone:
                out.append(gpu)
        named = {gpu.index for gpu in out}
        return out + [self._unknown(index) for index in sorted(lost - named)]

    def _unknown(self, index: int) -> Identity:
        labels = {"host": self._host, "gpu_uuid": UNKNOWN, "gpu_index": str(index)}
        return Identity(UNKNOWN, index, "", labels)

    @staticmethod
    def samples(gpus: Iterable[Identity], now: datetime) -> list[Sample]:
        return [
            _sample("gpuwatch_gpu_lost", 1, {**g.labels, "pci_bus_id": g.bus_id or UNKNOWN}, now)
            for g in gpus
        ]


def _sample(metric: str, value: float, labels: Mapping[str, str], now: datetime) -> Sample:
    return Sample(metric=metric, value=float(value), labels=labels, ts=now)
