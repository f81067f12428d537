"""Per-process series of the NVML collector: their labels, and per-process SM utilization.

Labels: ``pid``, ``unit`` (systemd unit or container, collectors.proc) and, on Kubernetes,
``namespace``, ``pod`` and ``container`` where the pod is known (collectors.kubelet), absent
otherwise: never empty strings.

Per-process SM utilization (``nvmlDeviceGetProcessUtilization``) is what a GPU shared by several
serving targets, or time-sliced between pods, is split by where the driver gives it
(agent.cost.allocation).

NVML answers with one sample per process that had non-zero utilization since the timestamp
asked for; a process it lists as running but leaves out of a successful answer was idle (0).
Where the call is not supported (many GPUs and drivers, and MIG), finds no sample at all, or
fails, nothing is reported: unknown, never 0.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from collectors.proc import UnitCache


class Query(Protocol):
    """The collector's NVML choke point (collectors.nvml._Nvml): None when unavailable."""

    def query(self, fn: str, *args: Any, symbol: str | None = None, **kwargs: Any) -> Any: ...


class PodLookup(Protocol):
    """Pods of processes (collectors.kubelet.PodAttribution)."""

    def labels(
        self, device: str, pod_uids: Mapping[int, str | None]
    ) -> Mapping[int, Mapping[str, str]]: ...


class ProcessLabels:
    """The labels of each process on one device (a GPU, or a MIG instance: its UUID)."""

    def __init__(self, units: UnitCache, pods: PodLookup | None = None) -> None:
        self._units = units
        self._pods = pods

    def of(self, device: str, pids: Iterable[int]) -> dict[int, dict[str, str]]:
        origins = {pid: self._units.origin(pid) for pid in pids}
        pods: Mapping[int, Mapping[str, str]] = {}
        if self._pods is not None and origins:
            pods = self._pods.labels(device, {pid: o.pod_uid for pid, o in origins.items()})
        return {
            pid: {"pid": str(pid), "unit": o.unit, **pods.get(pid, {})}
            for pid, o in origins.items()
        }


def merge_processes(*lists: Iterable[Any] | None) -> dict[int, int]:
    """PID -> used bytes over NVML's compute and graphics lists.

    A process doing both appears in both with its whole usage, so the larger value is kept
    rather than the sum. usedGpuMemory None (not available) is omitted, not zeroed.
    """
    merged: dict[int, int] = {}
    for procs in lists:
        for proc in procs or ():
            used = proc.usedGpuMemory
            if used is not None:
                merged[proc.pid] = max(used, merged.get(proc.pid, 0))
    return merged


class ProcessUtilization:
    """Reads each GPU's per-process SM utilization since the previous round's newest sample
    (NVML's ``lastSeenTimeStamp``), averaged per process over the samples since then."""

    def __init__(self) -> None:
        self._last_seen: dict[str, int] = {}  # GPU uuid -> newest sample timestamp (µs)

    def read(self, nvml: Query, uuid: str, handle: Any, running: Iterable[int]) -> dict[int, float]:
        """PID -> SM utilization (0-1) for the ``running`` processes, or {} when unknown."""
        since = self._last_seen.get(uuid, 0)
        samples = nvml.query("nvmlDeviceGetProcessUtilization", handle, since)
        if not samples:
            return {}
        self._last_seen[uuid] = max(int(s.timeStamp) for s in samples)
        percents: dict[int, list[float]] = defaultdict(list)
        for s in samples:
            percents[int(s.pid)].append(float(s.smUtil))
        return {
            pid: sum(percents[pid]) / len(percents[pid]) / 100 if pid in percents else 0.0
            for pid in running
        }
