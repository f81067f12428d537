"""Which rule split each shared GPU's cost over a window: by the targets' SM utilization (where
NVML gave every process on it one) or by their memory share. agent.cost.allocation records the
rule each tick as ``gpuwatch_gpu_split_basis_info{basis}`` for a GPU used by several targets;
this sums those ticks from the rollups, so the report and ``gpuwatch cost`` can say it. A GPU
with no such ticks (one target, or data stored before the rule existed) has no entry.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select, union_all

from agent.cost.allocation import BASIS_METRIC
from agent.cost.split import Split, series_ranges
from agent.storage.rolled_up import rolled_up
from migrations.schema import rollups, series

(BASIS,) = rolled_up(BASIS_METRIC)
SM, MEMORY = "sm_utilization", "memory"
GpuKey = tuple[str, str]  # (host, gpu uuid)


@dataclass(frozen=True, slots=True)
class SplitBasis:
    """Ticks of a shared GPU split by SM utilization, and by memory share."""

    sm_ticks: int = 0
    memory_ticks: int = 0

    @property
    def basis(self) -> str:
        """ "sm_utilization", "memory", or both joined by "+" where it changed in the window."""
        return "+".join(b for b, n in ((SM, self.sm_ticks), (MEMORY, self.memory_ticks)) if n)

    def describe(self) -> str:
        if not self.memory_ticks:
            return "split by SM utilization"
        if not self.sm_ticks:
            return "split by memory share (NVML gave no per-process utilization)"
        share = self.sm_ticks / (self.sm_ticks + self.memory_ticks)
        return f"split by SM utilization {share:.0%} of the time, else by memory share"


def split_bases(conn: Any, split: Split, hosts: Collection[str] = ()) -> dict[GpuKey, SplitBasis]:
    """(host, gpu uuid) -> its SplitBasis over the split's window, for the GPUs shared in it
    (of ``hosts`` when given)."""
    query = select(series.c.id, series.c.host, series.c.labels).where(series.c.metric == BASIS)
    if hosts:
        query = query.where(series.c.host.in_(sorted(hosts)))
    meta = {sid: (host, labels) for sid, host, labels in conn.execute(query)}
    r = rollups.c
    parts = [
        select(r.series_id, func.sum(r.count)).where(condition).group_by(r.series_id)
        for condition in series_ranges(split, {sid: m[0] for sid, m in meta.items()})
    ]
    ticks: dict[GpuKey, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for sid, count in conn.execute(union_all(*parts)) if parts else ():
        host, labels_json = meta[sid]
        labels = _labels(labels_json)
        ticks[(host, labels.get("gpu_uuid", ""))][labels.get("basis", MEMORY)] += int(count or 0)
    return {
        key: SplitBasis(by.get(SM, 0), by.get(MEMORY, 0))
        for key, by in ticks.items()
        if by.get(SM, 0) or by.get(MEMORY, 0)
    }


def shared_note(bases: Mapping[GpuKey, SplitBasis], names: Mapping[GpuKey, str], rule: str) -> str:
    """One line on how the shared GPUs were split ("" when none was shared); ``names`` gives
    each GPU's name for people (e.g. "host-a GPU 0")."""
    if not bases:
        return ""
    if rule == "equal":
        return "shared GPUs split equally (cost.shared_gpu_split)"
    said: dict[str, list[str]] = defaultdict(list)
    for key, b in sorted(bases.items()):
        said[b.describe()].append(names.get(key, f"{key[0]} {key[1]}"))
    return "shared GPUs: " + "; ".join(
        f"{', '.join(gpus)} {how}" for how, gpus in sorted(said.items())
    )


def _labels(text: str) -> dict[str, str]:
    value = json.loads(text)
    return value if isinstance(value, dict) else {}
