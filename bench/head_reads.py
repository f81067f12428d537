"""Benchmark: does a tick's window read get dearer as the head and the chunks grow?

    python bench/head_reads.py [--repeat 7]

A window read (``Store.points_of``: each series' last point at or before the window's start,
then the points inside it) is what the alert inputs do on every tick that reads the latency
windows: 5 minutes of every latency histogram's buckets. Its cost should follow the window,
not how much the head holds or how many hours are packed behind it.

The box of bench/storage.py ticked by the daemon's own App at 1 s for 3 minutes of simulated
time on SQLite, its head extended by SQL to 70 minutes (bench/pack_memory.py). Measured, the
median of ``--repeat`` reads:

- in the head, with the window ending 10, 40 and 70 minutes into it (a 1 s daemon holds up to
  about 70 minutes before packing an hour: ``Rollup.head_reach``);
- after the first hour is packed, with 1 and with 168 hours of chunks behind the window (a
  week, the raw retention; the older chunks are copies of the first, moved back in time).

Each next to its baseline in the same run: the last-point query before this change, kept here
(``MAX(ts) ... GROUP BY series_id``, which SQLite answers by reading every row of each group).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.pack_memory import make_box  # noqa: E402

HEAD_MINUTES = 70.0
WINDOW = timedelta(minutes=5)
Reader = Callable[[Any, list[int], datetime], Any]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    from agent.storage import raw
    from agent.storage.db import create_engine

    with tempfile.TemporaryDirectory() as tmp:
        db, rows = make_box(Path(tmp), HEAD_MINUTES)
        engine = create_engine(f"sqlite:///{db}", 5.0)
        with engine.connect() as conn:
            ids, first, last = _latency_series(conn)
        print(
            f"{len(ids)} latency bucket series of a 1 s box, {rows:,} head rows "
            f"({HEAD_MINUTES:g} minutes); a 5-minute window read, median of {args.repeat}:"
        )
        with engine.connect() as conn:
            for minutes in (10, 40, 70):
                end = min(first + timedelta(minutes=minutes), last)
                _line(f"head, window ending at {minutes} min", conn, ids, end, args.repeat)
        _pack_first_hour(engine, first, last)
        end = raw.block_of(first) + raw.BLOCK + timedelta(minutes=6)
        with engine.connect() as conn:
            _line("1 hour of chunks behind it", conn, ids, end, args.repeat)
        _copy_chunks_back(engine, raw.block_of(first), 167)
        with engine.connect() as conn:
            _line("168 hours of chunks behind it", conn, ids, end, args.repeat)
        engine.dispose()
    return 0


def _latency_series(conn: Any) -> tuple[list[int], datetime, datetime]:
    from sqlalchemy import func, select

    from agent.alerting.inputs import LATENCY_METRICS
    from migrations.schema import samples, series

    names = [m + suffix for m in LATENCY_METRICS.values() for suffix in ("_bucket", "_created")]
    ids = list(conn.execute(select(series.c.id).where(series.c.metric.in_(names))).scalars())
    first, last = conn.execute(select(func.min(samples.c.ts), func.max(samples.c.ts))).one()
    return ids, first, last


def _line(name: str, conn: Any, ids: list[int], end: datetime, repeat: int) -> None:
    now = _median(_window_read, conn, ids, end, repeat)
    before = _median(_window_read_grouped, conn, ids, end, repeat)
    print(
        f"  {name:34s} {now * 1e3:7.1f} ms   baseline (GROUP BY max): {before * 1e3:7.1f} ms"
        f"   ({before / now:.1f} x)"
    )


def _median(read: Reader, conn: Any, ids: list[int], end: datetime, repeat: int) -> float:
    took = []
    for _ in range(repeat):
        began = time.perf_counter()
        read(conn, ids, end)
        took.append(time.perf_counter() - began)
    return statistics.median(took)


def _window_read(conn: Any, ids: list[int], end: datetime) -> Any:
    """As ``Store.points_of``: the baselines, then the window."""
    from agent.storage import raw

    return raw.last_at_or_before(conn, ids, end - WINDOW), raw.read(conn, ids, end - WINDOW, end)


def _window_read_grouped(conn: Any, ids: list[int], end: datetime) -> Any:
    from agent.storage import raw

    saved = raw._newest_per_series
    raw._newest_per_series = _newest_grouped
    try:
        return _window_read(conn, ids, end)
    finally:
        raw._newest_per_series = saved


def _newest_grouped(sid: Any, time: Any, ids: Any, at: datetime, since: datetime | None) -> Any:
    """The baseline: the latest time per series by MAX ... GROUP BY (the code before)."""
    from sqlalchemy import func, select

    bounds = [sid.in_(ids), time <= at]
    if since is not None:
        bounds.append(time > since)
    return (
        select(sid.label("sid"), func.max(time).label("at")).where(*bounds).group_by(sid).subquery()
    )


def _pack_first_hour(engine: Any, first: datetime, last: datetime) -> None:
    from agent.storage import raw
    from agent.storage.rollup import Rollup

    rollup = Rollup(engine, "bench-box", 1.0)
    rollup._compact(raw.block_of(first) + raw.BLOCK + timedelta(seconds=rollup.max_gap + 1))


def _copy_chunks_back(engine: Any, block: datetime, hours: int) -> None:
    from sqlalchemy import text

    from migrations.schema import to_micros

    micros = to_micros(block)
    with engine.begin() as conn:
        for k in range(1, hours + 1):
            conn.execute(
                text(
                    "INSERT INTO sample_chunks (series_id, start, count, data) "
                    "SELECT series_id, start - :shift, count, data FROM sample_chunks "
                    "WHERE start = :block"
                ),
                {"shift": k * 3_600_000_000, "block": micros},
            )


if __name__ == "__main__":
    sys.exit(main())
