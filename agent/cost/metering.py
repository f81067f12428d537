"""The GPU cost ledger, metered as the rollup runs: uptime, busy time, energy and their price.

:class:`LedgerMeter` is the rollup's :class:`~agent.storage.rollup.Meter`: it receives the
points the minute rollup read (no second read of the raw samples), turns each GPU's ticks into
:class:`~agent.cost.ledger.Observation` values, prices them with the rate card and writes the
``gpu_usage`` and ``gpu_allocations`` rows; hour rows are summed from the minute rows, day rows
from the hour rows.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Engine, insert, select

from agent.config.settings import Config
from agent.cost.carbon import co2_of
from agent.cost.ledger import Allocation, Co2Of, Observation, Usage, meter
from agent.cost.mig import MigShare
from agent.cost.mig_metering import (
    MIG_GPU,
    MIG_METERED,
    PROCESS,
    merge_mig,
    mig_gpu,
    note,
    write_mig,
)
from agent.cost.pods import POD_MEMORY, POD_SM
from agent.cost.pods_ledger import PodKey, PodShare
from agent.cost.pods_metering import merge_pods, write_pods
from agent.cost.ratecard import GpuPrices, RateCard
from agent.storage.buckets import FINER, floor_to
from agent.storage.rollup import (
    MINUTE,
    Points,
    Rollup,
    SeriesMeta,
    Write,
    replace_buckets,
    sum_opt,
)
from migrations.schema import gpu_allocations, gpu_usage

GPU_INFO = "gpuwatch_gpu_info"
UTIL = "gpuwatch_gpu_utilization_ratio"
ENERGY = "gpuwatch_gpu_energy_joules_total"
SM_ACTIVE = "gpuwatch_gpu_sm_active_ratio"
POWER = "gpuwatch_gpu_power_watts"
TARGET_MEMORY = "gpuwatch_target_gpu_memory_bytes"
TARGET_SM = "gpuwatch_target_gpu_sm_utilization_ratio"
# What gpu_observations reads.
METERED = frozenset({GPU_INFO, UTIL, ENERGY, SM_ACTIVE, POWER, TARGET_MEMORY, TARGET_SM,
                     POD_MEMORY, POD_SM, *MIG_METERED})  # fmt: skip
UsageKey = tuple[str, str, datetime]  # (gpu uuid, gpu index, bucket start)


def rollup_for(
    engine: Engine, config: Config, writer_turn: Callable[[float], None] | None = None
) -> Rollup:
    """The daemon's rollup job for its host, metering the ledger with the configured rates;
    ``writer_turn`` as for :class:`Rollup`."""
    ledger = LedgerMeter(
        config.host,
        RateCard(config.rates),
        config.cost.shared_gpu_split,
        co2_of(config.energy),
        config.cost.mig_split,
    )
    return Rollup.from_config(engine, config, ledger, writer_turn)


def metered_rollup(
    engine: Engine,
    host: str,
    rate_card: RateCard,
    interval_seconds: float,
    split_rule: str = "memory",
    co2: Co2Of | None = None,
    mig_split: str = "slices",
    **options: Any,
) -> Rollup:
    """A rollup job for ``host`` that meters the ledger at ``rate_card`` (reports' provisional
    part, tests, benchmarks); ``co2`` prices energy in grams of CO2."""
    ledger = LedgerMeter(host, rate_card, split_rule, co2, mig_split)
    return Rollup(engine, host, interval_seconds, ledger, **options)


@dataclass(frozen=True, slots=True)
class LedgerMeter:
    """Meters one host's GPUs for the rollup job."""

    host: str
    rate_card: RateCard
    split_rule: str = "memory"  # how a GPU shared by targets is split: memory | equal
    co2_of: Co2Of | None = None  # grams of CO2 for energy ([energy]); None: not counted
    mig_split: str = "slices"  # a MIG instance's share of its GPU: slices | memory

    def minutes(
        self,
        meta: SeriesMeta,
        points: Points,
        span: tuple[datetime, datetime],
        max_gap: float,
    ) -> Write:
        usage = self._ledger(meta, points, span, max_gap)
        return lambda conn: self._write_usage(conn, usage, MINUTE, *span)

    def merge(self, conn: Connection, resolution: int, start: datetime, end: datetime) -> None:
        usage = self._merged_usage(conn, resolution, start, end)
        self._write_usage(conn, usage, resolution, start, end)

    def reads(self, metric: str) -> bool:
        return metric in METERED

    def _ledger(
        self, meta: SeriesMeta, points: Points, span: tuple[datetime, datetime], max_gap: float
    ) -> dict[UsageKey, Usage]:
        start, end = span
        gpus = gpu_observations(meta, points)
        count = len(gpus)
        out: dict[UsageKey, Usage] = {}
        for (uuid, index), observations in gpus.items():
            price_at = GpuPrices(self.rate_card, self.host, uuid, index, count)
            for bucket, usage in meter(
                observations, MINUTE, max_gap, price_at, self.split_rule, self.co2_of,
                self.mig_split,
            ).items():  # fmt: skip
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
                 "cost_usd": u.cost_usd, "idle_cost_usd": u.idle_cost_usd,
                 "sm_observed_seconds": u.sm_observed_seconds,
                 "sm_active_seconds": u.sm_active_seconds,
                 "sm_idle_cost_usd": u.sm_idle_cost_usd, "co2_grams": u.co2_grams,
                 "power_integrated_seconds": u.power_integrated_seconds}
            )  # fmt: skip
            for target, a in u.allocations.items():
                allocation_rows.append(
                    {**key, "target": target, "seconds": a.seconds,
                     "busy_seconds": a.busy_seconds, "cost_usd": a.cost_usd,
                     "energy_joules": a.energy_joules, "co2_grams": a.co2_grams}
                )  # fmt: skip
        if usage_rows:
            conn.execute(insert(gpu_usage), usage_rows)
        if allocation_rows:
            conn.execute(insert(gpu_allocations), allocation_rows)
        pods = ((uuid, bucket, u.pods) for (uuid, _, bucket), u in usage.items())
        write_pods(conn, self.host, pods, resolution, start, end)
        migs = ((uuid, bucket, u.mig) for (uuid, _, bucket), u in usage.items())
        write_mig(conn, self.host, migs, resolution, start, end)

    def _merged_usage(
        self, conn: Connection, resolution: int, start: datetime, end: datetime
    ) -> dict[UsageKey, Usage]:
        """The rows one resolution finer than ``resolution`` in [start, end), summed per GPU
        and bucket; money stays Decimal, so a day row is its hours' sum to the digit. A GPU
        renumbered within a bucket (a reboot) keeps one row, under its latest index: the
        ledger's key is the GPU's uuid."""
        finer = FINER[resolution]
        merged: dict[tuple[str, datetime], Usage] = {}
        index_of: dict[str, str] = {}
        u_c = gpu_usage.c
        window = (u_c.host == self.host, u_c.resolution == finer, u_c.start >= start,
                  u_c.start < end)  # fmt: skip
        for row in conn.execute(select(gpu_usage).where(*window).order_by(u_c.start)).mappings():
            index_of[row["gpu_uuid"]] = row["gpu_index"]
            u = merged.setdefault((row["gpu_uuid"], floor_to(row["start"], resolution)), Usage())
            u.observed_seconds += row["observed_seconds"]
            u.busy_seconds += row["busy_seconds"]
            u.energy_joules = sum_opt(u.energy_joules, row["energy_joules"])
            u.cost_usd = sum_opt(u.cost_usd, row["cost_usd"])
            u.idle_cost_usd = sum_opt(u.idle_cost_usd, row["idle_cost_usd"])
            u.sm_observed_seconds += row["sm_observed_seconds"]
            u.sm_active_seconds += row["sm_active_seconds"]
            u.sm_idle_cost_usd = sum_opt(u.sm_idle_cost_usd, row["sm_idle_cost_usd"])
            u.co2_grams = sum_opt(u.co2_grams, row["co2_grams"])
            u.power_integrated_seconds += row["power_integrated_seconds"]
        a_c = gpu_allocations.c
        a_window = (a_c.host == self.host, a_c.resolution == finer, a_c.start >= start,
                    a_c.start < end)  # fmt: skip
        for row in conn.execute(select(gpu_allocations).where(*a_window)).mappings():
            u = merged.setdefault((row["gpu_uuid"], floor_to(row["start"], resolution)), Usage())
            a = u.allocations.setdefault(row["target"], Allocation())
            a.seconds += row["seconds"]
            a.busy_seconds += row["busy_seconds"]
            a.cost_usd = sum_opt(a.cost_usd, row["cost_usd"])
            a.energy_joules = sum_opt(a.energy_joules, row["energy_joules"])
            a.co2_grams = sum_opt(a.co2_grams, row["co2_grams"])

        def pods_of(uuid: str, at: datetime) -> dict[PodKey, PodShare]:
            return merged.setdefault((uuid, at), Usage()).pods

        merge_pods(conn, self.host, resolution, start, end, pods_of)

        def mig_of(uuid: str, at: datetime) -> dict[str, MigShare]:
            return merged.setdefault((uuid, at), Usage()).mig

        merge_mig(conn, self.host, resolution, start, end, mig_of)
        return {(uuid, index_of.get(uuid, ""), at): u for (uuid, at), u in merged.items()}


