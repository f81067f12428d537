"""Per-process SM utilization from NVML (``nvmlDeviceGetProcessUtilization``): what a GPU shared
by several serving targets is split by, where the driver gives it (agent.cost.allocation).

NVML answers with one sample per process that had non-zero utilization since the timestamp
asked for; a process it lists as running but leaves out of a successful answer was idle (0).
Where the call is not supported (many GPUs and drivers, and MIG), finds no sample at all, or
fails, nothing is reported: unknown, never 0.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any, Protocol


class Query(Protocol):
    """The collector's NVML choke point (collectors.nvml._Nvml): None when unavailable."""

    def query(self, fn: str, *args: Any, symbol: str | None = None, **kwargs: Any) -> Any: ...


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
