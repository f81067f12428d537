"""Shared by the rollup tests: the outside world scripted (a GPU, an engine's /metrics, a
host's daemon minus the clock), the rollup job at a price of 0.001 USD a second, and the
tables it writes read back."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from sqlalchemy import Engine, select

from agent.collect.runner import CollectorRunner
from agent.config.rates import Rate
from agent.cost.metering import metered_rollup
from agent.cost.ratecard import RateCard
from agent.storage.rollup import Rollup
from agent.storage.store import Store
from collectors.base import CollectError, Sample
from migrations.schema import (
    collector_runs,
    gpu_allocations,
    gpu_usage,
    rollup_state,
    rollups,
    samples,
    series,
)

T = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)  # an hour boundary
HOST = "box"
GPU = "GPU-00000000-0000-0000-0000-00000000aaaa"
GiB = 2**30
# 3.60 USD an hour is exactly 0.001 USD a second: every expected cost below is exact.
CARD = RateCard((Rate(usd_per_hour=Decimal("3.60")),))
TOKENS = "gpuwatch_engine_generation_tokens_total"
UTIL = "gpuwatch_gpu_utilization_ratio"
ENERGY = "gpuwatch_gpu_energy_joules_total"
USED = "gpuwatch_gpu_memory_used_bytes"  # a gauge the rollup keeps (the report's VRAM peak)
MINUTE, HOUR = 60, 3600


def at(seconds: float) -> datetime:
    return T + timedelta(seconds=seconds)


# -- the outside world, scripted ------------------------------------------------------------


@dataclass
class Gpu:
    """NVML, scripted: one GPU's info, utilisation, energy and per-target memory."""

    host: str = HOST
    uuid: str = GPU
    index: str = "0"
    utilization: float = 0.5
    energy: float = 1000.0
    memory: dict[str, float] = field(default_factory=dict)  # target -> bytes
    name: str = "nvml"

    def collect(self, now: datetime) -> Iterable[Sample]:
        labels = {"host": self.host, "gpu_uuid": self.uuid, "gpu_index": self.index}
        out = [
            Sample(metric="gpuwatch_gpu_info", value=1.0, labels=labels, ts=now),
            Sample(metric=UTIL, value=self.utilization, labels=labels, ts=now),
            Sample(metric=ENERGY, value=self.energy, labels=labels, ts=now),
            # Follows utilisation (in GiB) so that the gauge rows have known figures.
            Sample(metric=USED, value=self.utilization * GiB, labels=labels, ts=now),
        ]
        out += [
            Sample(metric="gpuwatch_target_gpu_memory_bytes", value=bytes_, ts=now,
                   labels={**labels, "target": target})
            for target, bytes_ in self.memory.items()
        ]  # fmt: skip
        return out


@dataclass
class EngineScrape:
    """A serving target's /metrics, scripted: generation tokens per model (absent: no child
    yet) and, where the engine exposes them, the counters' ``_created`` timestamps."""

    target: str
    host: str = HOST
    tokens: dict[str, float] = field(default_factory=dict)  # model -> counter value
    created: dict[str, float] = field(default_factory=dict)  # model -> creation timestamp
    down: bool = False

    @property
    def name(self) -> str:
        return f"scrape:{self.target}"

    def labels(self, model: str) -> dict[str, str]:
        return {"host": self.host, "target": self.target, "engine": "vllm", "model": model}

    def collect(self, now: datetime) -> Iterable[Sample]:
        if self.down:
            raise CollectError("connection refused")
        out = [
            Sample(metric=TOKENS, value=v, labels=self.labels(m), ts=now)
            for m, v in self.tokens.items()
        ]
        out += [
            Sample(metric="gpuwatch_engine_generation_tokens_created", value=v, ts=now,
                   labels=self.labels(m))
            for m, v in self.created.items()
        ]  # fmt: skip
        return out


@dataclass
class Box:
    """One host's daemon, minus the clock: collect a round and store it, at a given instant."""

    db: Engine
    collectors: list[Any]
    host: str = HOST
    runner: CollectorRunner = field(init=False)
    store: Store = field(init=False)

    def __post_init__(self) -> None:
        self.runner = CollectorRunner(self.host, self.collectors, timer=lambda: 0.0)
        self.store = Store(self.db, self.host)

    def tick(self, now: datetime) -> None:
        self.store.write_round(self.runner.run(now))


def rollup(db: Engine, interval: float = 10, host: str = HOST, **kwargs: Any) -> Rollup:
    return metered_rollup(db, host, CARD, interval_seconds=interval, **kwargs)


