"""The cost summary over the rollup job's hour and minute rows: nothing counted twice, whole
hours read from hour rows, and every second metered at the daemon's real rhythm."""

from __future__ import annotations

from decimal import Decimal

from sqlalchemy import Engine, delete

from agent.cost.summarize import summarize
from migrations.schema import gpu_allocations, gpu_usage, rollup_state, rollups
from tests.agent.rollup_helpers import (
    HOUR,
    MINUTE,
    Box,
    EngineScrape,
    GiB,
    Gpu,
    T,
    alternating,
    at,
    rollup,
    two_targets,
    usage_rows,
)

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
