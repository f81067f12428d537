"""Raw samples packed into chunks by the rollup job: nothing a reader sees changes.

A box ticks every 30 s over three hours; the real rollup job runs every minute as the daemon
does. Hours the rollup is done with leave the head for one chunk per series; every stored
sample still reads back exactly, through ``Store.samples`` and ``Store.window``; a later run
that must look a baseline up in raw samples finds it in a chunk; retention drops whole chunks.
"""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import Engine, func, select

from agent.storage import raw
from agent.storage.store import Store
from migrations.schema import rollup_carry, rollup_state, sample_chunks, samples, series
from tests.agent.rollup_helpers import HOST, TOKENS, Box, EngineScrape, Gpu, at, rollup

TICK = 30  # the packing is the same at any interval; fewer ticks keep the tests quick


def run_box(db: Engine, seconds: int) -> tuple[Box, list[tuple[int, float]]]:
    """Tick a GPU and an engine every 30 s (tokens growing), rolling up every minute."""
    engine = EngineScrape("llama", tokens={"m": 0.0})
    box = Box(db, [Gpu(), engine])
    job = rollup(db, TICK)
    written = []
    for t in range(0, seconds + 1, TICK):
        engine.tokens["m"] = float(7 * t)
        box.tick(at(t))
        written.append((t, float(7 * t)))
        if t % 60 == 0:
            job.run(at(t))
    return box, written


def counts(db: Engine) -> tuple[int, int]:
    with db.connect() as conn:
        head = conn.execute(select(func.count()).select_from(samples)).scalar_one()
        chunks = conn.execute(select(func.count()).select_from(sample_chunks)).scalar_one()
    return head, chunks


def test_rolled_up_hours_are_packed_and_every_sample_reads_back(db: Engine) -> None:
    box, written = run_box(db, 3 * 3600)

    head, chunks = counts(db)
    series_count = len({s.metric + str(s.labels) for s in box.store.samples()})
    # Hours 0 and 1 are packed (one chunk per series each); hour 2 and the last tick stay rows.
    assert chunks == 2 * series_count
    assert head == (3600 // TICK + 1) * series_count
    tokens = [(s.ts, s.value) for s in box.store.samples(TOKENS)]
    assert tokens == [(at(t), v) for t, v in written]


def test_a_window_across_packed_and_head_rows_has_its_baseline(db: Engine) -> None:
    box, _ = run_box(db, 3 * 3600)

    window = box.store.window(TOKENS, at(3600 + 1795), at(2 * 3600 + 45))
    (points,) = window.values()
    assert points[0] == (at(3600 + 1770), 7.0 * (3600 + 1770))  # the baseline, from a chunk
    assert points[-1] == (at(2 * 3600 + 30), 7.0 * (2 * 3600 + 30))  # from the head
    assert [ts for ts, _ in points[1:]] == [at(t) for t in range(3600 + 1800, 7200 + 31, TICK)]


def test_a_rollup_without_carried_baselines_finds_them_in_chunks(db: Engine) -> None:
    """A database from before carrying (or a changed interval): the baseline of the first
    increase is looked up in raw samples, which by now are packed."""
    run_box(db, 2 * 3600 + 600)
    with db.begin() as conn:
        conn.execute(rollup_carry.delete())
        conn.execute(rollup_state.delete().where(rollup_state.c.job == "carry"))
        mine = select(series.c.id).where(series.c.host == HOST)
        found = raw.last_at_or_before(conn, mine, at(3600 + 5), timedelta(days=1))
        host_series = len(conn.execute(mine).all())
    assert len(found) == host_series
    assert {ts for ts, _ in found.values()} == {at(3600)}  # first point of the packed hour


def test_retention_drops_whole_chunks_only_when_all_their_points_are_old(db: Engine) -> None:
    box, _ = run_box(db, 3 * 3600)
    mine = select(series.c.id).where(series.c.host == HOST)
    with db.begin() as conn:
        raw.trim(conn, mine, at(3600 + 1800))  # inside the second packed hour
        starts = set(conn.execute(select(sample_chunks.c.start)).scalars())
    assert starts == {at(3600)}
    kept = [s.ts for s in box.store.samples(TOKENS)]
    assert kept[0] == at(3600)


def test_a_late_row_for_a_packed_hour_is_merged_into_its_chunk(db: Engine) -> None:
    box, _ = run_box(db, 2 * 3600 + 600)
    store = Store(db, HOST)
    (sid,) = store.series_of(TOKENS, None)
    with db.begin() as conn:
        conn.execute(samples.insert().values(series_id=sid, ts=at(5), value=-1.0))
        mine = select(series.c.id).where(series.c.host == HOST)
        raw.compact(conn, mine, at(0), at(3600))
    head, _ = counts(db)
    values = {s.ts: s.value for s in store.samples(TOKENS)}
    assert values[at(5)] == -1.0 and values[at(0)] == 0.0 and values[at(TICK)] == 7.0 * TICK
    with db.connect() as conn:
        assert (
            conn.execute(
                select(func.count()).select_from(samples).where(samples.c.ts < at(3600))
            ).scalar_one()
            == 0
        )


def test_an_hour_is_packed_only_once_the_alert_windows_have_left_it(db: Engine) -> None:
    # The alert inputs read the last minutes of raw samples every tick; from chunks that is
    # every series' whole hour decoded. The daemon's rollup keeps those minutes in the head.
    engine = EngineScrape("llama", tokens={"m": 0.0})
    box = Box(db, [Gpu(), engine])
    job = rollup(db, TICK, head_reach=timedelta(minutes=10))
    packed_at = None
    for t in range(0, 2 * 3600 + 1, TICK):
        engine.tokens["m"] = float(7 * t)
        box.tick(at(t))
        if t % 60 == 0:
            job.run(at(t))
            if packed_at is None and counts(db)[1]:
                packed_at = t
    # The first hour left the head at 01:10, not at 01:02 (the largest gap's lag alone).
    assert packed_at == 3600 + 10 * 60
    with db.connect() as conn:  # and from then on, 10 minutes back reads only head rows
        oldest = conn.execute(select(func.min(samples.c.ts))).scalar_one()
    assert oldest <= at(2 * 3600 - 600)
