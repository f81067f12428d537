"""The rollup job against real databases: exact minute rows, hour rows made of them, restarts
from the watermark, restart-safe counter increases, retention per host, and the cost summary
reading hour and minute rows without counting anything twice."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from sqlalchemy import Engine, delete, func, select

from agent.cost import summarize
from agent.db import open_database, upgrade_database
from agent.ratecard import Rate, RateCard
from agent.rollup import Rollup, RollupResult
from agent.runner import CollectorRunner
from agent.store import Store
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


@pytest.fixture
def db(db_url: str) -> Iterator[Engine]:
    upgrade_database(db_url)
    engine = open_database(db_url)
    yield engine
    engine.dispose()


def rollup(db: Engine, interval: float = 10, host: str = HOST, **kwargs: Any) -> Rollup:
    return Rollup(db, host, CARD, interval_seconds=interval, **kwargs)


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
    query = select(rollup_state.c.job, rollup_state.c.watermark).where(rollup_state.c.host == host)
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


# -- minute rows -----------------------------------------------------------------------------


def test_minute_rows_have_the_exact_usage_cost_allocations_and_aggregates(db: Engine) -> None:
    box, gpu, scrape = two_targets(db)
    run_ticks(box, gpu, scrape, range(1, 13))  # T+10 .. T+120

    result = rollup(db).run(at(120))

    assert result == RollupResult(minutes=2, hours=0, until=at(120))
    assert watermarks(db) == {"minute": at(120)}
    # Metering opens at the first tick (T+10): minute T has 50 s, minute T+60 all 60 s.
    assert usage_rows(db) == {
        T: {"observed_seconds": 50.0, "busy_seconds": 27.5, "energy_joules": 500.0,
            "cost_usd": Decimal("0.05"), "idle_cost_usd": Decimal("0.0225")},
        at(60): {"observed_seconds": 60.0, "busy_seconds": 30.0, "energy_joules": 600.0,
                 "cost_usd": Decimal("0.06"), "idle_cost_usd": Decimal("0.03")},
    }  # fmt: skip
    # a holds 3/4 of the GPU's memory, b 1/4.
    assert allocation_rows(db) == {
        (T, "a"): {"seconds": 37.5, "busy_seconds": 20.625, "cost_usd": Decimal("0.0375")},
        (T, "b"): {"seconds": 12.5, "busy_seconds": 6.875, "cost_usd": Decimal("0.0125")},
        (at(60), "a"): {"seconds": 45.0, "busy_seconds": 22.5, "cost_usd": Decimal("0.045")},
        (at(60), "b"): {"seconds": 15.0, "busy_seconds": 7.5, "cost_usd": Decimal("0.015")},
    }
    # A gauge: the samples of (T, T+60] are ticks 1..6, the one on T+60 included.
    assert series_rows(db, UTIL) == {
        T: {"count": 6, "sum": 3.0, "min": 0.25, "max": 0.75, "last": 0.75, "increase": None},
        at(60): {"count": 6, "sum": 3.0, "min": 0.25, "max": 0.75, "last": 0.75,
                 "increase": None},
    }  # fmt: skip
    # A counter: its first sample is only a baseline; every later step counts.
    assert series_rows(db, TOKENS, model="llama") == {
        T: {"count": 6, "sum": 750.0, "min": 100.0, "max": 150.0, "last": 150.0,
            "increase": 50.0},
        at(60): {"count": 6, "sum": 1110.0, "min": 160.0, "max": 210.0, "last": 210.0,
                 "increase": 60.0},
    }  # fmt: skip
    assert series_rows(db, ENERGY)[at(60)]["increase"] == 600.0


def test_an_incomplete_minute_waits_for_its_end(db: Engine) -> None:
    box, gpu, scrape = two_targets(db)
    run_ticks(box, gpu, scrape, range(1, 10))  # T+10 .. T+90

    result = rollup(db).run(at(95))

    assert result == RollupResult(minutes=1, hours=0, until=at(60))
    assert list(usage_rows(db)) == [T]
    assert list(series_rows(db, UTIL)) == [T]


def test_running_twice_changes_nothing(db: Engine) -> None:
    box, gpu, scrape = two_targets(db)
    run_ticks(box, gpu, scrape, range(1, 13))
    job = rollup(db)
    job.run(at(120))
    before = snapshot(db)

    job.run(at(120))
    assert snapshot(db) == before
    job.run(at(150))  # later, but no new minute is complete
    assert snapshot(db) == before
    rollup(db).run(at(120))  # another process, same instant
    assert snapshot(db) == before


def test_a_restart_continues_from_the_watermark_and_a_rerun_reproduces_it(db: Engine) -> None:
    box, gpu, scrape = two_targets(db)
    run_ticks(box, gpu, scrape, range(1, 13))  # T+10 .. T+120
    rollup(db).run(at(120))
    run_ticks(box, gpu, scrape, range(13, 25))  # T+130 .. T+240

    result = rollup(db).run(at(240))  # a new process: only the watermark carries over

    assert result == RollupResult(minutes=2, hours=0, until=at(240))
    usage = usage_rows(db)
    assert list(usage) == [T, at(60), at(120), at(180)]
    # Metering goes on across the watermark: (T+120, T+130] is metered from the tick at T+120.
    assert usage[at(120)]["observed_seconds"] == 60.0
    assert usage[at(120)]["cost_usd"] == Decimal("0.06")
    assert series_rows(db, TOKENS, model="llama")[at(120)]["increase"] == 60.0
    assert series_rows(db, ENERGY)[at(120)]["increase"] == 600.0
    done = snapshot(db)

    # Losing the watermark rebuilds everything from the raw samples: the very same rows.
    with db.begin() as conn:
        conn.execute(delete(rollup_state).where(rollup_state.c.host == HOST))
    rollup(db).run(at(240))
    assert snapshot(db) == done


# -- hour rows -------------------------------------------------------------------------------


def test_hour_rows_are_the_sum_of_their_sixty_minute_rows(db: Engine) -> None:
    box, gpu, scrape = two_targets(db)
    job = rollup(db, interval=20)
    for i in range(1, 190):  # every 20 s from T+20 to T+3780, rolled up once a minute
        gpu.utilization = alternating(i)
        gpu.energy = 1000.0 + 100.0 * i
        # The engine restarts at T+1800: its counter starts again from 0.
        scrape.tokens = {"llama": 10.0 * i if i <= 90 else 10.0 * (i - 90) - 5}
        box.tick(at(20 * i))
        if i % 3 == 0:
            job.run(at(20 * i))

    assert watermarks(db) == {"minute": at(3780), "hour": at(3600)}
    hour_usage = usage_rows(db, HOUR)
    assert list(hour_usage) == [T]
    minutes = {s: r for s, r in usage_rows(db).items() if s < at(3600)}
    assert len(minutes) == 60
    assert hour_usage[T] == {
        "observed_seconds": sum(r["observed_seconds"] for r in minutes.values()),
        "busy_seconds": sum(r["busy_seconds"] for r in minutes.values()),
        "energy_joules": sum(r["energy_joules"] for r in minutes.values()),
        "cost_usd": sum(r["cost_usd"] for r in minutes.values()),
        "idle_cost_usd": sum(r["idle_cost_usd"] for r in minutes.values()),
    }
    # And the truth: metered from the first tick (T+20) to the end of the hour.
    assert hour_usage[T]["observed_seconds"] == 3580.0
    assert hour_usage[T]["busy_seconds"] == 90 * 20 * 0.75 + 89 * 20 * 0.25  # ticks 2..180
    assert hour_usage[T]["cost_usd"] == Decimal("3.58")
    assert hour_usage[T]["energy_joules"] == 17_900.0

    hour_allocations = allocation_rows(db, HOUR)
    minute_allocations = allocation_rows(db)
    for target in ("a", "b"):
        own = [r for (s, t), r in minute_allocations.items() if t == target and s < at(3600)]
        assert len(own) == 60
        assert hour_allocations[(T, target)] == {
            "seconds": sum(r["seconds"] for r in own),
            "busy_seconds": sum(r["busy_seconds"] for r in own),
            "cost_usd": sum(r["cost_usd"] for r in own),
        }
    assert hour_allocations[(T, "a")]["cost_usd"] == Decimal("2.685")

    for metric, model in ((UTIL, None), (TOKENS, "llama"), (ENERGY, None)):
        rows = [r for s, r in series_rows(db, metric, model=model).items() if s < at(3600)]
        assert len(rows) == 60
        increases = [r["increase"] for r in rows]
        assert series_rows(db, metric, HOUR, model=model) == {
            T: {
                "count": sum(r["count"] for r in rows),
                "sum": sum(r["sum"] for r in rows),
                "min": min(r["min"] for r in rows),
                "max": max(r["max"] for r in rows),
                "last": rows[-1]["last"],
                "increase": None if None in increases else sum(increases),
            }
        }, metric
    tokens = series_rows(db, TOKENS, HOUR, model="llama")[T]
    # Ticks 1..180 are in the hour; the first is a baseline. 89 steps of 10 before the restart,
    # the 5 counted after it, then 89 more steps of 10.
    assert tokens["increase"] == 89 * 10 + 5 + 89 * 10
    assert (tokens["count"], tokens["min"], tokens["last"]) == (180, 5.0, 895.0)


# -- counters: resets, _created and late children ---------------------------------------------


def counter_minute(db: Engine, values: list[float], created: list[float] | None = None) -> Row:
    """Minute T's row of a counter sampled at T+10 .. T+60 with these values."""
    gpu, scrape = Gpu(), EngineScrape("a")
    box = Box(db, [gpu, scrape])
    for i, value in enumerate(values, start=1):
        scrape.tokens = {"llama": value}
        if created is not None:
            scrape.created = {"llama": created[i - 1]}
        box.tick(at(10 * i))
    rollup(db).run(at(60))
    return series_rows(db, TOKENS, model="llama")[T]


