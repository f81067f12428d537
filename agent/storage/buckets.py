"""The rollup's bucket arithmetic: raw points into minute rows, minute rows into hour rows, hour
rows into day rows (UTC days: what a month's reads sum, 24 times fewer rows than its hours).

A counter's increase over a bucket is restart-safe: a value lower than the one before it, or a
changed ``_created`` timestamp beside it (both before their own samples: series_math's
``started_anew``), is a reset, and the value after it counts whole. A counter child born after
a good scrape that lacked it starts from zero (:func:`_birth`).

Only the metrics of :mod:`agent.storage.rolled_up` get rows. A rolled-up histogram gets one
``histogram_rollups`` row per bucket time holding every bucket's increase, computed per ``le``
series exactly as a counter's, under the histogram's own series (its base metric, its labels
without ``le``) and the layout of the bounds seen in that bucket time.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import (
    Connection,
    Double,
    Insert,
    Table,
    cast,
    delete,
    func,
    insert,
    select,
    true,
    union_all,
)

from agent.storage.db import insert_ignoring_conflicts
from agent.storage.minute_context import CREATED_OF, TARGET_UP, MinuteContext, scrape_key
from agent.storage.points import Point, Points, SeriesMeta
from agent.storage.rolled_up import HISTOGRAM_ROLLUPS, SERIES_ROLLUPS, histogram_of
from agent.storage.series_math import started_anew
from migrations.schema import histogram_layouts, histogram_rollups, rollups, series

MINUTE, HOUR, DAY = 60, 3600, 86400
# Each coarser resolution is merged from the one below it.
FINER = {HOUR: MINUTE, DAY: HOUR}
COUNTER_SUFFIXES = ("_total", "_bucket", "_count", "_sum")
HISTOGRAM_COLLECTOR = "rollup"  # the collector of a histogram's own series: the rollup made it

HistogramKey = tuple[str, str]  # (base metric, canonical labels without "le")
Packed = tuple[str, str]  # a histogram row's (bounds, increases), as stored


def bucket_of(ts: datetime, size: int) -> datetime:
    """The start of the (start, start + size] bucket that holds ``ts``."""
    epoch = ts.timestamp()
    start = (epoch // size) * size
    if start == epoch:  # an instant on a boundary closes the bucket before it
        start -= size
    return datetime.fromtimestamp(start, tz=ts.tzinfo)


def hour_floor(ts: datetime) -> datetime:
    return ts.replace(minute=0, second=0, microsecond=0)


def day_floor(ts: datetime) -> datetime:
    """The UTC day's start (timestamps here are UTC)."""
    return ts.replace(hour=0, minute=0, second=0, microsecond=0)


def floor_to(ts: datetime, resolution: int) -> datetime:
    """The start of the hour or day row ``ts`` belongs to."""
    return day_floor(ts) if resolution == DAY else hour_floor(ts)


def sum_opt(total: Any, value: Any) -> Any:
    """``total + value`` where None means "not known" (None + x is x)."""
    if value is None:
        return total
    return value if total is None else total + value


def replace_buckets(
    conn: Connection,
    table: Table,
    host: str,
    resolution: int,
    start: datetime,
    end: datetime,
    host_series: bool = False,
) -> None:
    """Delete ``host``'s rows of ``table`` for buckets in [start, end) at ``resolution``: a
    rerun over the same buckets replaces, never doubles. ``host_series``: the table is keyed
    by series (rollups), not by host."""
    owner = (
        table.c.series_id.in_(select(series.c.id).where(series.c.host == host))
        if host_series
        else table.c.host == host
    )
    conn.execute(
        delete(table).where(
            owner, table.c.resolution == resolution, table.c.start >= start, table.c.start < end
        )
    )


# -- writing --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MinuteRows:
    """A span's minute rows, computed before the rollup's transaction writes anything: SQLite
    has one writer, held from a transaction's first write to its commit, and a tick's write
    waits behind it (at 1 s ticks, the tick's deadline is 1 s)."""

    span: tuple[datetime, datetime]
    plain: list[dict[str, Any]]  # rollups rows
    histograms: dict[tuple[HistogramKey, datetime], Packed]  # one row per histogram and minute

    @classmethod
    def joined(cls, span: tuple[datetime, datetime], parts: Iterable[MinuteRows]) -> MinuteRows:
        """The rows of batches of series rolled up apart (a histogram's buckets in one batch)."""
        plain: list[dict[str, Any]] = []
        histograms: dict[tuple[HistogramKey, datetime], Packed] = {}
        for part in parts:
            plain.extend(part.plain)
            histograms.update(part.histograms)
        return cls(span, plain, histograms)


def family(metric: str, labels: Mapping[str, str]) -> HistogramKey | None:
    """The rolled-up histogram a series is a bucket of (its rows are made together), if any."""
    return histogram_key(metric, labels)[0] if histogram_of(metric) is not None else None


