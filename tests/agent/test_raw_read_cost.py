"""A window's last-point lookup, and the oldest-row lookup where packing starts, cost the same
whatever the head and the chunks hold.

The alert inputs look up each series' last point before a window every tick that reads one.
At 1 s ticks the head holds up to about 70 minutes of rows per series, and a week of hourly
chunks sits behind it: a lookup that reads every row (or every chunk) before the window gets
dearer all hour and all week. Here the database's own work is counted, not the clock: SQLite's
virtual machine steps (a progress handler), PostgreSQL's rows out of each scan of the samples
and chunks tables (EXPLAIN ANALYZE of the very statements issued).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Engine, event, insert

from agent.storage import raw
from agent.storage.chunk_codec import encode
from migrations.schema import sample_chunks, samples, series, to_micros

T = datetime(2026, 11, 1, tzinfo=UTC)
SERIES = 4


def make_series(db: Engine) -> list[int]:
    with db.begin() as conn:
        return [
            conn.execute(
                insert(series).values(
                    host="box", collector="nvml", metric="m", labels=json.dumps({"k": str(k)})
                )
            ).inserted_primary_key[0]
            for k in range(SERIES)
        ]


def fill_head(db: Engine, ids: list[int], seconds: int) -> None:
    fill_head_from(db, ids, 0, seconds)


def fill_head_from(db: Engine, ids: list[int], first: int, end: int) -> None:
    """Rows at T + ``first`` .. ``end`` seconds (exclusive), one a second per series."""
    rows = [
        {"series_id": sid, "ts": T + timedelta(seconds=s), "value": float(s)}
        for sid in ids
        for s in range(first, end)
    ]
    with db.begin() as conn:
        conn.execute(insert(samples), rows)


def fill_chunks(db: Engine, ids: list[int], hours: int) -> None:
    """``hours`` packed hours before T, 60 points each."""
    rows = []
    for h in range(1, hours + 1):
        start = T - timedelta(hours=h)
        points = [(to_micros(start + timedelta(minutes=m)), float(-h)) for m in range(60)]
        rows += [
            {"series_id": sid, "start": start, "count": 60, "data": encode(points)} for sid in ids
        ]
    with db.begin() as conn:
        conn.execute(insert(sample_chunks), rows)


@contextmanager
def database_work(conn: Connection) -> Iterator[list[int]]:
    """The database's work for the statements run inside: one figure, appended on exit."""
    out: list[int] = []
    if conn.dialect.name == "sqlite":
        steps = [0]

        def count() -> int:
            steps[0] += 1
            return 0  # go on

        dbapi = conn.connection.dbapi_connection
        dbapi.set_progress_handler(count, 10)  # type: ignore[union-attr]
        try:
            yield out
        finally:
            dbapi.set_progress_handler(None, 0)  # type: ignore[union-attr]
        out.append(steps[0])
        return
    issued: list[tuple[str, Any]] = []

    def record(_c: Any, _cur: Any, statement: str, parameters: Any, *_: Any) -> None:
        issued.append((statement, parameters))

    event.listen(conn, "before_cursor_execute", record)
    try:
        yield out
    finally:
        event.remove(conn, "before_cursor_execute", record)
    out.append(sum(_rows_scanned(conn, statement, params) for statement, params in issued))


def _rows_scanned(conn: Connection, statement: str, parameters: Any) -> int:
    cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
    cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + statement, parameters)
    (plan,) = cursor.fetchone()
    return _scanned(plan[0]["Plan"])


def _scanned(node: dict[str, Any]) -> int:
    own = 0
    if node.get("Relation Name") in ("samples", "sample_chunks"):
        own = int(node["Actual Rows"] * node["Actual Loops"])
    return own + sum(_scanned(child) for child in node.get("Plans", ()))


def lookup_work(db: Engine, ids: list[int], at: datetime) -> tuple[int, dict[int, Any]]:
    with db.connect() as conn, database_work(conn) as work:
        found = raw.last_at_or_before(conn, ids, at)
    return work[0], found


def test_the_last_point_lookup_does_not_read_the_whole_head(db: Engine) -> None:
    ids = make_series(db)
    fill_head(db, ids, 4000)  # over an hour of 1 s rows per series

    early, found_early = lookup_work(db, ids, T + timedelta(seconds=60))
    late, found_late = lookup_work(db, ids, T + timedelta(seconds=3900))

    assert {p for p in found_early.values()} == {(T + timedelta(seconds=60), 60.0)}
    assert {p for p in found_late.values()} == {(T + timedelta(seconds=3900), 3900.0)}
    # 65 times the rows before the window, and no more work (a little noise allowed).
    assert late <= early * 1.2 + 20


def test_the_last_point_lookup_does_not_read_every_chunk(db: Engine) -> None:
    ids = make_series(db)
    fill_head(db, ids, 120)
    fill_chunks(db, ids, 2)
    few, _ = lookup_work(db, ids, T + timedelta(seconds=60))
    with db.begin() as conn:
        conn.execute(sample_chunks.delete())
    fill_chunks(db, ids, 168)  # a week of hours behind the head

    many, found = lookup_work(db, ids, T + timedelta(seconds=60))

    assert set(found.values()) == {(T + timedelta(seconds=60), 60.0)}
    assert many <= few * 1.2 + 20


def test_a_series_with_nothing_before_the_instant_is_left_out(db: Engine) -> None:
    ids = make_series(db)
    fill_head(db, ids[:2], 10)
    fill_chunks(db, ids[2:3], 1)

    with db.connect() as conn:
        found = raw.last_at_or_before(conn, ids, T + timedelta(seconds=5))

    assert found == {
        ids[0]: (T + timedelta(seconds=5), 5.0),
        ids[1]: (T + timedelta(seconds=5), 5.0),
        ids[2]: (T - timedelta(minutes=1), -1.0),
    }


def first_head_work(db: Engine, ids: list[int]) -> tuple[int, datetime | None]:
    with db.connect() as conn, database_work(conn) as work:
        first = raw.first_head_ts(conn, ids)
    return work[0], first


def test_the_oldest_head_row_lookup_does_not_read_the_whole_head(db: Engine) -> None:
    # The rollup asks where packing starts every minute until the first packing: over a new
    # box's first hour the head grows from nothing to an hour of rows per series. (PostgreSQL
    # read all of it for min(ts) over an IN list: 16,000 rows here against 240.)
    ids = make_series(db)
    fill_head(db, ids, 60)
    short, first_short = first_head_work(db, ids)
    fill_head_from(db, ids, 60, 4000)

    long, first_long = first_head_work(db, ids)

    assert first_short == first_long == T
    assert long <= short * 1.2 + 20


def test_the_oldest_instant_is_the_oldest_of_any_series_head_or_chunk(db: Engine) -> None:
    ids = make_series(db)
    fill_head_from(db, ids[:2], 30, 40)
    with db.connect() as conn:
        assert raw.first_head_ts(conn, ids) == T + timedelta(seconds=30)
        assert raw.first_ts(conn, ids) == T + timedelta(seconds=30)
        assert raw.first_head_ts(conn, ids[2:]) is None
        assert raw.first_ts(conn, ids[2:]) is None
    fill_chunks(db, ids[3:], 2)  # two hours before T, on a series with no head rows

    with db.connect() as conn:
        assert raw.first_head_ts(conn, ids) == T + timedelta(seconds=30)
        assert raw.first_ts(conn, ids) == T - timedelta(hours=2)
        assert raw.first_ts(conn, ids[:2]) == T + timedelta(seconds=30)
