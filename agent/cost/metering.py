"""The GPU cost ledger, metered as the rollup runs: uptime, busy time, energy and their price.

:class:`LedgerMeter` is the rollup's :class:`~agent.storage.rollup.Meter`: it receives the
points the minute rollup read (no second read of the raw samples), turns each GPU's ticks into
:class:`~agent.cost.ledger.Observation` values, prices them with the rate card and writes the
``gpu_usage`` and ``gpu_allocations`` rows; hour rows are summed from the minute rows.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Engine, insert, select

from agent.config.settings import Config
from agent.cost.ledger import Allocation, Observation, Usage, meter
from agent.cost.ratecard import RateCard
from agent.storage.rollup import (
    HOUR,
    MINUTE,
    Points,
    Rollup,
    SeriesMeta,
    hour_floor,
    replace_buckets,
    sum_opt,
)
from migrations.schema import gpu_allocations, gpu_usage

GPU_INFO = "gpuwatch_gpu_info"
UTIL = "gpuwatch_gpu_utilization_ratio"
ENERGY = "gpuwatch_gpu_energy_joules_total"
TARGET_MEMORY = "gpuwatch_target_gpu_memory_bytes"
UsageKey = tuple[str, str, datetime]  # (gpu uuid, gpu index, bucket start)


def rollup_for(engine: Engine, config: Config) -> Rollup:
    """The daemon's rollup job for its host, metering the ledger with the configured rates."""
    ledger = LedgerMeter(config.host, RateCard(config.rates), config.cost.shared_gpu_split)
    return Rollup.from_config(engine, config, ledger)


def metered_rollup(
    engine: Engine,
    host: str,
    rate_card: RateCard,
    interval_seconds: float,
    split_rule: str = "memory",
    **options: Any,
) -> Rollup:
    """A rollup job for ``host`` that meters the ledger at ``rate_card`` (tests, benchmarks)."""
    return Rollup(
        engine, host, interval_seconds, LedgerMeter(host, rate_card, split_rule), **options
    )


@dataclass(frozen=True, slots=True)
class LedgerMeter:
    """Meters one host's GPUs for the rollup job."""

    host: str
    rate_card: RateCard
    split_rule: str = "memory"  # how a GPU shared by targets is split: memory | equal

    def minutes(
        self,
        conn: Connection,
        meta: SeriesMeta,
        points: Points,
        span: tuple[datetime, datetime],
        max_gap: float,
    ) -> None:
        usage = self._ledger(meta, points, span, max_gap)
        self._write_usage(conn, usage, MINUTE, *span)

    def hours(self, conn: Connection, start: datetime, end: datetime) -> None:
        self._write_usage(conn, self._hour_usage(conn, start, end), HOUR, start, end)

    def _ledger(
        self, meta: SeriesMeta, points: Points, span: tuple[datetime, datetime], max_gap: float
    ) -> dict[UsageKey, Usage]:
        start, end = span
        gpus = gpu_observations(meta, points)
        count = len(gpus)
        out: dict[UsageKey, Usage] = {}
        for (uuid, index), observations in gpus.items():

            def price_at(at: datetime, uuid: str = uuid, index: str = index) -> Any:
                return self.rate_card.price(self.host, uuid, index, count, at)

            for bucket, usage in meter(
                observations, MINUTE, max_gap, price_at, self.split_rule
            ).items():
                if start <= bucket < end:
                    out[(uuid, index, bucket)] = usage
        return out

    def _write_usage(
        self,
        conn: Connection,
        usage: Mapping[UsageKey, Usage],
        resolution: int,
        start: datetime,
        end: datetime,
    ) -> None:
        replace_buckets(conn, gpu_usage, self.host, resolution, start, end)
        replace_buckets(conn, gpu_allocations, self.host, resolution, start, end)
        usage_rows, allocation_rows = [], []
        for (uuid, index, bucket), u in usage.items():
            key = {"host": self.host, "gpu_uuid": uuid, "resolution": resolution, "start": bucket}
            usage_rows.append(
                {**key, "gpu_index": index, "observed_seconds": u.observed_seconds,
                 "busy_seconds": u.busy_seconds, "energy_joules": u.energy_joules,
                 "cost_usd": u.cost_usd, "idle_cost_usd": u.idle_cost_usd}
            )  # fmt: skip
            for target, a in u.allocations.items():
                allocation_rows.append(
                    {**key, "target": target, "seconds": a.seconds,
                     "busy_seconds": a.busy_seconds, "cost_usd": a.cost_usd}
                )  # fmt: skip
        if usage_rows:
            conn.execute(insert(gpu_usage), usage_rows)
        if allocation_rows:
            conn.execute(insert(gpu_allocations), allocation_rows)

    def _hour_usage(
        self, conn: Connection, start: datetime, end: datetime
    ) -> dict[UsageKey, Usage]:
        out: dict[UsageKey, Usage] = {}
        window = [gpu_usage.c.host == self.host, gpu_usage.c.resolution == MINUTE,
                  gpu_usage.c.start >= start, gpu_usage.c.start < end]  # fmt: skip
        for row in conn.execute(select(gpu_usage).where(*window)).mappings():
            key = (row["gpu_uuid"], row["gpu_index"], hour_floor(row["start"]))
            u = out.setdefault(key, Usage())
            u.observed_seconds += row["observed_seconds"]
            u.busy_seconds += row["busy_seconds"]
            u.energy_joules = sum_opt(u.energy_joules, row["energy_joules"])
            u.cost_usd = sum_opt(u.cost_usd, row["cost_usd"])
            u.idle_cost_usd = sum_opt(u.idle_cost_usd, row["idle_cost_usd"])
        index_of = {uuid: index for uuid, index, _ in out}
        a_window = [gpu_allocations.c.host == self.host, gpu_allocations.c.resolution == MINUTE,
                    gpu_allocations.c.start >= start, gpu_allocations.c.start < end]  # fmt: skip
        for row in conn.execute(select(gpu_allocations).where(*a_window)).mappings():
            hour = hour_floor(row["start"])
            u = out.setdefault((row["gpu_uuid"], index_of.get(row["gpu_uuid"], ""), hour), Usage())
            a = u.allocations.setdefault(row["target"], Allocation())
            a.seconds += row["seconds"]
            a.busy_seconds += row["busy_seconds"]
            a.cost_usd = sum_opt(a.cost_usd, row["cost_usd"])
        return out


def gpu_observations(meta: SeriesMeta, points: Points) -> dict[tuple[str, str], list[Observation]]:
    """Per physical GPU (uuid, index), its observations: one per tick it was seen."""
    seen: dict[tuple[str, str], dict[datetime, dict[str, Any]]] = defaultdict(dict)
    for sid, (metric, labels) in meta.items():
        if "mig_instance" in labels or metric not in (GPU_INFO, UTIL, ENERGY, TARGET_MEMORY):
            continue
        gpu = (labels.get("gpu_uuid", ""), labels.get("gpu_index", ""))
        for ts, value in points.get(sid, []):
            reading = seen[gpu].setdefault(ts, {"targets": {}})
            if metric == GPU_INFO:
                reading["seen"] = True
            elif metric == UTIL:
                reading["util"] = value
            elif metric == ENERGY:
                reading["energy"] = value
            else:
                reading["targets"][labels.get("target", "")] = value
    return {
        gpu: [
            Observation(ts, r.get("util"), r.get("energy"), r["targets"])
            for ts, r in sorted(readings.items())
            if r.get("seen")
        ]
        for gpu, readings in seen.items()
    }
