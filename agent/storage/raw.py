"""Raw samples: a head of recent rows, then compressed chunks; reads see both as one series.

A tick writes one small row per sample into ``samples`` (the head), in the tick's transaction:
cheap to write, and what the minute rollup, the alert inputs and ``collect`` read back. Once a
time block (``BLOCK``, an hour) is rolled up, the rollup job packs each series' rows of that
block into one ``sample_chunks`` row (:mod:`agent.storage.chunk_codec`) and deletes them from
the head, in its own transaction: a crash leaves either the rows or the chunk, never neither.
A stored sample then costs a few bytes instead of a row's fifty to a hundred.

Every read goes through :func:`read` and :func:`last_at_or_before`, which merge the head and
the chunks: whether a sample is still a row or already packed is invisible to callers. A point
that arrives late for a block already packed stays in the head, and reads still see it.
"""

from __future__ import annotations

from array import array
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from itertools import pairwise
from typing import Any

from sqlalchemy import (
    BigInteger,
    Connection,
    Select,
    and_,
    cast,
    delete,
    func,
    insert,
    or_,
    select,
    tuple_,
    type_coerce,
)

from agent.storage.chunk_codec import decode, encode, encode_columns
from migrations.schema import from_micros, sample_chunks, samples, series, to_micros

BLOCK = timedelta(hours=1)
BLOCK_MICROS = int(BLOCK.total_seconds()) * 1_000_000
MAX_BLOCKS_PER_RUN = 6  # catching up (a migrated database, a long downtime) stays bounded

Point = tuple[datetime, float]
SeriesIds = Select[Any] | Sequence[int]  # a subquery of series ids, or the ids themselves


def block_of(ts: datetime) -> datetime:
    """The start of the block [start, start + BLOCK) that holds ``ts``."""
    micros = to_micros(ts)
    return from_micros(micros - micros % BLOCK_MICROS)


def read(
    conn: Connection, ids: SeriesIds, after: datetime | None, until: datetime | None
) -> dict[int, list[Point]]:
    """Each series' points with ``after < ts <= until`` (None: unbounded), oldest first."""
    head = select(samples.c.series_id, _micros(conn, samples.c.ts), samples.c.value).where(
        samples.c.series_id.in_(ids)
    )
    chunks = select(sample_chunks.c.series_id, sample_chunks.c.data).where(
        sample_chunks.c.series_id.in_(ids)
    )
    if after is not None:
        head = head.where(samples.c.ts > after)
        chunks = chunks.where(sample_chunks.c.start > after - BLOCK)
    if until is not None:
        head = head.where(samples.c.ts <= until)
        chunks = chunks.where(sample_chunks.c.start <= until)
    out: dict[int, list[Point]] = defaultdict(list)
    # The series of a tick share its instant: one datetime per instant, not one per point
    # (a third of what a minute of points costs to hold). The head's times are read as integers
    # for that reason too: a datetime made per row was most of the minute rollup's read.
    instants: dict[int, datetime] = {}
    for sid, data in conn.execute(chunks):
        out[sid].extend(_points(data, after, until, instants))
    for sid, micros, value in conn.execute(head):
        out[sid].append((_instant(instants, micros), value))
    return {sid: _ordered(points) for sid, points in out.items()}


def last_at_or_before(
    conn: Connection, ids: SeriesIds, at: datetime, lookback: timedelta | None = None
) -> dict[int, Point]:
    """Each series' last point at or before ``at`` (and after ``at - lookback`` when given)."""
    since = None if lookback is None else at - lookback
    found = _last_in_head(conn, ids, at, since)
    for sid, data in _chunks_newest_first(conn, ids, at, since, found):
        best = found.get(sid)
        for point in reversed(_points(data, since, at)):
            if best is None or point[0] > best[0]:
                found[sid] = point
            break
    return found


def first_ts(conn: Connection, ids: SeriesIds) -> datetime | None:
    """The oldest stored instant of these series (for a first rollup run)."""
    first_head = first_head_ts(conn, ids)
    c = sample_chunks.c
    first_block = conn.execute(_oldest(c.series_id, c.start, ids)).scalar()
    if first_block is not None:
        points = read(conn, ids, None, first_block + BLOCK)
        first_block = min((p[0][0] for p in points.values() if p), default=None)
    candidates = [t for t in (first_head, first_block) if t is not None]
    return min(candidates, default=None)


def first_head_ts(conn: Connection, ids: SeriesIds) -> datetime | None:
    """The oldest row still in the head (where a first compaction starts)."""
    return conn.execute(_oldest(samples.c.series_id, samples.c.ts, ids)).scalar()