def test_a_counter_reset_inside_a_bucket_counts_the_value_after_it(db: Engine) -> None:
    row = counter_minute(db, [100.0, 110.0, 120.0, 5.0, 15.0, 25.0])
    assert row["increase"] == 10 + 10 + 5 + 10 + 10


def test_a_new_created_timestamp_is_a_restart_even_when_the_value_went_up(db: Engine) -> None:
    # Restarted between T+30 and T+40, and it had produced 130 tokens by the next scrape.
    row = counter_minute(
        db,
        [100.0, 110.0, 120.0, 130.0, 140.0, 150.0],
        created=[1000.0, 1000.0, 1000.0, 2000.0, 2000.0, 2000.0],
    )
    assert row["increase"] == 10 + 10 + 130 + 10 + 10


def test_an_unchanged_created_timestamp_is_no_restart(db: Engine) -> None:
    row = counter_minute(db, [100.0, 110.0, 120.0, 130.0, 140.0, 150.0], created=[1000.0] * 6)
    assert row["increase"] == 50.0


def late_child(db: Engine) -> Box:
    """Targets a and b serve model m2 from T+30 on. a was scraped fine before that; b's
    earlier scrapes failed (gpuwatch cannot know what b's counter had counted meanwhile)."""
    a, b = EngineScrape("a"), EngineScrape("b")
    box = Box(db, [Gpu(), a, b])
    values = {3: 7.0, 4: 9.0, 5: 12.0, 6: 20.0}
    for i in range(1, 7):
        b.down = i < 3
        if i in values:
            a.tokens = b.tokens = {"m2": values[i]}
        box.tick(at(10 * i))
    rollup(db).run(at(60))
    return box