def minute_rows(
    meta: SeriesMeta,
    points: Points,
    span: tuple[datetime, datetime],
    max_gap: float,
    context: MinuteContext | None = None,
) -> MinuteRows:
    """``points`` rolled up into the minute rows of [span); nothing is read or written.
    ``context``: when ``points`` are a batch of series, the context read beforehand; without
    it, ``points`` must hold the context's series too."""
    start, end = span
    plain: list[dict[str, Any]] = []
    grouped: dict[tuple[HistogramKey, datetime], dict[str, float]] = defaultdict(dict)
    found = context or MinuteContext.of(meta, points)
    for row in _series_rollups(meta, points, start, end, max_gap, found):
        metric, labels = meta[row["series_id"]]
        if metric in SERIES_ROLLUPS:
            plain.append(row)
        else:
            key, le = histogram_key(metric, labels)
            grouped[(key, row["start"])][le] = row["increase"]
    return MinuteRows(span, plain, {key: pack(by_le) for key, by_le in grouped.items()})


def write_minute_rows(conn: Connection, host: str, meta: SeriesMeta, rows: MinuteRows) -> None:
    """Replace ``host``'s minute rows in ``rows.span`` by ``rows``."""
    start, end = rows.span
    for table in (rollups, histogram_rollups):
        replace_buckets(conn, table, host, MINUTE, start, end, host_series=True)
    if rows.plain:
        conn.execute(insert(rollups), rows.plain)
    _insert_histograms(conn, host, meta, MINUTE, rows.histograms)


def carried_rows(points: Points, until: datetime) -> list[dict[str, Any]]:
    """Each series' last point at or before ``until``, as ``rollup_carry`` rows."""
    rows = []
    for sid, history in points.items():
        last = None
        for point in history:  # in time order: the baseline, then the window
            if point[0] > until:
                break
            last = point
        if last is not None:
            rows.append({"series_id": sid, "ts": last[0], "value": last[1]})
    return rows


def write_merged(
    conn: Connection, host: str, resolution: int, start: datetime, end: datetime
) -> None:
    """Replace ``host``'s rows at ``resolution`` (hour or day) in [start, end) by the merge of
    its rows one resolution finer (minutes into hours, hours into days). The finer rows are
    read and merged before the first write, for the same reason as :class:`MinuteRows`."""
    finer = FINER[resolution]
    host_series = select(series.c.id).where(series.c.host == host)
    query = (
        select(rollups)
        .where(rollups.c.resolution == finer, rollups.c.start >= start, rollups.c.start < end)
        .where(rollups.c.series_id.in_(host_series))
        .order_by(rollups.c.series_id, rollups.c.start)
    )
    merged: dict[tuple[int, datetime], dict[str, Any]] = {}
    for row in conn.execute(query).mappings():
        key = (row["series_id"], floor_to(row["start"], resolution))
        merged[key] = _merge_rollup(merged.get(key), row, resolution, key[1])
    h = histogram_rollups.c
    query = (
        select(h.series_id, h.start, histogram_layouts.c.bounds, h.increases)
        .join(histogram_layouts, histogram_layouts.c.id == h.layout_id)
        .where(h.resolution == finer, h.start >= start, h.start < end)
        .where(h.series_id.in_(host_series))
        .order_by(h.series_id, h.start)
    )
    coarse: dict[tuple[int, datetime], dict[str, float]] = defaultdict(dict)
    for sid, at, bounds, increases in conn.execute(query):
        into = coarse[(sid, floor_to(at, resolution))]
        for le, increase in unpack(bounds, increases):
            into[le] = sum_opt(into.get(le), increase)
    packed = {key: pack(by_le) for key, by_le in coarse.items()}
    for table in (rollups, histogram_rollups):
        replace_buckets(conn, table, host, resolution, start, end, host_series=True)
    if merged:
        conn.execute(insert(rollups), list(merged.values()))
    _insert_layout_rows(conn, resolution, packed)


def histogram_key(metric: str, labels: Mapping[str, str]) -> tuple[HistogramKey, str]:
    """A ``_bucket`` series' histogram (base metric, labels without ``le``) and its bound."""
    rest = {k: v for k, v in labels.items() if k != "le"}
    base = histogram_of(metric) or metric
    return (base, json.dumps(rest, sort_keys=True, separators=(",", ":"))), labels.get("le", "")


def pack(by_le: Mapping[str, float]) -> tuple[str, str]:
    """(bounds, increases) as stored: the bounds in ascending order, separated by spaces."""
    les = sorted(by_le, key=_bound)
    return " ".join(les), " ".join(_number(by_le[le]) for le in les)