def _oldest(sid: Any, time: Any, ids: SeriesIds) -> Select[Any]:
    """The oldest ``time`` of any series of ``ids``, by one index seek per series.

    SQLite answers ``min(ts) ... WHERE series_id IN (...)`` by a seek per listed id already;
    PostgreSQL reads every row of every series. The rollup asks it each minute until the
    first packing, so on PostgreSQL it read the whole head (at 1 s ticks up to an hour of rows
    per series) every minute of a new box's first hour.
    """
    per_series = select(func.min(time)).where(sid == series.c.id).scalar_subquery()
    return select(func.min(per_series)).where(series.c.id.in_(ids))


def compact(conn: Connection, ids: SeriesIds, start: datetime, until: datetime) -> datetime:
    """Pack the head rows of whole blocks from ``start``'s block up to ``until``'s (exclusive)
    into chunks, at most ``MAX_BLOCKS_PER_RUN`` blocks; returns where packing stopped (the
    next run's ``start``)."""
    begin = block_of(start)
    end = min(block_of(until), begin + MAX_BLOCKS_PER_RUN * BLOCK)
    if end <= begin:
        return begin
    in_range = and_(samples.c.series_id.in_(ids), samples.c.ts >= begin, samples.c.ts < end)
    packed_already = _existing_chunks(conn, ids, begin, end)
    rows = conn.execute(
        select(samples.c.series_id, _micros(conn, samples.c.ts), samples.c.value)
        .where(in_range)
        .order_by(samples.c.series_id, samples.c.ts)
    )
    # Each run of a series' rows is encoded as soon as it ends: only the chunks are held, never
    # the batch's rows (held as objects, an hour's packing opens more of Python's allocator
    # arenas, which it keeps while any object in them lives).
    # Encoded before the first write, too: SQLite's one writer is held from there to the
    # commit, and a tick's write waits behind it.
    chunks = {
        key: _chunk_row(key, stamps, values, packed_already.get(key))
        for key, stamps, values in _runs(rows)
    }
    if chunks:
        conn.execute(delete(sample_chunks).where(_chunk_keys(chunks)))
        conn.execute(insert(sample_chunks), list(chunks.values()))
        conn.execute(delete(samples).where(in_range))
    return end


def _micros(conn: Connection, column: Any) -> Any:
    """``column`` as integer microseconds, read without a datetime per row (packing an hour
    of a box's series reads a few hundred thousand rows)."""
    if conn.dialect.name == "sqlite":
        return type_coerce(column, BigInteger)  # UtcInstant stores exactly that there
    return cast(func.round(func.extract("epoch", column) * 1_000_000), BigInteger)


def trim(conn: Connection, ids: SeriesIds, cutoff: datetime) -> None:
    """Retention: drop head rows older than ``cutoff`` and chunks wholly older than it."""
    conn.execute(delete(samples).where(samples.c.series_id.in_(ids), samples.c.ts < cutoff))
    conn.execute(
        delete(sample_chunks).where(
            sample_chunks.c.series_id.in_(ids), sample_chunks.c.start <= cutoff - BLOCK
        )
    )


# -- helpers ------------------------------------------------------------------------------------

ChunkKey = tuple[int, int]  # (series id, block start in microseconds)


def _points(
    data: bytes,
    after: datetime | None,
    until: datetime | None,
    instants: dict[int, datetime] | None = None,
) -> list[Point]:
    lo = None if after is None else to_micros(after)
    hi = None if until is None else to_micros(until)
    made = {} if instants is None else instants  # micros -> datetime, shared across series
    out = []
    for ts, value in decode(data):
        if (lo is None or ts > lo) and (hi is None or ts <= hi):
            out.append((_instant(made, ts), value))
    return out


def _instant(made: dict[int, datetime], micros: int) -> datetime:
    """``micros`` as a datetime, made once per instant (the series of a tick share it)."""
    at = made.get(micros)
    if at is None:
        at = made[micros] = from_micros(micros)
    return at


def _ordered(points: list[Point]) -> list[Point]:
    if all(a[0] < b[0] for a, b in pairwise(points)):
        return points  # the usual case: the head's rows come back in key order
    # A point both packed and in the head (a late write merged later) counts once.
    return sorted(dict(points).items())


def _last_in_head(
    conn: Connection, ids: SeriesIds, at: datetime, since: datetime | None
) -> dict[int, Point]:
    newest = _newest_per_series(samples.c.series_id, samples.c.ts, ids, at, since)
    query = select(samples.c.series_id, samples.c.ts, samples.c.value).join(
        newest, and_(samples.c.series_id == newest.c.sid, samples.c.ts == newest.c.at)
    )
    return {sid: (ts, value) for sid, ts, value in conn.execute(query)}