def test_a_counter_child_first_seen_after_a_good_scrape_counts_from_zero(db: Engine) -> None:
    late_child(db)
    # a's scrape at T+20 was good and had no m2 child: everything since counts.
    assert series_rows(db, TOKENS, target="a", model="m2")[T]["increase"] == 20.0
    # b was never scraped successfully before: its first value is only a baseline.
    assert series_rows(db, TOKENS, target="b", model="m2")[T]["increase"] == 13.0


def test_a_late_counter_child_aggregates_only_its_stored_samples(db: Engine) -> None:
    late_child(db)
    row = series_rows(db, TOKENS, target="a", model="m2")[T]
    # Stored: 7, 9, 12, 20 at T+30 .. T+60.
    assert (row["count"], row["sum"], row["min"], row["max"], row["last"]) == (
        4,
        48.0,
        7.0,
        20.0,
        20.0,
    )


def test_a_rebuild_after_a_late_counter_child_reproduces_the_incremental_rows(
    db: Engine,
) -> None:
    scrape = EngineScrape("a")
    box = Box(db, [Gpu(), scrape])
    for i in range(1, 13):  # T+10 .. T+120: good scrapes, no m2 child yet
        box.tick(at(10 * i))
    rollup(db).run(at(120))
    for i, value in zip(range(13, 19), (7.0, 9.0, 12.0, 20.0, 21.0, 22.0), strict=True):
        scrape.tokens = {"m2": value}
        box.tick(at(10 * i))
    rollup(db).run(at(180))
    assert series_rows(db, TOKENS, model="m2") == {
        at(120): {"count": 6, "sum": 91.0, "min": 7.0, "max": 22.0, "last": 22.0,
                  "increase": 22.0},
    }  # fmt: skip
    incremental = snapshot(db)

    with db.begin() as conn:
        conn.execute(delete(rollup_state).where(rollup_state.c.host == HOST))
    rollup(db).run(at(180))

    assert snapshot(db) == incremental


# -- retention ---------------------------------------------------------------------------------