def unpack(bounds: str, increases: str) -> list[tuple[str, float]]:
    """(le, increase) per bound of a stored histogram row."""
    return list(zip(bounds.split(" "), map(float, increases.split(" ")), strict=True))


def increase_sums(conn: Connection, where: Sequence[Any]) -> list[tuple[int, str, float]]:
    """(series id, le, increase summed over the rows) for the ``histogram_rollups`` rows that
    each condition of ``where`` selects (disjoint conditions: a row counts once).

    PostgreSQL sums per (series, layout, bound) itself, so a month of a fleet's rows comes
    back as a row per bound, not as hundreds of thousands of packed rows to unpack here.
    SQLite has no arrays: its rows are unpacked and summed here, in the rows' order."""
    if not where:
        return []
    h, layouts = histogram_rollups.c, histogram_layouts.c
    picked = union_all(*(select(h.series_id, h.layout_id, h.increases).where(c) for c in where))
    sums: dict[tuple[int, str], float] = defaultdict(float)
    if conn.dialect.name != "postgresql":
        rows = picked.subquery()
        joined = select(rows.c.series_id, layouts.bounds, rows.c.increases).join_from(
            rows, histogram_layouts, layouts.id == rows.c.layout_id
        )
        for sid, bounds, increases in conn.execute(joined):
            for le, increase in unpack(bounds, increases):
                sums[(sid, le)] += increase
        return [(sid, le, total) for (sid, le), total in sums.items()]
    rows = picked.subquery()
    # string_to_table (PostgreSQL 14): each increase with its position in the layout; half
    # the time of unnesting a float8[] built from the text.
    values = (
        func.string_to_table(rows.c.increases, " ")
        .table_valued("value", with_ordinality="ord")
        .render_derived()
    )
    query = (
        select(
            rows.c.series_id, rows.c.layout_id, values.c.ord, func.sum(cast(values.c.value, Double))
        )
        .select_from(rows.join(values, true()))
        .group_by(rows.c.series_id, rows.c.layout_id, values.c.ord)
    )
    summed = conn.execute(query).all()
    bounds = {
        lid: text.split(" ") for lid, text in conn.execute(select(layouts.id, layouts.bounds))
    }
    for sid, lid, position, total in summed:  # a bound in two layouts: one sum
        sums[(sid, bounds[lid][position - 1])] += total
    return [(sid, le, total) for (sid, le), total in sums.items()]


def _bound(le: str) -> float:
    try:
        return float(le)
    except ValueError:
        return float("inf")


def _number(value: float) -> str:
    # Bucket increases are counts: "12" instead of "12.0"; anything else exactly as repr.
    if value.is_integer() and abs(value) < 2**53:
        return str(int(value))
    return repr(value)


def _insert_histograms(
    conn: Connection,
    host: str,
    meta: SeriesMeta,
    resolution: int,
    grouped: Mapping[tuple[HistogramKey, datetime], Packed],
) -> None:
    if not grouped:
        return
    ids = _histogram_series(conn, host, meta, {key for key, _ in grouped})
    _insert_layout_rows(
        conn, resolution, {(ids[key], at): packed for (key, at), packed in grouped.items()}
    )


def _insert_layout_rows(
    conn: Connection, resolution: int, packed: Mapping[tuple[int, datetime], Packed]
) -> None:
    layouts = _layout_ids(conn, {bounds for bounds, _ in packed.values()})
    out = [
        {"series_id": sid, "resolution": resolution, "start": at,
         "layout_id": layouts[bounds], "increases": increases}
        for (sid, at), (bounds, increases) in packed.items()
    ]  # fmt: skip
    if out:
        conn.execute(insert(histogram_rollups), out)


def _histogram_series(
    conn: Connection, host: str, meta: SeriesMeta, keys: set[HistogramKey]
) -> dict[HistogramKey, int]:
    """The series id of each histogram, created on first use."""
    known = {
        (metric, json.dumps(labels, sort_keys=True, separators=(",", ":"))): sid
        for sid, (metric, labels) in meta.items()
        if metric in HISTOGRAM_ROLLUPS
    }
    for key in sorted(keys - set(known)):
        rows = {"host": host, "collector": HISTOGRAM_COLLECTOR, "metric": key[0], "labels": key[1]}
        conn.execute(_insert_ignore(conn, series), [rows])
        query = select(series.c.id).where(series.c.metric == key[0], series.c.labels == key[1])
        known[key] = conn.execute(query).scalar_one()
    return known


def _layout_ids(conn: Connection, layouts: set[str]) -> dict[str, int]:
    """The id of each bucket layout, created on first use (by any host: the table is shared)."""
    if not layouts:
        return {}
    t = histogram_layouts.c
    query = select(t.bounds, t.id).where(t.bounds.in_(sorted(layouts)))
    found = {bounds: lid for bounds, lid in conn.execute(query)}
    missing = sorted(layouts - set(found))
    if missing:
        conn.execute(_insert_ignore(conn, histogram_layouts), [{"bounds": b} for b in missing])
        found = {bounds: lid for bounds, lid in conn.execute(query)}
    return found