def _newest_per_series(
    sid: Any, time: Any, ids: SeriesIds, at: datetime, since: datetime | None
) -> Any:
    """Per series of ``ids``, the latest ``time`` at or before ``at`` (and after ``since``):
    a subquery of (sid, at), at NULL for a series with none.

    One index seek per series: a lone max() with the key's prefix fixed is read from the
    index's end, where a GROUP BY's max() reads every row of its group. The alert inputs ask
    this every tick that reads a window; grouped, they read the whole head before the window
    (at 1 s ticks an hour of rows per series, and the rows grew until the hour was packed) and
    every chunk of the retention."""
    bounds = [sid == series.c.id, time <= at]
    if since is not None:
        bounds.append(time > since)
    latest = select(func.max(time)).where(*bounds).scalar_subquery()
    per_series = select(series.c.id.label("sid"), latest.label("at"))
    return per_series.where(series.c.id.in_(ids)).subquery()


def _chunks_newest_first(
    conn: Connection,
    ids: SeriesIds,
    at: datetime,
    since: datetime | None,
    found: Mapping[int, Point],
) -> Iterator[tuple[int, bytes]]:
    """Per series, its chunks at or before ``at``, newest first, until one has a point in
    range: usually the first one read. A series whose point ``found`` in the head is at or
    after its newest chunk's end needs none: no packed point can be later (the alert inputs
    ask every tick, and decoding an hour's chunk per series to learn that was most of it)."""
    c = sample_chunks.c
    bounds = [c.series_id.in_(ids), c.start <= at]
    if since is not None:
        bounds.append(c.start > since - BLOCK)
    after = None if since is None else since - BLOCK
    newest = _newest_per_series(c.series_id, c.start, ids, at, after)
    wanted = [
        (sid, start)
        for sid, start in conn.execute(select(newest.c.sid, newest.c.at))
        if start is not None and (sid not in found or found[sid][0] < start + BLOCK)
    ]
    if not wanted:
        return
    query = select(c.series_id, c.start, c.data).where(tuple_(c.series_id, c.start).in_(wanted))
    missing: list[tuple[int, datetime]] = []
    for sid, start, data in conn.execute(query):
        if _points(data, since, at):
            yield sid, data
        else:  # every point of the newest block is after ``at``: look one block further back
            missing.append((sid, start))
    for sid, start in missing:
        older = conn.execute(
            select(c.data)
            .where(c.series_id == sid, c.start < start, *bounds[1:])
            .order_by(c.start.desc())
        )
        for (data,) in older:
            if _points(data, since, at):
                yield sid, data
                break


def _runs(rows: Iterable[Any]) -> Iterator[tuple[ChunkKey, array[int], array[float]]]:
    """Rows ordered by (series, time) as one (key, stamps, values) run per series and block."""
    key: ChunkKey | None = None
    stamps, values = array("q"), array("d")
    for sid, micros, value in rows:
        here = (sid, micros - micros % BLOCK_MICROS)
        if here != key:
            if key is not None:
                yield key, stamps, values
            key, stamps, values = here, array("q"), array("d")
        stamps.append(micros)
        values.append(value)
    if key is not None:
        yield key, stamps, values


def _existing_chunks(
    conn: Connection, ids: SeriesIds, begin: datetime, end: datetime
) -> dict[ChunkKey, bytes]:
    """Chunks already stored for the blocks being packed: rows that came late for a block
    packed before join its chunk. Usually none."""
    c = sample_chunks.c
    query = select(c.series_id, c.start, c.data).where(
        c.series_id.in_(ids), c.start >= begin, c.start < end
    )
    return {(sid, to_micros(start)): data for sid, start, data in conn.execute(query)}


def _chunk_keys(keys: Iterable[ChunkKey]) -> Any:
    c = sample_chunks.c
    by_block: dict[int, list[int]] = defaultdict(list)
    for sid, start in keys:
        by_block[start].append(sid)
    return or_(
        *(
            and_(c.start == from_micros(start), c.series_id.in_(sids))
            for start, sids in by_block.items()
        )
    )


def _chunk_row(
    key: ChunkKey, stamps: array[int], values: array[float], packed: bytes | None
) -> dict[str, Any]:
    sid, start = key
    if packed is None:
        data = encode_columns(stamps, values)
    else:  # the head's point wins where both hold one instant (a late write merged later)
        merged = sorted(dict([*decode(packed), *zip(stamps, values, strict=True)]).items())
        data = encode(merged)
        stamps = array("q", (ts for ts, _ in merged))
    return {"series_id": sid, "start": from_micros(start), "count": len(stamps), "data": data}


def clipped(points: list[Point], low: datetime, high: datetime) -> list[Point]:
    """The points in (low, high] after their baseline, the last point at or before ``low``:
    what a window (low, high] counts, as agent.storage.windows reads it (the interval that
    ends at the first point after ``low`` is the window's)."""
    inside = [p for p in points if low < p[0] <= high]
    before = [p for p in points if p[0] <= low][-1:]
    return before + inside
