"""The pods' part of the cost ledger's writes (``gpu_pod_allocations``): the minute rows the
metering computed (agent.cost.pods_ledger), and hour and day rows summed from the finer
rows, exactly as ``gpu_allocations`` are (agent.cost.metering)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, insert, select

from agent.cost.pods_ledger import PodKey, PodShare
from agent.storage.buckets import FINER, floor_to
from agent.storage.rollup import replace_buckets, sum_opt
from migrations.schema import gpu_pod_allocations

# (gpu uuid, bucket start) -> that GPU's pods in that bucket
PodsOf = Callable[[str, datetime], dict[PodKey, PodShare]]


def write_pods(
    conn: Connection,
    host: str,
    rows: Iterable[tuple[str, datetime, Mapping[PodKey, PodShare]]],
    resolution: int,
    start: datetime,
    end: datetime,
) -> None:
    """Replace ``host``'s pod rows of [start, end) at ``resolution`` by ``rows`` ((gpu uuid,
    bucket start, its pods))."""
    replace_buckets(conn, gpu_pod_allocations, host, resolution, start, end)
    out = [
        {"host": host, "gpu_uuid": uuid, "resolution": resolution, "start": bucket,
         "namespace": namespace, "pod": pod, "seconds": p.seconds,
         "busy_seconds": p.busy_seconds, "cost_usd": p.cost_usd, "sm_seconds": p.sm_seconds,
         "memory_seconds": p.memory_seconds, "request_seconds": p.request_seconds,
         "untargeted_seconds": p.untargeted_seconds,
         "untargeted_busy_seconds": p.untargeted_busy_seconds,
         "untargeted_cost_usd": p.untargeted_cost_usd}
        for uuid, bucket, pods in rows
        for (namespace, pod), p in pods.items()
    ]  # fmt: skip
    if out:
        conn.execute(insert(gpu_pod_allocations), out)


def merge_pods(
    conn: Connection, host: str, resolution: int, start: datetime, end: datetime, pods_of: PodsOf
) -> None:
    """Add the rows one resolution finer than ``resolution`` in [start, end) to the pods
    ``pods_of`` gives per GPU and coarser bucket (money stays Decimal: a day's rows are its
    hours' sum to the digit)."""
    c = gpu_pod_allocations.c
    window = (c.host == host, c.resolution == FINER[resolution], c.start >= start,
              c.start < end)  # fmt: skip
    for row in conn.execute(select(gpu_pod_allocations).where(*window)).mappings():
        _add_row(pods_of(row["gpu_uuid"], floor_to(row["start"], resolution)), row)


def _add_row(pods: dict[PodKey, PodShare], row: Any) -> None:
    p = pods.setdefault((row["namespace"], row["pod"]), PodShare())
    p.seconds += row["seconds"]
    p.busy_seconds += row["busy_seconds"]
    p.cost_usd = sum_opt(p.cost_usd, row["cost_usd"])
    p.sm_seconds += row["sm_seconds"]
    p.memory_seconds += row["memory_seconds"]
    p.request_seconds += row["request_seconds"]
    p.untargeted_seconds += row["untargeted_seconds"]
    p.untargeted_busy_seconds += row["untargeted_busy_seconds"]
    p.untargeted_cost_usd = sum_opt(p.untargeted_cost_usd, row["untargeted_cost_usd"])
