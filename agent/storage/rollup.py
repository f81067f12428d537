"""Rollups: raw samples into per-minute and per-hour aggregates, and retention.

Each daemon rolls up its own host. A run covers the complete buckets since its watermark, in
one transaction that replaces whatever rows those buckets had: a crash loses nothing (the
watermark did not move), and running it twice changes nothing. Month-long questions read these
tables, never raw samples. Retention then trims raw samples and each resolution.

The same run hands the points it read to a :class:`Meter` (the cost ledger, in
:mod:`agent.cost.metering`), so pricing happens in the same transaction without storage knowing
any price.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from sqlalchemy import Connection, Engine, Select, Table, and_, delete, func, insert, select

from agent.config.settings import Config
from migrations.schema import (
    collector_runs,
    gpu_allocations,
    gpu_usage,
    rollup_carry,
    rollup_state,
    rollups,
    samples,
    series,
)

MINUTE, HOUR = 60, 3600
MAX_SPAN = timedelta(days=1)  # per run, so catching up after downtime stays bounded
# How far back a counter's previous value is looked for; older values are not a baseline.
BASELINE_LOOKBACK = timedelta(days=1)
TARGET_UP = "gpuwatch_target_up"
CARRY = "carry"  # the rollup_state job: up to when rollup_carry holds the baselines
SETTLE_SECONDS = 120  # longer than any tick (scrape timeouts are seconds)
COUNTER_SUFFIXES = ("_total", "_bucket", "_count", "_sum")

Point = tuple[datetime, float]
SeriesMeta = Mapping[int, tuple[str, dict[str, str]]]  # series id -> (metric, labels)
Points = Mapping[int, list[Point]]  # series id -> its points, oldest first


def bucket_of(ts: datetime, size: int) -> datetime:
    """The start of the (start, start + size] bucket that holds ``ts``."""
    epoch = ts.timestamp()
    start = (epoch // size) * size
    if start == epoch:  # an instant on a boundary closes the bucket before it
        start -= size
    return datetime.fromtimestamp(start, tz=ts.tzinfo)


class Meter(Protocol):
    """What else a rollup run derives from the points it reads, in its transaction.

    The cost ledger implements it (:class:`agent.cost.metering.LedgerMeter`): storage decides
    which buckets are complete and owns the watermarks; the meter prices them.
    """

    def minutes(
        self,
        conn: Connection,
        meta: SeriesMeta,
        points: Points,
        span: tuple[datetime, datetime],
        max_gap: float,
    ) -> None:
        """Meter the minute buckets in [span) from this host's points (replacing old rows)."""

    def hours(self, conn: Connection, start: datetime, end: datetime) -> None:
        """Meter the hour buckets in [start, end) from the minute rows (replacing old rows)."""


@dataclass(frozen=True, slots=True)
class RollupResult:
    minutes: int  # complete minute buckets processed
    hours: int
    until: datetime | None  # the watermark after the run