def test_retention_trims_this_hosts_data_only(db: Engine) -> None:
    boxes = [Box(db, [Gpu(host=h, uuid=f"GPU-{h}", memory={"a": GiB})], host=h)
             for h in (HOST, "other")]  # fmt: skip
    for i in range(1, 121):  # every minute for two hours
        for box in boxes:
            box.tick(at(60 * i))
    for box in boxes:
        rollup(db, interval=60, host=box.host).run(at(7200))
    other = snapshot(db, "other")
    assert len(usage_rows(db, HOUR)) == 2

    rollup(
        db,
        interval=60,
        raw_retention=timedelta(minutes=30),
        minute_retention=timedelta(hours=1),
        hour_retention=timedelta(minutes=90),
    ).run(at(7200))

    with db.connect() as conn:
        box_samples = select(func.min(samples.c.ts)).where(
            samples.c.series_id.in_(select(series.c.id).where(series.c.host == HOST))
        )
        assert conn.execute(box_samples).scalar() == at(5400)  # now - 30 min, kept
        runs = select(func.min(collector_runs.c.ts)).where(collector_runs.c.host == HOST)
        assert conn.execute(runs).scalar() == at(5400)
    assert min(usage_rows(db)) == at(3600)
    assert min(allocation_rows(db))[0] == at(3600)
    assert min(series_rows(db, UTIL)) == at(3600)
    # The hour T is older than 90 minutes; the hour T+1h is not.
    assert list(usage_rows(db, HOUR)) == [at(3600)]
    assert [s for s, _ in allocation_rows(db, HOUR)] == [at(3600)]
    assert list(series_rows(db, UTIL, HOUR)) == [at(3600)]
    # The other host's daemon keeps its own data for as long as it decides.
    assert snapshot(db, "other") == other


# -- the cost summary over hour and minute rows -----------------------------------------------


def test_summary_over_hours_and_trailing_minutes_counts_nothing_twice(db: Engine) -> None:
    gpu = Gpu(memory={"a": 3.0 * GiB, "b": 1.0 * GiB})
    a, b = EngineScrape("a"), EngineScrape("b")
    box = Box(db, [gpu, a, b])
    job = rollup(db, interval=20)
    for i in range(1, 196):  # every 20 s from T+20 to T+3900
        gpu.utilization = alternating(i)
        a.tokens = {"llama": 100.0 * i}
        b.tokens = {"qwen": 30.0 * i}
        box.tick(at(20 * i))
        if i % 3 == 0:
            job.run(at(20 * i))
    end = at(3900)  # one whole hour and five minutes

    both = summarize(db, T, end)

    with db.begin() as conn:  # as if the hour rollup had never run
        for table in (rollups, gpu_usage, gpu_allocations):
            conn.execute(delete(table).where(table.c.resolution == HOUR))
        conn.execute(delete(rollup_state).where(rollup_state.c.job == "hour"))
    minutes_only = summarize(db, T, end)
    assert both == minutes_only

    assert both.gpu_seconds == 3880.0  # from the first tick at T+20
    assert both.fleet.cost_usd == Decimal("3.88")
    assert both.allocated_seconds == 3880.0
    by_model = {m.name: m for m in both.models}
    assert by_model["llama"].useful_tokens == 100.0 * 194  # the first tick is a baseline
    assert by_model["qwen"].useful_tokens == 30.0 * 194
    assert by_model["llama"].cost_usd == Decimal("2.91")  # 3/4 of the GPU's memory
    assert by_model["qwen"].cost_usd == Decimal("0.97")


def test_summary_reads_whole_hours_from_hour_rows(db: Engine) -> None:
    box, gpu, scrape = two_targets(db)
    job = rollup(db, interval=20)
    for i in range(1, 196):
        gpu.utilization = alternating(i)
        gpu.energy = 1000.0 + 100.0 * i
        scrape.tokens = {"llama": 100.0 + 10.0 * (i - 1)}
        box.tick(at(20 * i))
        if i % 3 == 0:
            job.run(at(20 * i))
    end = at(3900)
    both = summarize(db, T, end)

    # Without the minute rows of the whole hour the summary is the same: it used the hour row.
    with db.begin() as conn:
        for table in (rollups, gpu_usage, gpu_allocations):
            conn.execute(
                delete(table).where(table.c.resolution == MINUTE, table.c.start < at(3600))
            )
    assert summarize(db, T, end) == both
    assert both.busy_seconds == 1940.0
    assert both.idle_cost_usd == Decimal("1.94")


def test_ticks_off_minute_bounds_meter_every_second_with_a_rollup_each_minute(db: Engine) -> None:
    # The daemon's real rhythm: a tick every 10 s, 5 s past the bounds, and a rollup each minute
    # that runs between ticks. An interval straddling a minute's end is metered once its
    # closing tick is stored, never lost to the run that saw only its opening tick.
    box = Box(db, [Gpu(memory={"a": 1.0})])
    job = rollup(db, interval=10)
    for k in range(19):  # ticks at T+5 .. T+185
        box.tick(at(5 + 10 * k))
        if k % 6 == 5:
            job.run(at(5 + 10 * k + 2))  # between two ticks, like the daemon's minute job
    job.run(at(200))
    usage = usage_rows(db)
    assert [u["observed_seconds"] for u in usage.values()] == [55.0, 60.0, 60.0]
    assert sum(u["cost_usd"] for u in usage.values()) == Decimal("0.175")  # 175 s at 0.001/s
