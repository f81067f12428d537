"""The rollup job's restart-safe counter increases: resets inside a bucket, a new _created
timestamp, and counter children that appear late, incrementally and on a rebuild."""

from __future__ import annotations

from sqlalchemy import Engine, delete

from migrations.schema import rollup_state
from tests.agent.rollup_helpers import (
    HOST,
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
