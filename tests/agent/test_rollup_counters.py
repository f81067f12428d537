"""The rollup job's restart-safe counter increases: resets inside a bucket, a new _created
timestamp, and counter children that appear late, incrementally and on a rebuild."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

import pytest
from sqlalchemy import Engine, delete, select

from agent.storage import rolled_up
from agent.storage.buckets import unpack
from collectors.base import Sample
from migrations.schema import histogram_layouts, histogram_rollups, rollup_state, series
from tests.agent.rollup_helpers import (
    HOST,
    HOUR,
    MINUTE,
    TOKENS,
    Box,
    EngineScrape,
    Gpu,
    Row,
    T,
    at,
    rollup,
    series_rows,
    snapshot,
)

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


# -- histograms: one row per histogram and bucket time ------------------------------------------

TTFT = "gpuwatch_engine_ttft_seconds"


@dataclass
class HistogramScrape:
    """An engine's TTFT histogram, scripted: cumulative counts per bound (absent: the engine
    is down) and, where the engine exposes it, the histogram's ``_created`` timestamp."""

    buckets: dict[str, float] | None = None
    created: float | None = None
    name: str = "scrape:a"

    def collect(self, now: datetime) -> Iterable[Sample]:
        labels = {"host": HOST, "target": "a", "engine": "vllm", "model": "llama"}
        out = [
            Sample(metric=TTFT + "_bucket", value=v, labels={**labels, "le": le}, ts=now)
            for le, v in (self.buckets or {}).items()
        ]
        if self.created is not None:
            out.append(Sample(metric=TTFT + "_created", value=self.created, labels=labels, ts=now))
        return out


def histogram_rows(db: Engine, resolution: int = MINUTE) -> dict[datetime, dict[str, float]]:
    h = histogram_rollups.c
    query = (
        select(h.start, histogram_layouts.c.bounds, h.increases)
        .join(histogram_layouts, histogram_layouts.c.id == h.layout_id)
        .join(series, series.c.id == h.series_id)
        .where(series.c.metric == TTFT, h.resolution == resolution)
    )
    with db.connect() as conn:
        return {at: dict(unpack(b, i)) for at, b, i in conn.execute(query)}


def test_a_histogram_is_one_row_per_minute_with_restart_safe_increases(db: Engine) -> None:
    scrape = HistogramScrape({"0.1": 10.0, "1.0": 20.0, "+Inf": 25.0}, created=1000.0)
    box = Box(db, [Gpu(), scrape])
    box.tick(at(10))
    scrape.buckets = {"0.1": 14.0, "1.0": 26.0, "+Inf": 32.0}
    box.tick(at(20))
    # A restart: every bound counts from zero, what it counted since then is counted whole.
    scrape.buckets, scrape.created = {"0.1": 3.0, "1.0": 5.0, "+Inf": 6.0}, 2000.0
    box.tick(at(30))
    scrape.buckets = {"0.1": 4.0, "1.0": 7.0, "+Inf": 10.0}
    box.tick(at(60))
    rollup(db).run(at(60))

    assert histogram_rows(db) == {T: {"0.1": 4 + 3 + 1, "1.0": 6 + 5 + 2, "+Inf": 7 + 6 + 4}}
    assert series_rows(db, TTFT + "_bucket") == {}  # no row per bucket series any more


def test_a_new_bucket_layout_keeps_every_bound_and_hours_merge_them(db: Engine) -> None:
    """An engine upgrade adds a bound: each minute row holds the bounds it saw, and the hour
    row each bound's sum over its minutes."""
    scrape = HistogramScrape({"0.1": 1.0, "+Inf": 2.0})
    box = Box(db, [Gpu(), scrape])
    job = rollup(db, interval=60)
    for minute in range(1, 62):
        if minute == 30:  # restarted with a finer layout: counts from zero
            scrape.buckets = {"0.05": 0.0, "0.1": 0.0, "+Inf": 0.0}
        if minute >= 30:
            scrape.buckets = {"0.05": minute - 29.0, "0.1": 2.0 * (minute - 29), "+Inf": 3.0 *
                              (minute - 29)}  # fmt: skip
        else:
            scrape.buckets = {"0.1": 1.0 + minute, "+Inf": 2.0 + 2 * minute}
        box.tick(at(60 * minute))
        job.run(at(60 * minute))

    minutes = histogram_rows(db)
    assert minutes[at(60)] == {"0.1": 1.0, "+Inf": 2.0}
    # The restart's minute: old bounds count the values after the reset; the new bound's first
    # point is only its baseline (no good scrape lacked it: no birth).
    assert minutes[at(29 * 60)] == {"0.05": 0.0, "0.1": 2.0, "+Inf": 3.0}
    assert minutes[at(40 * 60)] == {"0.05": 1.0, "0.1": 2.0, "+Inf": 3.0}
    hour = histogram_rows(db, HOUR)[T]
    assert hour == {
        le: sum(row.get(le, 0.0) for start, row in minutes.items() if start < at(3600))
        for le in ("0.05", "0.1", "+Inf")
    }
    assert hour == {"0.05": 30.0, "0.1": 28 + 2 + 60.0, "+Inf": 56 + 3 + 90.0}


def test_a_reader_cannot_ask_for_a_metric_that_is_not_rolled_up() -> None:
    assert rolled_up.rolled_up(TOKENS, TTFT) == (TOKENS, TTFT)
    with pytest.raises(rolled_up.NotRolledUp, match="gpuwatch_gpu_utilization_ratio"):
        rolled_up.rolled_up("gpuwatch_gpu_utilization_ratio")
