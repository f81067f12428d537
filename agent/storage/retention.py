"""Retention: a host's raw samples, collector runs, rollup rows and ledger rows past their
keep. The rollup job trims its own host after each run; the central database of a fleet
trims each host's forwarded rows with :func:`trim_rollups` (agent/storage/forward/job.py).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import Connection, delete, select

from agent.storage import raw
from agent.storage.buckets import DAY, HOUR, MINUTE, day_floor
from migrations.schema import (
    collector_runs,
    gpu_allocations,
    gpu_mig_usage,
    gpu_pod_allocations,
    gpu_usage,
    histogram_rollups,
    rollups,
    series,
)


def trim_host(
    conn: Connection,
    host: str,
    now: datetime,
    raw_keep: timedelta,
    minute_keep: timedelta,
    hour_keep: timedelta,
) -> None:
    """Everything of ``host`` past its keep: raw samples and collector runs, then rollups."""
    host_series = select(series.c.id).where(series.c.host == host)
    raw.trim(conn, host_series, now - raw_keep)
    conn.execute(
        delete(collector_runs).where(
            collector_runs.c.host == host, collector_runs.c.ts < now - raw_keep
        )
    )
    trim_rollups(conn, host, now, minute_keep, hour_keep)


def trim_rollups(
    conn: Connection, host: str, now: datetime, minute_keep: timedelta, hour_keep: timedelta
) -> None:
    """Retention of ``host``'s rollup and ledger rows. The central database of a fleet trims
    each host's forwarded rows with the same call (agent/storage/forward/job.py). Day rows are
    kept as long as hour rows: they answer the same months, 24 times cheaper. A day row goes
    once its whole day is past the hours' cutoff: a window over the cutoff's own day reads the
    day row, so dropping it with the day's first hours would lose the rest of that day."""
    host_series = select(series.c.id).where(series.c.host == host)
    cutoffs = (
        (MINUTE, now - minute_keep),
        (HOUR, now - hour_keep),
        (DAY, day_floor(now - hour_keep)),
    )
    for resolution, cutoff in cutoffs:
        for rolled in (rollups, histogram_rollups):  # through the key, series by series
            conn.execute(
                delete(rolled).where(
                    rolled.c.series_id.in_(host_series),
                    rolled.c.resolution == resolution,
                    rolled.c.start < cutoff,
                )
            )
        for table in (gpu_usage, gpu_allocations, gpu_pod_allocations, gpu_mig_usage):
            conn.execute(
                delete(table).where(
                    table.c.host == host, table.c.resolution == resolution, table.c.start < cutoff
                )
            )
