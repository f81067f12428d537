"""The MIG instances' part of the cost ledger (``gpu_mig_usage``): the readings the metering
turns into :class:`~agent.cost.mig.MigGpu` per tick, the minute rows it computed
(agent.cost.mig), and hour and day rows summed from the finer rows, as ``gpu_usage``'s are."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, insert, select

from agent.cost.mig import MigGpu, MigInstance, MigShare
from agent.storage.buckets import FINER, floor_to
from agent.storage.rollup import replace_buckets, sum_opt
from migrations.schema import gpu_mig_usage

MIG_SLICES = "gpuwatch_gpu_mig_slices"
MEMORY_TOTAL = "gpuwatch_gpu_memory_total_bytes"
MIG_TARGET = "gpuwatch_target_mig_memory_bytes"
PROCESS = "gpuwatch_gpu_process_memory_bytes"
SM_ACTIVE = "gpuwatch_gpu_sm_active_ratio"
# Read for MIG on a GPU itself (its slices and memory size) as well as on its instances.
MIG_GPU = frozenset({MIG_SLICES, MEMORY_TOTAL, MIG_TARGET})
MIG_METERED = frozenset({*MIG_GPU, PROCESS, SM_ACTIVE})
# (gpu uuid, bucket start) -> that GPU's instances in that bucket
MigOf = Callable[[str, datetime], dict[str, MigShare]]


def note(reading: dict[str, Any], metric: str, labels: Mapping[str, str], value: float) -> None:
    """Keep one tick's MIG value of a GPU in ``reading`` (what :func:`mig_gpu` reads)."""
    name = labels.get("mig_instance")
    if name is None:  # the GPU's own slices or memory size
        reading[metric] = value
        return
    instance = reading.setdefault("instances", {}).setdefault(name, {"targets": set()})
    if metric == MIG_TARGET:
        instance["targets"].add(labels.get("target", ""))
        instance["held"] = True
    elif metric == PROCESS:
        instance["held"] = instance.get("held", False) or value > 0
    else:
        instance[metric] = value


def mig_gpu(reading: Mapping[str, Any]) -> MigGpu | None:
    """A tick's MIG layout of a GPU; None where no MIG instance was read. The instances are
    NVML's, named by their MIG UUIDs: dcgm-exporter names them by GPU instance id ("1"), which
    would count each instance twice."""
    instances = {
        name: i for name, i in reading.get("instances", {}).items() if name.startswith("MIG-")
    }
    if not instances:
        return None
    return MigGpu(
        reading.get(MIG_SLICES),
        reading.get(MEMORY_TOTAL),
        {
            name: MigInstance(
                i.get(MIG_SLICES),
                i.get(MEMORY_TOTAL),
                i.get(SM_ACTIVE),
                bool(i.get("held")),
                tuple(sorted(i["targets"])),
            )
            for name, i in instances.items()
        },
    )


def write_mig(
    conn: Connection,
    host: str,
    rows: Iterable[tuple[str, datetime, Mapping[str, MigShare]]],
    resolution: int,
    start: datetime,
    end: datetime,
) -> None:
    """Replace ``host``'s MIG rows of [start, end) at ``resolution`` by ``rows`` ((gpu uuid,
    bucket start, its instances))."""
    replace_buckets(conn, gpu_mig_usage, host, resolution, start, end)
    out = [
        {"host": host, "gpu_uuid": uuid, "resolution": resolution, "start": bucket,
         "mig_instance": name, "slices": m.slices, "basis": m.basis, "seconds": m.seconds,
         "share_seconds": m.share_seconds, "busy_seconds": m.busy_seconds,
         "sm_seconds": m.sm_seconds, "cost_usd": m.cost_usd,
         "idle_cost_usd": m.idle_cost_usd, "targets": ",".join(sorted(m.targets))}
        for uuid, bucket, instances in rows
        for name, m in instances.items()
    ]  # fmt: skip
    if out:
        conn.execute(insert(gpu_mig_usage), out)


def merge_mig(
    conn: Connection, host: str, resolution: int, start: datetime, end: datetime, mig_of: MigOf
) -> None:
    """Add the rows one resolution finer than ``resolution`` in [start, end) to the instances
    ``mig_of`` gives per GPU and coarser bucket (money stays Decimal)."""
    c = gpu_mig_usage.c
    window = (c.host == host, c.resolution == FINER[resolution], c.start >= start,
              c.start < end)  # fmt: skip
    for row in conn.execute(select(gpu_mig_usage).where(*window).order_by(c.start)).mappings():
        m = mig_of(row["gpu_uuid"], floor_to(row["start"], resolution)).setdefault(
            row["mig_instance"], MigShare()
        )
        m.seconds += row["seconds"]
        m.share_seconds += row["share_seconds"]
        m.busy_seconds += row["busy_seconds"]
        m.sm_seconds += row["sm_seconds"]
        m.slices = row["slices"]  # the latest
        m.basis = row["basis"]
        m.cost_usd = sum_opt(m.cost_usd, row["cost_usd"])
        m.idle_cost_usd = sum_opt(m.idle_cost_usd, row["idle_cost_usd"])
        m.targets.update(t for t in row["targets"].split(",") if t)