def _insert_ignore(conn: Connection, table: Table) -> Insert:
    # Another daemon of a PostgreSQL fleet may create the same row at the same moment.
    return insert_ignoring_conflicts(conn, table)


# -- the arithmetic -------------------------------------------------------------------------------


def _merge_rollup(
    acc: dict[str, Any] | None, row: Any, resolution: int, start: datetime
) -> dict[str, Any]:
    if acc is None:
        return {"series_id": row["series_id"], "resolution": resolution, "start": start,
                "count": row["count"], "sum": row["sum"], "min": row["min"], "max": row["max"],
                "last": row["last"], "increase": row["increase"]}  # fmt: skip
    acc["count"] += row["count"]
    acc["sum"] += row["sum"]
    acc["min"] = min(acc["min"], row["min"])
    acc["max"] = max(acc["max"], row["max"])
    acc["last"] = row["last"]  # rows come in time order
    acc["increase"] = sum_opt(acc["increase"], row["increase"])
    return acc


def _is_counter(metric: str) -> bool:
    return metric.endswith(COUNTER_SUFFIXES)


def _rolled_up(metric: str) -> bool:
    return metric in SERIES_ROLLUPS or histogram_of(metric) is not None


def rollup_input(metric: str) -> bool:
    """Whether :func:`minute_rows` reads ``metric``'s points: a rolled-up series, the
    ``_created`` series beside one (restarts) or ``gpuwatch_target_up`` (births). The rollup
    reads nothing else, which is most of a box's series (other histograms, gauges)."""
    if _rolled_up(metric) or metric == TARGET_UP:
        return True
    base = metric.removesuffix("_created")
    return base != metric and any(_rolled_up(base + s) for s in CREATED_OF)


def _series_rollups(
    meta: SeriesMeta,
    points: Points,
    start: datetime,
    end: datetime,
    max_gap: float,
    context: MinuteContext,
) -> Iterable[dict[str, Any]]:
    """The minute rows of the rolled-up series in ``points`` (histograms per ``le`` series)."""
    for sid, history in points.items():
        metric, labels = meta[sid]
        if not history or not _rolled_up(metric):
            continue
        births = context.created.get((metric, json.dumps(labels, sort_keys=True)), {})
        born = None
        if _is_counter(metric) and history[0][0] > start:
            born = _birth(history[0][0], context.scrapes.get(scrape_key(labels), []), max_gap)
        yield from _buckets(sid, metric, history, births, start, end, born)


def _birth(first: datetime, good: Sequence[datetime], max_gap: float) -> Point | None:
    """A zero before a counter's first-ever point, after a successful scrape that lacked it.

    Engines create a label child on its first event (SGLang, vLLM V0): absent from a good
    scrape, it had counted nothing. The zero is only the baseline of its first increase; it is
    not a stored sample and takes no part in count, sum, min, max or last.
    """
    before = [ts for ts in good if ts < first and (first - ts).total_seconds() <= max_gap]
    return (max(before), 0.0) if before else None


def _buckets(
    sid: int,
    metric: str,
    history: Sequence[Point],
    births: Mapping[datetime, float],
    start: datetime,
    end: datetime,
    born: Point | None = None,
) -> Iterable[dict[str, Any]]:
    counter = _is_counter(metric)
    rows: dict[datetime, dict[str, Any]] = {}
    previous: Point | None = born
    for ts, value in history:
        bucket = bucket_of(ts, MINUTE)
        if start <= bucket < end:
            row = rows.get(bucket)
            if row is None:
                row = rows[bucket] = {
                    "series_id": sid, "resolution": MINUTE, "start": bucket, "count": 0,
                    "sum": 0.0, "min": value, "max": value, "last": value,
                    "increase": 0.0 if counter else None,
                }  # fmt: skip
            row["count"] += 1
            row["sum"] += value
            row["min"], row["max"], row["last"] = (
                min(row["min"], value),
                max(row["max"], value),
                value,
            )
            if counter and previous is not None:
                row["increase"] += _step(previous, (ts, value), births)
        previous = (ts, value)
    return rows.values()


def _step(before: Point, after: Point, births: Mapping[datetime, float]) -> float:
    """One pair's contribution to a counter's increase: a reset counts the value after it. The
    ``_created`` times are read as raw windows read them (series_math.started_anew), so a
    report and an alert over the same span agree."""
    restarted = started_anew(before[0], births.get(before[0]), after[0], births.get(after[0]))
    if restarted or after[1] < before[1]:
        return after[1]
    return after[1] - before[1]
