"""The rollup job against real databases: exact minute rows, hour rows made of them, restarts
from the watermark, and retention per host."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from sqlalchemy import Engine, delete, func, select

from agent.storage.rollup import RollupResult
from collectors.base import Sample
from migrations.schema import collector_runs, rollup_carry, rollup_state, samples, series
from tests.agent.rollup_helpers import (
    ENERGY,
    HOST,
    HOUR,
    TOKENS,
    USED,
    UTIL,
    Box,
    GiB,
    Gpu,
    T,
    allocation_rows,
    alternating,
    at,
    rollup,
    run_ticks,
    series_rows,
    snapshot,
    two_targets,
    usage_rows,
    watermarks,
)

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
    assert series_rows(db, USED) == {
        T: {"count": 6, "sum": 3.0 * GiB, "min": 0.25 * GiB, "max": 0.75 * GiB,
            "last": 0.75 * GiB, "increase": None},
        at(60): {"count": 6, "sum": 3.0 * GiB, "min": 0.25 * GiB, "max": 0.75 * GiB,
                 "last": 0.75 * GiB, "increase": None},
    }  # fmt: skip
    # A counter: its first sample is only a baseline; every later step counts.
    assert series_rows(db, TOKENS, model="llama") == {
        T: {"count": 6, "sum": 750.0, "min": 100.0, "max": 150.0, "last": 150.0,
            "increase": 50.0},
        at(60): {"count": 6, "sum": 1110.0, "min": 160.0, "max": 210.0, "last": 210.0,
                 "increase": 60.0},
    }  # fmt: skip
    # Series no report reads are inputs only (the ledger meters utilisation and energy).
    assert series_rows(db, UTIL) == series_rows(db, ENERGY) == {}


def test_an_incomplete_minute_waits_for_its_end(db: Engine) -> None:
    box, gpu, scrape = two_targets(db)
    run_ticks(box, gpu, scrape, range(1, 10))  # T+10 .. T+90

    result = rollup(db).run(at(95))

    assert result == RollupResult(minutes=1, hours=0, until=at(60))
    assert list(usage_rows(db)) == [T]
    assert list(series_rows(db, USED)) == [T]


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
    assert usage[at(120)]["energy_joules"] == 600.0
    done = snapshot(db)

    # Losing the watermark rebuilds everything from the raw samples: the very same rows.
    with db.begin() as conn:
        conn.execute(delete(rollup_state).where(rollup_state.c.host == HOST))
    rollup(db).run(at(240))
    assert snapshot(db) == done


def test_tokens_served_while_the_scrape_was_down_count_from_the_carried_baseline(
    db: Engine,
) -> None:
    box, gpu, scrape = two_targets(db)
    run_ticks(box, gpu, scrape, range(1, 7))  # llama at 150 tokens at T+60
    scrape.down = True
    run_ticks(box, gpu, scrape, range(7, 15))  # T+70 .. T+140: no token samples
    rollup(db).run(at(120))
    # The next run reads from T+90 on and nothing older: each series' last point before that
    # was carried forward by the first run, so the raw samples behind it may be gone.
    with db.begin() as conn:
        conn.execute(delete(samples).where(samples.c.ts <= at(90)))
    scrape.down = False
    run_ticks(box, gpu, scrape, range(15, 25))  # back at 240 tokens at T+150

    rollup(db).run(at(240))

    # (T+120, T+180]: the 90 tokens served while down (150 -> 240), then 3 ticks of 10.
    assert series_rows(db, TOKENS, model="llama")[at(120)]["increase"] == 120.0


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

    for metric, model in ((USED, None), (TOKENS, "llama")):
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
    assert min(series_rows(db, USED)) == at(3600)
    # The hour T is older than 90 minutes; the hour T+1h is not.
    assert list(usage_rows(db, HOUR)) == [at(3600)]
    assert [s for s, _ in allocation_rows(db, HOUR)] == [at(3600)]
    assert list(series_rows(db, USED, HOUR)) == [at(3600)]
    # The other host's daemon keeps its own data for as long as it decides.
    assert snapshot(db, "other") == other


# -- what a run reads -----------------------------------------------------------------------


@dataclass
class Unreported:
    """Series no report, cost signal or alert reads from the rollups: kept raw only."""

    name: str = "scrape:extra"

    def collect(self, now: datetime) -> list[Sample]:
        labels = {"host": HOST, "target": "a", "engine": "vllm", "model": "llama"}
        return [
            Sample(metric="gpuwatch_engine_requests_running", value=3.0, labels=labels, ts=now),
            Sample(metric=f"{QUEUE}_bucket", value=5.0, labels={**labels, "le": "+Inf"}, ts=now),
            Sample(metric=f"{QUEUE}_created", value=1.0, labels=labels, ts=now),
        ]


# A histogram no reader asks of the rollups (queue time is read now: [[slo]] queue thresholds).
QUEUE = "gpuwatch_engine_prefill_time_seconds"


def test_a_run_reads_and_carries_only_the_series_it_makes_rows_from(db: Engine) -> None:
    # At 1 s ticks reading every series of a box each minute was a 15 MB peak that the
    # daemon's allocator kept (bench/memory.py); the other series stay raw, unread.
    _, gpu, scrape = two_targets(db)
    box = Box(db, [gpu, scrape, Unreported()])
    scrape.created = {"llama": 1000.0}
    run_ticks(box, gpu, scrape, range(1, 13))

    rollup(db).run(at(120))

    carried = select(series.c.metric).join(rollup_carry, rollup_carry.c.series_id == series.c.id)
    with db.connect() as conn:
        metrics = set(conn.execute(carried).scalars())
    assert {TOKENS, f"{TOKENS.removesuffix('_total')}_created", UTIL, ENERGY} <= metrics
    assert not metrics & {"gpuwatch_engine_requests_running", f"{QUEUE}_bucket", f"{QUEUE}_created"}
    # The same rows as without them (test_minute_rows_have_the_exact_usage_...).
    rows = series_rows(db, TOKENS, model="llama")
    assert [rows[T]["increase"], rows[at(60)]["increase"]] == [50.0, 60.0]
