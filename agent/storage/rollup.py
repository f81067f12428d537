"""Rollups: raw samples into per-minute, per-hour and per-day aggregates, and retention.

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
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from sqlalchemy import Connection, Engine, Select, delete, func, insert, select

from agent.config.settings import Config
from agent.storage import raw
from agent.storage.buckets import (
    DAY,
    HOUR,
    MINUTE,
    TARGET_UP,
    MinuteRows,
    bucket_of,
    carried_rows,
    day_floor,
    floor_to,
    hour_floor,
    minute_rows,
    replace_buckets,
    rollup_input,
    sum_opt,
    write_merged,
    write_minute_rows,
)
from agent.storage.minute_batches import BATCH_POINTS, minute_batches
from agent.storage.minute_context import MinuteContext
from agent.storage.points import Point, Points, SeriesMeta
from agent.storage.retention import trim_host
from migrations.schema import (
    collector_runs,
    gpu_usage,
    histogram_rollups,
    rollup_carry,
    rollup_state,
    rollups,
    series,
)

MAX_SPAN = timedelta(days=1)  # per run, so catching up after downtime stays bounded
# Day rows per run: a database from before day rows catches up on two years of hour rows a
# month at a time, one run a minute, instead of in one long first run.
MAX_DAYS = timedelta(days=31)
# How far back a counter's previous value is looked for; older values are not a baseline.
BASELINE_LOOKBACK = timedelta(days=1)
CARRY = "carry"  # the rollup_state job: up to when rollup_carry holds the baselines
COMPACT = "compact"  # the rollup_state job: raw rows before it are packed into chunks
# Raw rows per packing transaction (SQLite's one writer is held from its delete to its commit).
# Series per batch follow from the tick interval; at 10 s ticks this is ~55.
COMPACT_ROWS = 20_000
JOBS = {MINUTE: "minute", HOUR: "hour", DAY: "day"}  # rollup_state's job per resolution
SETTLE_SECONDS = 120  # longer than any tick (scrape timeouts are seconds)
ONE_MINUTE = timedelta(seconds=MINUTE)
# Re-exported: the ledger, the benches and tests import these from here.
__all__ = ["DAY", "HOUR", "MINUTE", "TARGET_UP", "Point", "Points", "SeriesMeta", "bucket_of",
           "day_floor", "hour_floor", "replace_buckets", "sum_opt"]  # fmt: skip


Write = Callable[[Connection], None]  # rows already computed, written on the given connection


class Meter(Protocol):
    """What else a rollup run derives from the points it reads, in its transaction.

    The cost ledger implements it (:class:`agent.cost.metering.LedgerMeter`): storage decides
    which buckets are complete and owns the watermarks; the meter prices them.
    """

    def minutes(
        self,
        meta: SeriesMeta,
        points: Points,
        span: tuple[datetime, datetime],
        max_gap: float,
    ) -> Write:
        """Meter the minute buckets in [span) from this host's points; the returned writes
        replace their old rows. Computed before the rollup writes anything (see
        :class:`~agent.storage.buckets.MinuteRows`), written in its transaction."""

    def merge(self, conn: Connection, resolution: int, start: datetime, end: datetime) -> None:
        """Meter the hour or day buckets in [start, end) from the rows one resolution finer
        (replacing old rows)."""

    def reads(self, metric: str) -> bool:
        """Whether :meth:`minutes` needs ``metric``'s points (the rollup reads no others)."""


@dataclass(frozen=True, slots=True)
class RollupResult:
    minutes: int  # complete minute buckets processed
    hours: int
    until: datetime | None  # the watermark after the run
    days: int = 0