@dataclass
class Rollup:
    """The rollup job of one host."""

    engine: Engine
    host: str
    interval_seconds: float
    meter: Meter | None = None  # None: series rollups only, no cost ledger
    raw_retention: timedelta = timedelta(days=7)
    minute_retention: timedelta = timedelta(days=90)
    hour_retention: timedelta = timedelta(days=730)
    # A tick is stamped when it starts and written when its slowest scrape is done: a bucket
    # is rolled up only once ``settle`` has passed after its end, so no late write is missed.
    settle: timedelta = timedelta(0)

    @classmethod
    def from_config(cls, engine: Engine, config: Config, meter: Meter | None) -> Rollup:
        r = config.retention
        return cls(
            engine, config.host, config.daemon.interval_seconds, meter,
            timedelta(seconds=r.raw_seconds),
            timedelta(seconds=r.minute_seconds), timedelta(seconds=r.hour_seconds),
            timedelta(seconds=SETTLE_SECONDS),
        )  # fmt: skip

    @property
    def max_gap(self) -> float:
        # A missed tick or two is still metered; a longer silence is gpuwatch not watching.
        return max(2.5 * self.interval_seconds, 30.0)

    def run(self, now: datetime) -> RollupResult:
        """Roll up every complete bucket up to ``now``, then apply retention."""
        with self.engine.begin() as conn:
            start = self._watermark(conn, "minute") or self._first_sample(conn)
            if start is None:
                return RollupResult(0, 0, None)
            end = self._complete_until(conn, now, start)
            minutes = self._minutes(conn, start, end) if end > start else 0
            hours = self._hours(conn, end)
            self._set_watermark(conn, "minute", max(start, end))
            self._retention(conn, now)
        return RollupResult(minutes, hours, max(start, end))

    def _complete_until(self, conn: Connection, now: datetime, start: datetime) -> datetime:
        """The end of the last minute bucket that can be rolled up for good.

        A bucket is complete when ``settle`` has passed since its end (late writes of a slow
        tick) and a tick has been stored at or after its end: an interval that straddles the
        bucket's end is only known once the observation that closes it is stored.
        """
        last = conn.execute(
            select(func.max(collector_runs.c.ts)).where(collector_runs.c.host == self.host)
        ).scalar()
        limit = now - self.settle if last is None else min(now - self.settle, last)
        end = bucket_of(limit, MINUTE) + timedelta(seconds=MINUTE)
        if end > limit:
            end -= timedelta(seconds=MINUTE)
        return min(end, start + MAX_SPAN)

    # -- watermarks -----------------------------------------------------------------------

    def _watermark(self, conn: Connection, job: str) -> datetime | None:
        query = select(rollup_state.c.watermark).where(
            rollup_state.c.host == self.host, rollup_state.c.job == job
        )
        return conn.execute(query).scalar()

    def _set_watermark(self, conn: Connection, job: str, at: datetime) -> None:
        conn.execute(
            delete(rollup_state).where(rollup_state.c.host == self.host, rollup_state.c.job == job)
        )
        conn.execute(insert(rollup_state).values(host=self.host, job=job, watermark=at))

    def _first_sample(self, conn: Connection) -> datetime | None:
        query = (
            select(func.min(samples.c.ts))
            .join(series, series.c.id == samples.c.series_id)
            .where(series.c.host == self.host)
        )
        first = conn.execute(query).scalar()
        return None if first is None else bucket_of(first, MINUTE)

    # -- minutes ------------------------------------------------------------------------------

    def _minutes(self, conn: Connection, start: datetime, end: datetime) -> int:
        meta = self._series(conn)
        gap = timedelta(seconds=self.max_gap)
        # From the observation that opens the first interval to the one that closes the last.
        points = self._points(conn, start - gap, end + gap)
        rows = list(_series_rollups(meta, points, start, end, self.max_gap))
        replace_buckets(conn, rollups, self.host, MINUTE, start, end, host_series=True)
        if rows:
            conn.execute(insert(rollups), rows)
        if self.meter is not None:
            self.meter.minutes(conn, meta, points, (start, end), self.max_gap)
        # The next run starts at ``end`` and reads from ``end - gap``: its baselines are known now.
        self._carry_forward(conn, points, end - gap)
        return int((end - start).total_seconds() // MINUTE)

    def _series(self, conn: Connection) -> dict[int, tuple[str, dict[str, str]]]:
        query = select(series.c.id, series.c.metric, series.c.labels).where(
            series.c.host == self.host
        )
        return {sid: (metric, json.loads(lj)) for sid, metric, lj in conn.execute(query)}

    def _host_series(self) -> Select[tuple[int]]:
        return select(series.c.id).where(series.c.host == self.host)

    def _points(self, conn: Connection, start: datetime, end: datetime) -> dict[int, list[Point]]:
        """This host's series' points in (start, end], each after its baseline: its last point
        at or before ``start``. Only this host's rows are read, through the (series, time) key,
        so a run costs its own new data whatever the history or the number of hosts."""
        out: dict[int, list[Point]] = defaultdict(list)
        inside = (
            select(samples.c.series_id, samples.c.ts, samples.c.value)
            .where(samples.c.series_id.in_(self._host_series()))
            .where(samples.c.ts > start, samples.c.ts <= end)
            .order_by(samples.c.ts)
        )
        for query in (self._baselines(conn, start), inside):
            for sid, ts, value in conn.execute(query):
                out[sid].append((ts, value))
        return out

    def _baselines(self, conn: Connection, start: datetime) -> Select[Any]:
        """Each series' last point at or before ``start``, within the lookback."""
        if self._watermark(conn, CARRY) == start:
            t = rollup_carry.c
            return select(t.series_id, t.ts, t.value).where(
                t.series_id.in_(self._host_series()), t.ts > start - BASELINE_LOOKBACK
            )
        # Nothing carried for this window (the first run, a database from before carrying, a
        # changed tick interval): looked up once in the raw samples, carried from then on.
        last = (
            select(samples.c.series_id, func.max(samples.c.ts).label("ts"))
            .where(samples.c.series_id.in_(self._host_series()))
            .where(samples.c.ts <= start, samples.c.ts > start - BASELINE_LOOKBACK)
            .group_by(samples.c.series_id)
            .subquery()
        )
        return select(samples.c.series_id, samples.c.ts, samples.c.value).join(
            last, and_(samples.c.series_id == last.c.series_id, samples.c.ts == last.c.ts)
        )

    def _carry_forward(
        self, conn: Connection, points: Mapping[int, list[Point]], until: datetime
    ) -> None:
        """Keep each series' last point at or before ``until``: the next run's baselines."""
        rows = []
        for sid, history in points.items():
            last = None
            for point in history:  # in time order: the baseline, then the window
                if point[0] > until:
                    break
                last = point
            if last is not None:
                rows.append({"series_id": sid, "ts": last[0], "value": last[1]})
        conn.execute(delete(rollup_carry).where(rollup_carry.c.series_id.in_(self._host_series())))
        if rows:
            conn.execute(insert(rollup_carry), rows)
        self._set_watermark(conn, CARRY, until)

    # -- hours --------------------------------------------------------------------------------

    def _hours(self, conn: Connection, minutes_until: datetime) -> int:
        """Hour buckets whose 60 minutes are all rolled up, from the minute rows."""
        start = self._watermark(conn, "hour") or self._first_minute(conn)
        if start is None:
            return 0
        end = bucket_of(minutes_until, HOUR) + timedelta(seconds=HOUR)
        if end > minutes_until:
            end -= timedelta(seconds=HOUR)
        if end <= start:
            return 0
        replace_buckets(conn, rollups, self.host, HOUR, start, end, host_series=True)
        rows = self._hour_rollups(conn, start, end)
        if rows:
            conn.execute(insert(rollups), rows)
        if self.meter is not None:
            self.meter.hours(conn, start, end)
        self._set_watermark(conn, "hour", end)
        return int((end - start).total_seconds() // HOUR)

    def _first_minute(self, conn: Connection) -> datetime | None:
        query = select(func.min(gpu_usage.c.start)).where(
            gpu_usage.c.host == self.host, gpu_usage.c.resolution == MINUTE
        )
        first = conn.execute(query).scalar()
        if first is None:
            host_series = select(series.c.id).where(series.c.host == self.host)
            first = conn.execute(
                select(func.min(rollups.c.start)).where(
                    rollups.c.resolution == MINUTE, rollups.c.series_id.in_(host_series)
                )
            ).scalar()
        return None if first is None else hour_floor(first)

    def _hour_rollups(
        self, conn: Connection, start: datetime, end: datetime
    ) -> list[dict[str, Any]]:
        host_series = select(series.c.id).where(series.c.host == self.host)
        query = (
            select(rollups)
            .where(
                rollups.c.resolution == MINUTE,
                rollups.c.start >= start,
                rollups.c.start < end,
                rollups.c.series_id.in_(host_series),
            )
            .order_by(rollups.c.series_id, rollups.c.start)
        )
        merged: dict[tuple[int, datetime], dict[str, Any]] = {}
        for row in conn.execute(query).mappings():
            key = (row["series_id"], hour_floor(row["start"]))
            merged[key] = _merge_rollup(merged.get(key), row, key[1])
        return list(merged.values())

    # -- retention ----------------------------------------------------------------------------

    def _retention(self, conn: Connection, now: datetime) -> None:
        host_series = select(series.c.id).where(series.c.host == self.host)
        conn.execute(
            delete(samples).where(
                samples.c.ts < now - self.raw_retention, samples.c.series_id.in_(host_series)
            )
        )
        conn.execute(
            delete(collector_runs).where(
                collector_runs.c.host == self.host, collector_runs.c.ts < now - self.raw_retention
            )
        )
        for resolution, keep in ((MINUTE, self.minute_retention), (HOUR, self.hour_retention)):
            cutoff = now - keep
            conn.execute(
                delete(rollups).where(
                    rollups.c.resolution == resolution,
                    rollups.c.start < cutoff,
                    rollups.c.series_id.in_(host_series),
                )
            )
            for table in (gpu_usage, gpu_allocations):
                conn.execute(
                    delete(table).where(
                        table.c.host == self.host,
                        table.c.resolution == resolution,
                        table.c.start < cutoff,
                    )
                )


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


def hour_floor(ts: datetime) -> datetime:
    return ts.replace(minute=0, second=0, microsecond=0)


def sum_opt(total: Any, value: Any) -> Any:
    """``total + value`` where None means "not known" (None + x is x)."""
    if value is None:
        return total
    return value if total is None else total + value


def _merge_rollup(acc: dict[str, Any] | None, row: Any, hour: datetime) -> dict[str, Any]:
    if acc is None:
        return {"series_id": row["series_id"], "resolution": HOUR, "start": hour,
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


def _series_rollups(
    meta: Mapping[int, tuple[str, dict[str, str]]],
    points: Mapping[int, list[Point]],
    start: datetime,
    end: datetime,
    max_gap: float,
) -> Iterable[dict[str, Any]]:
    created = _created_index(meta, points)
    scrapes = _good_scrapes(meta, points)
    for sid, (metric, labels) in meta.items():
        history = points.get(sid)
        if not history:
            continue
        births = created.get((metric, json.dumps(labels, sort_keys=True)), {})
        born = None
        if _is_counter(metric) and history[0][0] > start:
            born = _birth(history[0][0], scrapes.get(_scrape_key(labels), []), max_gap)
        yield from _buckets(sid, metric, history, births, start, end, born)


def _scrape_key(labels: Mapping[str, str]) -> tuple[str, str]:
    return labels.get("host", ""), labels.get("target", "")


def _good_scrapes(
    meta: Mapping[int, tuple[str, dict[str, str]]], points: Mapping[int, list[Point]]
) -> dict[tuple[str, str], list[datetime]]:
    """When each target was scraped successfully, from its gpuwatch_target_up series."""
    out: dict[tuple[str, str], list[datetime]] = {}
    for sid, (metric, labels) in meta.items():
        if metric == TARGET_UP:
            out[_scrape_key(labels)] = [ts for ts, up in points.get(sid, []) if up]
    return out


def _birth(first: datetime, good: Sequence[datetime], max_gap: float) -> Point | None:
    """A zero before a counter's first-ever point, after a successful scrape that lacked it.

    Engines create a label child on its first event (SGLang, vLLM V0): absent from a good
    scrape, it had counted nothing. The zero is only the baseline of its first increase; it is
    not a stored sample and takes no part in count, sum, min, max or last.
    """
    before = [ts for ts in good if ts < first and (first - ts).total_seconds() <= max_gap]
    return (max(before), 0.0) if before else None


def _created_index(
    meta: Mapping[int, tuple[str, dict[str, str]]], points: Mapping[int, list[Point]]
) -> dict[tuple[str, str], dict[datetime, float]]:
    """(counter metric, labels) -> {ts: created} from the ``_created`` series beside it."""
    out: dict[tuple[str, str], dict[datetime, float]] = {}
    for sid, (metric, labels) in meta.items():
        if not metric.endswith("_created"):
            continue
        base = metric.removesuffix("_created")
        births = dict(points.get(sid, []))
        key_labels = json.dumps(labels, sort_keys=True)
        for name in (base + "_total", base + "_bucket", base + "_count", base + "_sum"):
            out[(name, key_labels)] = births
    return out


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
    """One pair's contribution to a counter's increase: a reset counts the value after it."""
    born_before, born_after = births.get(before[0]), births.get(after[0])
    restarted = born_before is not None and born_after is not None and born_after != born_before
    if restarted or after[1] < before[1]:
        return after[1]
    return after[1] - before[1]
