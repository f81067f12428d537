"""Benchmark: does one minute rollup run cost its own new minute, whatever the history and
the hosts beside it?

    python bench/rollup.py [--history-days 7] [--hosts 16] [--runs 8]

A daemon's rollup runs every minute for years, and in a fleet's database next to every other
host's: each run must cost its new minute, not the history before it nor the other hosts. The
fleet of bench/fleet.py (8 GPUs and two serving targets per host, ticks every 10 s as the
daemon's default) is loaded into a fresh SQLite database; host 0 is made steady (its minute and
hour watermarks ten minutes before the end, as a daemon that keeps up has them, and every
host's raw hours before that packed into chunks, as its rollup job has packed them; host 0's
packing timed per hour: the job's extra work once an hour); then its real rollup job, metering
the cost ledger, rolls up one new minute per run. Three databases:

- 1 host with 1 hour of raw history (the baseline);
- 1 host with ``--history-days`` of it;
- ``--hosts`` hosts with 1 hour each.

Per database: the first run (no carried baselines: each series' baseline looked up in the raw
samples once, as on a first start), the median of ``--runs`` steady runs after it, and as the
floor, in the same run, a bare read of the same new minute's raw rows of host 0 (what no rollup
can do without). Target: steady runs flat (within 1.5 x the baseline's median, this machine's
noise) with days of history and with many hosts.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sqlalchemy import Engine, insert, select  # noqa: E402

from agent.cost.metering import metered_rollup  # noqa: E402
from agent.storage import raw  # noqa: E402
from agent.storage.db import open_database, upgrade_database  # noqa: E402
from agent.storage.rollup import COMPACT, MINUTE, bucket_of  # noqa: E402
from bench.common import verdict  # noqa: E402
from bench.fleet import GPUS_PER_HOST, T0, Fleet, build_fleet, load, rate_card  # noqa: E402
from migrations.schema import rollup_state, samples, series  # noqa: E402

STEP = 10.0  # the daemon's default tick
FLAT = 1.5  # a steady run's median against the baseline's: this machine's run-to-run noise
HOUR_OF_HISTORY = 1 / 24


def scenario(days: float, hosts: int) -> Fleet:
    return build_fleet(days, GPUS_PER_HOST * hosts, 2 * hosts, STEP)


def steady(engine: Engine, host: str, end: datetime) -> datetime:
    """Watermarks as a daemon that keeps up has them, ten minutes before ``end``."""
    mark = bucket_of(end - timedelta(minutes=10), MINUTE)
    hour = mark.replace(minute=0, second=0, microsecond=0)
    with engine.begin() as conn:
        conn.execute(
            insert(rollup_state),
            [{"host": host, "job": "minute", "watermark": mark},
             {"host": host, "job": "hour", "watermark": hour}],
        )  # fmt: skip
    return mark


def pack_history(engine: Engine, hosts: list[str], mark: datetime) -> list[float]:
    """Pack every host's raw rows of the hours before ``mark`` into chunks, as a daemon that
    keeps up has them (its rollup packs each hour once it is rolled up); returns the seconds
    each of host 0's hours took to pack (the rollup job's extra work once an hour)."""
    per_block: list[float] = []
    for number, host in enumerate(hosts):
        mine = select(series.c.id).where(series.c.host == host)
        with engine.connect() as conn:
            start = raw.first_head_ts(conn, mine)
        while start is not None and start < raw.block_of(mark):
            begin = time.perf_counter()
            with engine.begin() as conn:
                start = raw.compact(conn, mine, start, min(start + raw.BLOCK, mark))
            if number == 0:
                per_block.append(time.perf_counter() - begin)
        if start is not None:
            with engine.begin() as conn:
                conn.execute(insert(rollup_state).values(host=host, job=COMPACT, watermark=start))
    return per_block


def floor(engine: Engine, host: str, start: datetime) -> float:
    """Seconds to read one minute of the host's raw rows through the (series, time) key."""
    mine = select(series.c.id).where(series.c.host == host)
    query = select(samples.c.series_id, samples.c.ts, samples.c.value).where(
        samples.c.series_id.in_(mine),
        samples.c.ts > start,
        samples.c.ts <= start + timedelta(seconds=MINUTE),
    )
    begin = time.perf_counter()
    with engine.connect() as conn:
        conn.execute(query).all()
    return time.perf_counter() - begin


def measure(label: str, days: float, hosts: int, runs: int, folder: Path) -> float:
    fleet = scenario(days, hosts)
    url = f"sqlite:///{folder / f'{hosts}-{days:.4f}.db'}"
    upgrade_database(url)
    engine = open_database(url)
    began = time.perf_counter()
    rows = load(engine, fleet)
    loaded = time.perf_counter() - began
    host = fleet.hosts[0]
    end = T0 + timedelta(seconds=fleet.ticks * fleet.step)
    mark = steady(engine, host, end)
    packing = pack_history(engine, list(fleet.hosts), mark)
    job = metered_rollup(
        engine, host, rate_card(fleet, max(int(days), 1)), STEP,
        raw_retention=timedelta(days=days + 2), settle=timedelta(0),
    )  # fmt: skip
    times, floors = [], []
    for i in range(runs + 1):
        start = mark + timedelta(seconds=MINUTE * i)
        if start.minute == 0 and i:  # keep the hour rollup out: one minute per run, no more
            continue
        floors.append(floor(engine, host, start))
        begin = time.perf_counter()
        result = job.run(start + timedelta(seconds=MINUTE + 2 * STEP + 1))
        times.append(time.perf_counter() - begin)
        assert result.minutes >= 1, result
    engine.dispose()
    steady_median = statistics.median(times[1:])
    packed = f"{statistics.median(packing) * 1e3:6.1f} ms" if packing else "     -   "
    print(
        f"{label:<38} {rows:>10,} raw rows (load {loaded:5.1f} s)  first {times[0] * 1e3:7.1f} ms"
        f"  steady median {steady_median * 1e3:6.1f} ms"
        f"  floor {statistics.median(floors) * 1e3:5.2f} ms  packing an hour {packed}"
    )
    return steady_median


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--history-days", type=float, default=7.0)
    parser.add_argument("--hosts", type=int, default=16)
    parser.add_argument("--runs", type=int, default=8, help="steady runs timed per database")
    args = parser.parse_args()
    print(f"one new minute per run, host 0 of 8 GPUs and 2 targets, ticks every {STEP:.0f} s")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        base = measure("baseline: 1 host, 1 hour of history", HOUR_OF_HISTORY, 1, args.runs, folder)
        days = measure(f"1 host, {args.history_days:g} days of history", args.history_days, 1,
                       args.runs, folder)  # fmt: skip
        hosts = measure(f"{args.hosts} hosts, 1 hour of history each", HOUR_OF_HISTORY,
                        args.hosts, args.runs, folder)  # fmt: skip
    worst = max(days, hosts) / base
    print(f"target: steady run flat, <= {FLAT:g} x the baseline's -> history {days / base:.2f} x, "
          f"hosts {hosts / base:.2f} x, {verdict(worst <= FLAT)}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