def gpu_observations(meta: SeriesMeta, points: Points) -> dict[tuple[str, str], list[Observation]]:
    """Per physical GPU (uuid, index), its observations: one per tick it was seen."""
    seen: dict[tuple[str, str], dict[datetime, dict[str, Any]]] = defaultdict(dict)
    for sid, (metric, labels) in meta.items():
        if metric not in METERED or (metric == PROCESS and "mig_instance" not in labels):
            continue  # a process's memory counts only for MIG instances' presence
        mig = "mig_instance" in labels or metric in MIG_GPU
        gpu = (labels.get("gpu_uuid", ""), labels.get("gpu_index", ""))
        for ts, value in points.get(sid, []):
            reading = seen[gpu].setdefault(
                ts, {"targets": {}, "sm": {}, "pods": {}, "pod_sm": {}, "mig": {}}
            )
            if mig:  # a MIG instance's, or the GPU's own size (agent.cost.mig_metering)
                note(reading["mig"], metric, labels, value)
            elif metric == GPU_INFO:
                reading["seen"] = True
            elif metric == UTIL:
                reading["util"] = value
            elif metric == ENERGY:
                reading["energy"] = value
            elif metric == SM_ACTIVE:
                reading["sm_active"] = min(1.0, max(0.0, value))
            elif metric == POWER:
                reading["power"] = value
            elif metric in (POD_MEMORY, POD_SM):
                pod = (labels.get("namespace", ""), labels.get("pod", ""))
                reading["pods" if metric == POD_MEMORY else "pod_sm"][pod] = value
            else:
                basis = "targets" if metric == TARGET_MEMORY else "sm"
                reading[basis][labels.get("target", "")] = value
    return {
        gpu: [
            Observation(
                ts,
                r.get("util"),
                r.get("energy"),
                r["targets"],
                r["sm"],
                r.get("sm_active"),
                r.get("power"),
                r["pods"],
                r["pod_sm"],
                mig_gpu(r["mig"]),
            )  # fmt: skip
            for ts, r in sorted(readings.items())
            if r.get("seen")
        ]
        for gpu, readings in seen.items()
    }
