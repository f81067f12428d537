"""What a box forwards to the central database, one line per table, and how each table's new
rows are found in the local database.

Exactly what ``gpuwatch report``, ``digest``, ``cost`` and the budget read (agent/reporting/
queries.py, agent/cost/summarize.py, agent/cost/budget.py): the rollups, the cost ledger, the
alert history and the billing records, plus the series definitions the rollups refer to (sent
by :mod:`agent.storage.forward.job`, with ids mapped) and each host's rollup watermarks (set
centrally to what was forwarded). Raw samples and collector runs never leave the box.

Three ways of finding new rows, each with a watermark in ``forward_state``:

- :class:`Buckets`: rollup-like tables, rows of complete buckets; a bucket is final once the
  local rollup watermark of its resolution has passed it, so ``[forwarded, watermark)`` is
  sent, at most ``CHUNK_BUCKETS`` buckets per stream and round (a first forward of 90 days of
  minutes goes out in bounded transactions).
- :class:`Changed`: rows stamped when written (``cost_records.imported_at``: a re-import
  replaces a record with a new stamp), sent when stamped after the watermark.
- :class:`OpenRows`: rows inserted with an id and updated later (an alert that resolves): sent
  from the oldest row still open, so the update follows; a row open longer than ``OPEN_FOR``
  stops holding the watermark back (a rule switched off never resolves its rows).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Column, ColumnElement, Connection, Table, func, select

from agent.storage.rollup import DAY, HOUR, MINUTE
from migrations.schema import (
    alert_history,
    cost_records,
    gpu_allocations,
    gpu_mig_usage,
    gpu_pod_allocations,
    gpu_usage,
    histogram_layouts,
    histogram_rollups,
    rollups,
    series,
)

CHUNK_BUCKETS = 120  # per stream and round: two hours of minutes, five days of hours
OPEN_FOR = timedelta(days=30)

Row = tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class Buckets:
    resolutions: tuple[int, ...] = (MINUTE, HOUR, DAY)
    time: str = "start"
    resolution: str | None = "resolution"  # None: the table holds its one resolution only


@dataclass(frozen=True, slots=True)
class Changed:
    time: str


@dataclass(frozen=True, slots=True)
class OpenRows:
    id: str = "id"
    open: str = "resolved_at"  # NULL while the row may still change
    since: str = "fired_at"


Cursor = Buckets | Changed | OpenRows


@dataclass(frozen=True, slots=True)
class Ref:
    """Definitions that forwarded rows refer to by an id of the local database: each is sent
    (new ones once, and any a batch refers to that is not mapped yet), inserted centrally where
    missing, and its central id read back by ``identity``."""

    table: Table
    identity: tuple[str, ...]

    @property
    def name(self) -> str:
        return self.table.name

    @property
    def columns(self) -> tuple[str, ...]:
        """The local id first (for the mapping), then the definition."""
        return ("id", *(c.name for c in self.table.columns if c.name != "id"))


SERIES = Ref(series, ("host", "metric", "labels"))
LAYOUTS = Ref(histogram_layouts, ("bounds",))
REFS = (SERIES, LAYOUTS)


@dataclass(frozen=True, slots=True)
class Stream:
    """A forwarded table. ``key``: the columns that identify a row in both databases (default:
    the primary key); ``refs``: columns holding a local id of a :class:`Ref`, mapped to the
    central id; ``skip``: columns not sent (a local surrogate id); ``owner``: the box's own
    rows (default: ``host`` = the box, or its series' rows; a table with neither is sent whole)."""

    table: Table
    cursor: Cursor
    key: tuple[str, ...] = ()
    refs: tuple[tuple[str, Ref], ...] = ()
    skip: tuple[str, ...] = ()
    owner: Callable[[Table, str], ColumnElement[bool]] | None = None

    @property
    def name(self) -> str:
        return self.table.name

    @property
    def columns(self) -> tuple[Column[Any], ...]:
        return tuple(c for c in self.table.columns if c.name not in self.skip)

    @property
    def key_columns(self) -> tuple[str, ...]:
        return self.key or tuple(c.name for c in self.table.primary_key.columns)

    @property
    def upserts(self) -> bool:
        """True: the key is the central primary key (ON CONFLICT); False: rows are replaced by
        deleting their key first (a table whose primary key is a surrogate id)."""
        return self.key_columns == tuple(c.name for c in self.table.primary_key.columns)


def _scope(table: Table, host: str) -> ColumnElement[bool]:
    # The host's own alerts: "fleet" rows are the leader's, written centrally.
    return table.c.scope == host


ON_SERIES = (("series_id", SERIES),)

# The forwarded tables. A new rollup table is one more line here.
STREAMS: tuple[Stream, ...] = (
    Stream(rollups, Buckets(), refs=ON_SERIES),
    Stream(histogram_rollups, Buckets(), refs=(*ON_SERIES, ("layout_id", LAYOUTS))),
    Stream(gpu_usage, Buckets()),
    Stream(gpu_allocations, Buckets()),
    Stream(gpu_pod_allocations, Buckets()),
    Stream(gpu_mig_usage, Buckets()),
    Stream(
        alert_history,
        OpenRows(),
        key=("scope", "rule", "labels", "fired_at"),
        skip=("id",),
        owner=_scope,
    ),  # fmt: skip
    Stream(cost_records, Changed("imported_at")),
)


@dataclass(frozen=True, slots=True)
class Mark:
    """A stream's watermark in ``forward_state``."""

    until_ts: datetime | None = None
    until_id: int | None = None


@dataclass(frozen=True, slots=True)
class Batch:
    """One stream's rows for one round, and the watermarks it moves (state key -> mark)."""

    stream: Stream
    rows: tuple[Row, ...]
    marks: dict[str, Mark]
    more: bool  # rows are left beyond this batch (a chunk of a longer backlog)


def state_keys(stream: Stream) -> tuple[str, ...]:
    if isinstance(stream.cursor, Buckets):
        return tuple(f"{stream.name}/{r}" for r in stream.cursor.resolutions)
    return (stream.name,)


def read_batch(
    conn: Connection,
    stream: Stream,
    host: str,
    marks: dict[str, Mark],
    complete: dict[int, datetime],
    now: datetime,
) -> Batch:
    """The stream's next rows of ``host`` after ``marks``; ``complete``: resolution -> the
    local rollup watermark (buckets before it are final)."""
    cursor, mine = stream.cursor, _owner(stream, host)
    if isinstance(cursor, Buckets):
        return _buckets(conn, stream, cursor, mine, marks, complete)
    if isinstance(cursor, Changed):
        return _changed(conn, stream, cursor, mine, marks.get(stream.name, Mark()))
    return _open_rows(conn, stream, cursor, mine, marks.get(stream.name, Mark()), now)


def _owner(stream: Stream, host: str) -> list[ColumnElement[bool]]:
    table = stream.table
    if stream.owner is not None:
        return [stream.owner(table, host)]
    if "host" in table.c:
        return [table.c.host == host]
    on_series = [column for column, ref in stream.refs if ref is SERIES]
    if on_series:
        # An IN over the host's series: a range of the (series_id, ...) key per series.
        host_series = select(series.c.id).where(series.c.host == host)
        return [table.c[on_series[0]].in_(host_series)]
    return []


def _buckets(
    conn: Connection,
    stream: Stream,
    cursor: Buckets,
    owner: list[ColumnElement[bool]],
    marks: dict[str, Mark],
    complete: dict[int, datetime],
) -> Batch:
    table, time = stream.table, stream.table.c[cursor.time]
    rows: list[Row] = []
    moved: dict[str, Mark] = {}
    more = False
    for resolution in cursor.resolutions:
        until = complete.get(resolution)
        if until is None:
            continue
        key = f"{stream.name}/{resolution}"
        mine = owner + ([table.c[cursor.resolution] == resolution] if cursor.resolution else [])
        start = marks.get(key, Mark()).until_ts
        # The first row at or after the watermark: a box that was off for a week skips the
        # empty week in one step instead of a chunk at a time.
        first = conn.execute(
            select(func.min(time)).where(*mine, *([time >= start] if start else []))
        ).scalar()
        if first is None or first >= until:
            if start is None or start < until:
                moved[key] = Mark(until_ts=until)
            continue
        upper = min(until, first + timedelta(seconds=resolution * CHUNK_BUCKETS))
        query = select(*stream.columns).where(*mine, time >= first, time < upper)
        rows.extend(tuple(r) for r in conn.execute(query))
        moved[key] = Mark(until_ts=upper)
        more = more or upper < until
    return Batch(stream, tuple(rows), moved, more)


def _changed(
    conn: Connection,
    stream: Stream,
    cursor: Changed,
    owner: list[ColumnElement[bool]],
    mark: Mark,
) -> Batch:
    time = stream.table.c[cursor.time]
    where = owner + ([time > mark.until_ts] if mark.until_ts else [])
    rows = [tuple(r) for r in conn.execute(select(*stream.columns).where(*where))]
    if not rows:
        return Batch(stream, (), {}, False)
    at = _index(stream, cursor.time)
    return Batch(stream, tuple(rows), {stream.name: Mark(until_ts=max(r[at] for r in rows))}, False)


def _open_rows(
    conn: Connection,
    stream: Stream,
    cursor: OpenRows,
    owner: list[ColumnElement[bool]],
    mark: Mark,
    now: datetime,
) -> Batch:
    t = stream.table.c
    where = owner + ([t[cursor.id] >= mark.until_id] if mark.until_id else [])
    query = select(t[cursor.id], t[cursor.open], t[cursor.since], *stream.columns).where(*where)
    found = conn.execute(query.order_by(t[cursor.id])).all()
    if not found:
        return Batch(stream, (), {}, False)
    still_open = [i for i, closed, since, *_ in found if closed is None and since >= now - OPEN_FOR]
    low = min(still_open) if still_open else max(r[0] for r in found) + 1
    rows = tuple(tuple(r[3:]) for r in found)
    return Batch(stream, rows, {stream.name: Mark(until_id=low)}, False)


def _index(stream: Stream, column: str) -> int:
    return [c.name for c in stream.columns].index(column)


def referenced(batch: Batch, ref: Ref) -> set[int]:
    """The local ids of ``ref`` that a batch's rows refer to."""
    out: set[int] = set()
    for column, r in batch.stream.refs:
        if r is ref:
            at = _index(batch.stream, column)
            out.update(row[at] for row in batch.rows)
    return out


def map_refs(batch: Batch, ids: dict[str, dict[int, int]]) -> Sequence[Row]:
    """The batch's rows with local ids replaced by the central ones (``ids``: ref name ->
    local id -> central id)."""
    if not batch.stream.refs:
        return batch.rows
    at = {_index(batch.stream, column): ids[ref.name] for column, ref in batch.stream.refs}
    return [tuple(at[i][v] if i in at else v for i, v in enumerate(row)) for row in batch.rows]