@dataclass(frozen=True, slots=True)
class Provisional:
    """What :meth:`Rollup.provisional` made readable: the host's last stored tick (None when
    it has none) and the window to read, widened to whole minutes where an edge minute was
    cut to the asked window."""

    last_tick: datetime | None
    window: tuple[datetime, datetime]


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
    # Called between packing transactions with the seconds the last one took. SQLite has one
    # writer and its busy handler polls, and the daemon's threads share one interpreter lock:
    # batches back to back would keep a tick's write out past its deadline at the hour's
    # packing (at 1 s ticks). The daemon passes agent.daemon.deadline.Deadline.turn.
    writer_turn: Callable[[float], None] | None = None
    # How far back a tick's alert inputs read raw samples (agent.alerting.inputs.raw_reach):
    # packed sooner, each read decoded every series' whole hour to keep minutes of it.
    head_reach: timedelta = timedelta(0)
    # Points the minute job reads and holds at once (agent.storage.minute_batches).
    batch_points: int = BATCH_POINTS

    @classmethod
    def from_config(
        cls,
        engine: Engine,
        config: Config,
        meter: Meter | None,
        writer_turn: Callable[[float], None] | None = None,
    ) -> Rollup:
        r = config.retention
        return cls(
            engine, config.host, config.daemon.interval_seconds, meter,
            timedelta(seconds=r.raw_seconds),
            timedelta(seconds=r.minute_seconds), timedelta(seconds=r.hour_seconds),
            timedelta(seconds=SETTLE_SECONDS), writer_turn,
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
            days = self._days(conn)
            self._set_watermark(conn, "minute", max(start, end))
            self._retention(conn, now)
        self._compact(max(start, end))
        return RollupResult(minutes, hours, max(start, end), days)

    def _compact(self, rolled_up_until: datetime) -> None:
        """Pack the raw rows of hours the rollup is done with into chunks.

        Rows stay in the head while the next run may read them (from its start minus the
        largest gap, where its first increase takes a baseline from) and while the alert
        inputs' windows reach them (``head_reach``). One transaction per batch
        of series, so a tick's write never waits long for the lock; a crash between batches
        leaves some series packed, and the rerun finds no rows left of theirs to pack. A batch
        holds about ``COMPACT_ROWS`` rows, whatever the tick interval.
        """
        until = rolled_up_until - max(timedelta(seconds=self.max_gap), self.head_reach)
        with self.engine.connect() as conn:
            ids = list(conn.execute(self._host_series()).scalars())
            start = self._watermark(conn, COMPACT) or raw.first_head_ts(conn, ids)
        if start is None or raw.block_of(until) <= raw.block_of(start):
            return
        done, batch, took = start, self._compact_batch(start, until), 0.0
        for first in range(0, len(ids), batch):
            if first and self.writer_turn is not None:
                self.writer_turn(took)
            began = time.monotonic()
            with self.engine.begin() as conn:
                done = raw.compact(conn, ids[first : first + batch], start, until)
            took = time.monotonic() - began
        with self.engine.begin() as conn:
            self._set_watermark(conn, COMPACT, done)

    def _compact_batch(self, start: datetime, until: datetime) -> int:
        """Series per packing transaction: about ``COMPACT_ROWS`` head rows each."""
        blocks = (raw.block_of(until) - raw.block_of(start)) // raw.BLOCK
        blocks = max(1, min(blocks, raw.MAX_BLOCKS_PER_RUN))
        per_series = blocks * raw.BLOCK.total_seconds() / max(self.interval_seconds, 0.001)
        return max(1, int(COMPACT_ROWS // per_series))

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
        first = raw.first_ts(conn, self._host_series())
        return None if first is None else bucket_of(first, MINUTE)

    # -- minutes ------------------------------------------------------------------------------

    def _minutes(self, conn: Connection, start: datetime, end: datetime) -> int:
        meta = self._series(conn)
        # Only the series that rows are made from are read: at 1 s ticks, reading all of a
        # box's series is a peak of megabytes each minute that Python's allocator keeps.
        inputs = [sid for sid, (metric, _) in meta.items() if self._reads(metric)]
        # Everything is computed before the first write. SQLite (WAL) reads without its lock but
        # has one writer, from a transaction's first write to its commit: at 1 s ticks, rows
        # computed between writes would keep a tick's write waiting past its deadline.
        # Only the metrics of agent/storage/rolled_up.py get rows.
        write, carried = self._batched_writes(conn, meta, inputs, (start, end))
        write(conn)
        # The next run starts at ``end`` and reads from ``end - gap``: its baselines are known now.
        self._carry_forward(conn, carried, end - timedelta(seconds=self.max_gap))
        return int((end - start).total_seconds() // MINUTE)

    def _batched_writes(
        self, conn: Connection, meta: SeriesMeta, inputs: list[int], span: tuple[datetime, datetime]
    ) -> tuple[Write, list[dict[str, Any]]]:
        """The minute rows and ledger of [span) (as :meth:`_minute_writes`) and the next run's
        baselines, computed a batch of series at a time (agent.storage.minute_batches): the
        job holds one batch's points at once, not the box's."""
        start, end = span
        gap = timedelta(seconds=self.max_gap)
        # From the observation that opens the first interval to the one that closes the last.
        window = (start - gap, end + gap)
        baselines = self._baselines(conn, inputs, window[0])
        per_series = (window[1] - window[0]).total_seconds() / self.interval_seconds + 1
        parts: list[MinuteRows] = []
        carried: list[dict[str, Any]] = []
        context, metered = None, None
        for batch in minute_batches(meta, inputs, per_series, self._metered, self.batch_points):
            points = self._points(conn, batch.ids, *window, baselines) if batch.ids else {}
            context = context or MinuteContext.of(meta, points)  # the first batch holds its series
            parts.append(minute_rows(meta, points, span, self.max_gap, context))
            carried += carried_rows(points, end - gap)
            if batch.metered and self.meter is not None:
                metered = self.meter.minutes(meta, points, span, self.max_gap)
            del points  # before the next batch's are read
        return self._writes(meta, MinuteRows.joined(span, parts), metered), carried

    def _minute_writes(
        self, meta: SeriesMeta, points: Points, span: tuple[datetime, datetime]
    ) -> Write:
        """The minute rows and the ledger of [span), computed now from ``points`` (all the
        series' at once); the returned writes replace their old rows (computed before any
        write: see buckets.MinuteRows)."""
        metered = (
            None if self.meter is None else self.meter.minutes(meta, points, span, self.max_gap)
        )
        return self._writes(meta, minute_rows(meta, points, span, self.max_gap), metered)

    def _writes(self, meta: SeriesMeta, rows: MinuteRows, metered: Write | None) -> Write:
        def write(conn: Connection) -> None:
            write_minute_rows(conn, self.host, meta, rows)
            if metered is not None:
                metered(conn)

        return write

    def _metered(self, metric: str) -> bool:
        return self.meter is not None and self.meter.reads(metric)

    def _reads(self, metric: str) -> bool:
        return rollup_input(metric) or (self.meter is not None and self.meter.reads(metric))

    def _series(self, conn: Connection) -> dict[int, tuple[str, dict[str, str]]]:
        query = select(series.c.id, series.c.metric, series.c.labels).where(
            series.c.host == self.host
        )
        return {sid: (metric, json.loads(lj)) for sid, metric, lj in conn.execute(query)}

    def _host_series(self) -> Select[int]:
        return select(series.c.id).where(series.c.host == self.host)

    def _points(
        self,
        conn: Connection,
        ids: list[int],
        start: datetime,
        end: datetime,
        baselines: Mapping[int, Point] | None = None,
    ) -> dict[int, list[Point]]:
        """These series' points in (start, end], each after its baseline: its last point at or
        before ``start`` (``baselines``, when read already for more series). Only this host's
        rows are read, through the (series, time) key, so a run costs its own new data
        whatever the history or the number of hosts."""
        out: dict[int, list[Point]] = defaultdict(list)
        found = self._baselines(conn, ids, start) if baselines is None else baselines
        for sid in ids:
            if sid in found:
                out[sid].append(found[sid])
        for sid, history in raw.read(conn, ids, start, end).items():
            out[sid].extend(history)
        return out

    def _baselines(self, conn: Connection, ids: list[int], start: datetime) -> dict[int, Point]:
        """Each series' last point at or before ``start``, within the lookback."""
        if self._watermark(conn, CARRY) == start:
            t = rollup_carry.c
            carried = select(t.series_id, t.ts, t.value).where(
                t.series_id.in_(self._host_series()), t.ts > start - BASELINE_LOOKBACK
            )
            wanted = set(ids)
            rows = conn.execute(carried)
            return {sid: (ts, value) for sid, ts, value in rows if sid in wanted}
        # Nothing carried for this window (the first run, a database from before carrying, a
        # changed tick interval): looked up once in the raw samples, carried from then on.
        return raw.last_at_or_before(conn, ids, start, BASELINE_LOOKBACK)

    def _carry_forward(self, conn: Connection, rows: list[dict[str, Any]], until: datetime) -> None:
        """Keep ``rows`` (buckets.carried_rows) as the next run's baselines."""
        conn.execute(delete(rollup_carry).where(rollup_carry.c.series_id.in_(self._host_series())))
        if rows:
            conn.execute(insert(rollup_carry), rows)
        self._set_watermark(conn, CARRY, until)

    # -- a rollup brought up to date for a reader ---------------------------------------------

    def provisional(self, conn: Connection, clip: tuple[datetime, datetime]) -> Provisional:
        """On ``conn``, inside a transaction its caller rolls back: every stored sample of this
        host rolled up, and the minutes holding ``clip``'s edges cut to it, so that a reader
        of rollup rows sees exactly what is stored in ``clip``. Nothing here may be committed.

        - The minutes after the watermark, through the one holding the last stored tick
          (partial, and not yet settled: what a report asked right after a run must show).
        - An edge of ``clip`` inside a minute: that minute's rows again from the raw points
          of ``clip`` only (those in (low, high] after their baseline, as a window reads),
          and the hour and day rows holding it merged again, when that minute still has raw
          points (raw retention); otherwise the minute is left out.
        """
        last = self._last_tick(conn)
        if last is None:
            return Provisional(None, clip)
        low, high = clip
        start = self._watermark(conn, "minute") or self._first_sample(conn)
        end = min(bucket_of(last, MINUTE), bucket_of(high, MINUTE)) + timedelta(seconds=MINUTE)
        # Only what the window reaches: a past week's digest rolls nothing up.
        if start is not None and end > start:
            self._minute_rows(conn, max(start, end - MAX_SPAN), end, None)
        cut_low, cut_high = bucket_of(low, MINUTE), bucket_of(high, MINUTE)
        if cut_low < low and self._minute_rows(conn, cut_low, cut_low + ONE_MINUTE, clip):
            low = cut_low
        if cut_high < high and self._minute_rows(conn, cut_high, cut_high + ONE_MINUTE, clip):
            high = cut_high + ONE_MINUTE
        return Provisional(last, (low, high))

    def _minute_rows(
        self,
        conn: Connection,
        start: datetime,
        end: datetime,
        clip: tuple[datetime, datetime] | None,
    ) -> bool:
        """Minute rows (and ledger) of [start, end) from the raw points, those inside ``clip``
        only when given, then the hour and day rows holding them when those exist; False
        when there were no points to make them from."""
        meta = self._series(conn)
        gap = timedelta(seconds=self.max_gap)
        inputs = [sid for sid, (metric, _) in meta.items() if self._reads(metric)]
        points: Points = self._points(conn, inputs, start - gap, end + gap)
        if clip is not None:
            points = {sid: raw.clipped(ps, *clip) for sid, ps in points.items()}
            if not any(start <= p[0] < end for ps in points.values() for p in ps):
                return False
        self._minute_writes(meta, points, (start, end))(conn)
        for resolution in (HOUR, DAY):
            until = self._watermark(conn, JOBS[resolution])
            bucket = floor_to(start, resolution)
            if until is not None and bucket < until:  # merged again; its watermark stays
                self._merged_rows(conn, resolution, bucket, bucket + timedelta(seconds=resolution))
        return True

    def _last_tick(self, conn: Connection) -> datetime | None:
        return conn.execute(
            select(func.max(collector_runs.c.ts)).where(collector_runs.c.host == self.host)
        ).scalar()

    # -- hours --------------------------------------------------------------------------------

    def _hours(self, conn: Connection, minutes_until: datetime) -> int:
        """Hour buckets whose 60 minutes are all rolled up, from the minute rows."""
        start = self._watermark(conn, "hour") or self._first(conn, MINUTE)
        if start is None:
            return 0
        end = bucket_of(minutes_until, HOUR) + timedelta(seconds=HOUR)
        if end > minutes_until:
            end -= timedelta(seconds=HOUR)
        return self._merge(conn, HOUR, start, end)

    def _days(self, conn: Connection) -> int:
        """UTC days whose 24 hours are all rolled up, from the hour rows; at most
        ``MAX_DAYS`` a run. A database from before day rows starts at its first hour row."""
        hours_until = self._watermark(conn, "hour")
        start = self._watermark(conn, "day") or self._first(conn, HOUR)
        if start is None or hours_until is None:
            return 0
        return self._merge(conn, DAY, start, min(day_floor(hours_until), start + MAX_DAYS))

    def _merge(self, conn: Connection, resolution: int, start: datetime, end: datetime) -> int:
        if end <= start:
            return 0
        self._merged_rows(conn, resolution, start, end)
        self._set_watermark(conn, JOBS[resolution], end)
        return int((end - start).total_seconds() // resolution)

    def _merged_rows(
        self, conn: Connection, resolution: int, start: datetime, end: datetime
    ) -> None:
        write_merged(conn, self.host, resolution, start, end)
        if self.meter is not None:
            self.meter.merge(conn, resolution, start, end)

    def _first(self, conn: Connection, resolution: int) -> datetime | None:
        """The start of the coarser bucket holding this host's first row at ``resolution``."""
        query = select(func.min(gpu_usage.c.start)).where(
            gpu_usage.c.host == self.host, gpu_usage.c.resolution == resolution
        )
        first = conn.execute(query).scalar()
        host_series = select(series.c.id).where(series.c.host == self.host)
        for table in (rollups, histogram_rollups):  # a host may have either without the other
            if first is None:
                first = conn.execute(
                    select(func.min(table.c.start)).where(
                        table.c.resolution == resolution, table.c.series_id.in_(host_series)
                    )
                ).scalar()
        coarser = DAY if resolution == HOUR else HOUR
        return None if first is None else floor_to(first, coarser)

    # -- retention ----------------------------------------------------------------------------

    def _retention(self, conn: Connection, now: datetime) -> None:
        keep = (self.raw_retention, self.minute_retention, self.hour_retention)
        trim_host(conn, self.host, now, *keep)