# -- reading the tables back ----------------------------------------------------------------

Row = dict[str, Any]


def series_rows(
    db: Engine,
    metric: str,
    resolution: int = MINUTE,
    *,
    model: str | None = None,
    target: str | None = None,
) -> dict[datetime, Row]:
    """The rollup rows of this host's one series of ``metric`` (of that model and target, when
    given), by bucket start."""
    labels = {k: v for k, v in (("model", model), ("target", target)) if v is not None}
    query = (
        select(rollups, series.c.labels)
        .join(series, series.c.id == rollups.c.series_id)
        .where(series.c.metric == metric, series.c.host == HOST)
        .where(rollups.c.resolution == resolution)
        .order_by(rollups.c.start)
    )
    with db.connect() as conn:
        found = [
            r for r in conn.execute(query).mappings()
            if labels.items() <= json.loads(r["labels"]).items()
        ]  # fmt: skip
    assert len({r["series_id"] for r in found}) <= 1, "labels match more than one series"
    keep = ("count", "sum", "min", "max", "last", "increase")
    return {r["start"]: {k: r[k] for k in keep} for r in found}


def usage_rows(db: Engine, resolution: int = MINUTE, host: str = HOST) -> dict[datetime, Row]:
    query = (
        select(gpu_usage)
        .where(gpu_usage.c.host == host, gpu_usage.c.resolution == resolution)
        .order_by(gpu_usage.c.start)
    )
    keep = ("observed_seconds", "busy_seconds", "energy_joules", "cost_usd", "idle_cost_usd")
    with db.connect() as conn:
        return {r["start"]: {k: r[k] for k in keep} for r in conn.execute(query).mappings()}


def allocation_rows(
    db: Engine, resolution: int = MINUTE, host: str = HOST
) -> dict[tuple[datetime, str], Row]:
    query = (
        select(gpu_allocations)
        .where(gpu_allocations.c.host == host, gpu_allocations.c.resolution == resolution)
        .order_by(gpu_allocations.c.start, gpu_allocations.c.target)
    )
    keep = ("seconds", "busy_seconds", "cost_usd")
    with db.connect() as conn:
        return {
            (r["start"], r["target"]): {k: r[k] for k in keep}
            for r in conn.execute(query).mappings()
        }


Snapshot = dict[str, list[tuple[Any, ...]]]


def snapshot(db: Engine, host: str | None = None) -> Snapshot:
    """Everything the rollup job writes (and the raw data it trims), optionally of one host."""
    host_series = select(series.c.id).where(series.c.host == host)
    out: Snapshot = {}
    with db.connect() as conn:
        for table in (samples, rollups):
            query = select(table)
            if host is not None:
                query = query.where(table.c.series_id.in_(host_series))
            out[table.name] = sorted(tuple(r) for r in conn.execute(query))
        for table in (gpu_usage, gpu_allocations, rollup_state, collector_runs):
            query = select(table)
            if host is not None:
                query = query.where(table.c.host == host)
            out[table.name] = sorted(tuple(r) for r in conn.execute(query))
    return out


def watermarks(db: Engine, host: str = HOST) -> dict[str, datetime]:
    """How far the minute and hour rollups have got (the carried baselines' mark left out)."""
    query = select(rollup_state.c.job, rollup_state.c.watermark).where(
        rollup_state.c.host == host, rollup_state.c.job.in_(("minute", "hour"))
    )
    with db.connect() as conn:
        return {job: mark for job, mark in conn.execute(query)}


def alternating(i: int) -> float:
    """Utilisation at tick i: 25 % on odd ticks, 75 % on even ones."""
    return 0.25 if i % 2 else 0.75


def two_targets(db: Engine) -> tuple[Box, Gpu, EngineScrape]:
    """A GPU shared 3:1 by memory between targets a and b; a serves model llama."""
    gpu = Gpu(memory={"a": 3.0 * GiB, "b": 1.0 * GiB})
    scrape = EngineScrape("a")
    return Box(db, [gpu, scrape]), gpu, scrape


def run_ticks(box: Box, gpu: Gpu, scrape: EngineScrape, ticks: range, step: int = 10) -> None:
    """Tick i at T + i * step: alternating utilisation, 100 J and 10 tokens a tick."""
    for i in ticks:
        gpu.utilization = alternating(i)
        gpu.energy = 1000.0 + 100.0 * i
        scrape.tokens = {"llama": 100.0 + 10.0 * (i - 1)}
        box.tick(at(i * step))
