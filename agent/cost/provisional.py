"""What a reader sees of a window: every stored sample, not only what the minute job rolled up.

The minute job rolls a minute up once it has settled (two minutes after its end), and every
reader of months sums rollup rows. So a report asked right after a run showed nothing of it,
and a window starting or ending inside a minute dropped that minute's part. Here, inside the
reader's own transaction, which it rolls back, each host's rollup is brought up to date
(:meth:`agent.storage.rollup.Rollup.provisional`): the minutes since its watermark and the
window's edge minutes, cut to the window, rolled up and priced as the minute job would. The
reader then sums rows as always; nothing is committed, so the minute job later writes the
settled rows itself.

On a fleet's central database (agent/storage/forward) raw samples and collector runs never
arrive: there is nothing to bring up to date, and the rows stop at what each host forwarded.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import Connection, Engine, func, select
from sqlalchemy.exc import DBAPIError

from agent.config.settings import Config
from agent.cost.carbon import co2_of
from agent.cost.metering import metered_rollup
from agent.cost.ratecard import RateCard
from agent.storage.buckets import DAY, HOUR, MINUTE
from migrations.schema import collector_runs, gpu_usage

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Coverage:
    """The window to sum rows over, and the stored data it holds.

    ``window``: the asked window, widened to whole minutes where an edge minute was cut to
    it. ``first`` and ``last``: the earliest and latest instants with data in the asked
    window (the ledger's rows, and each host's last stored tick), None when it has none."""

    window: tuple[datetime, datetime]
    first: datetime | None
    last: datetime | None


@contextmanager
def reading(
    engine: Engine,
    config: Config,
    hosts: Collection[str],
    window: tuple[datetime, datetime],
    *,
    fresh: bool = True,
) -> Iterator[tuple[Connection, Coverage]]:
    """A connection whose rollups are brought up to date for ``window`` (see
    :func:`up_to_date`), and what it covers; rolled back on exit, so nothing is written. A
    database this reader may not write to (a read-only role) gives the rows as stored, and so
    does ``fresh=False`` (the settled rows alone: the migration tests compare those with
    figures recorded from a database of an older schema)."""
    with engine.connect() as conn:
        scratch = conn.begin()
        coverage = None
        if fresh:
            try:
                coverage = up_to_date(conn, config, hosts, window)
            except DBAPIError as exc:
                scratch.rollback()
                cause = str(getattr(exc, "orig", exc)).splitlines()[0]
                log.warning("reading the rollups as the minute job left them: %s", cause)
                scratch = conn.begin()
        if coverage is None:
            coverage = Coverage(window, *_extent(conn, hosts, *window))
        try:
            yield conn, coverage
        finally:
            scratch.rollback()


def up_to_date(
    conn: Connection, config: Config, hosts: Collection[str], window: tuple[datetime, datetime]
) -> Coverage:
    """Bring the rollups of ``hosts`` (empty: every host with stored ticks) up to date for
    ``window`` on ``conn``, which must be inside a transaction its caller rolls back."""
    start, end = window
    read = window
    ticks = _last_ticks(conn, hosts)
    for host in sorted(ticks):
        rollup = metered_rollup(
            conn.engine, host, RateCard(config.rates), config.daemon.interval_seconds,
            config.cost.shared_gpu_split, co2_of(config.energy),
        )  # fmt: skip
        made = rollup.provisional(conn, window)
        read = (min(read[0], made.window[0]), max(read[1], made.window[1]))
    first, last = _extent(conn, hosts, *read)
    in_window = [t for t in ticks.values() if start <= t < end]
    if in_window:  # a stored tick is exact; the ledger knows whole minutes
        last = max(in_window)
    return Coverage(
        read,
        None if first is None else max(first, start),
        None if last is None else min(last, end),
    )


def _last_ticks(conn: Connection, hosts: Collection[str]) -> dict[str, datetime]:
    """Each host's last stored tick (through the (host, ts) index)."""
    c = collector_runs.c
    query = select(c.host, func.max(c.ts)).group_by(c.host)
    if hosts:
        query = query.where(c.host.in_(sorted(hosts)))
    return {host: ts for host, ts in conn.execute(query) if ts is not None}


def _extent(
    conn: Connection, hosts: Collection[str], start: datetime, end: datetime
) -> tuple[datetime | None, datetime | None]:
    """The first and last instants the cost ledger has rows for in [start, end): its finest
    rows there (minute rows are kept 90 days; older windows are known to the hour or day)."""
    t = gpu_usage.c
    for resolution in (MINUTE, HOUR, DAY):
        query = select(func.min(t.start), func.max(t.start)).where(
            t.resolution == resolution, t.start >= start, t.start < end
        )
        if hosts:
            query = query.where(t.host.in_(sorted(hosts)))
        first, last = conn.execute(query).one()
        if first is not None:
            return first, last + timedelta(seconds=resolution)
    return None, None
