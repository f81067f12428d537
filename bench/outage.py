"""Benchmark: a PostgreSQL stopped for minutes under a running daemon (issue 12's acceptance).

    python bench/outage.py [--outage-minutes 10] [--interval 2] [--before-minutes 3]

The real daemon (`gpuwatch run`, direct mode: `database_url` is a PostgreSQL of this run's own,
tests/agent/own_postgres.py) at 2 s ticks over 8 fake GPUs at $2.72/h each. After
``--before-minutes`` the server is stopped for ``--outage-minutes``, then started again; the
bench waits until the spool is forwarded and the rollup has covered the outage, then asks what
a user asks: `gpuwatch report --from --to --format json` over the whole minutes of the outage.

Printed: rounds stored during the outage against the ticks expected, the largest gap between
stored ticks, duplicates, how long the spool took to forward, and the report's GPU hours and
metered cost over the outage against the truth (8 GPUs x the window). Baseline in the same
run: the same report over the whole minutes stored before the outage (up to its length), when
nothing failed; the report rounds GPU hours to 0.01 h and money to the cent.
Target (issue 12): the outage's GPU time and cost within 1 % of the truth, nothing doubled.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.tick import fake_library, hardware  # noqa: E402
from tests.agent.daemon_harness import RunningDaemon, free_port, start_daemon  # noqa: E402
from tests.agent.own_postgres import OwnPostgres, wait_until  # noqa: E402
from tests.fakenvml.build import write_config  # noqa: E402

PRICE = 2.72
GPUS = 8


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--outage-minutes", type=float, default=10.0)
    parser.add_argument("--before-minutes", type=float, default=3.0)
    parser.add_argument("--interval", type=float, default=2.0)
    parser.add_argument(
        "--mode", choices=("stop", "pause"), default="stop",
        help="stop the server (pg_ctl stop -m fast) or pause it (SIGSTOP every process)",
    )  # fmt: skip
    args = parser.parse_args()
    server = OwnPostgres.create()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            return run(Path(tmp), server, args)
    finally:
        server.close()


def run(work: Path, server: OwnPostgres, args: argparse.Namespace) -> int:
    from agent.storage.db import upgrade_database

    upgrade_database(server.url)
    port = free_port()
    config = work / "gpuwatch.toml"
    config.write_text(
        f'host = "box"\ndatabase_url = "{server.url}"\n'
        f'[daemon]\ninterval_seconds = {args.interval}\nmetrics_listen = "127.0.0.1:{port}"\n'
        f'[[rates]]\ngpu = "*"\nusd_per_hour = {PRICE}\n'
    )
    env = {
        "LD_LIBRARY_PATH": str(fake_library(work)),
        "FAKE_NVML_CONFIG": str(write_config(work / "hardware.txt", hardware())),
        "STATE_DIRECTORY": str(work / "state"),
    }
    daemon = start_daemon(config, work, port, env)
    try:
        daemon.wait_for_metric("gpuwatch_gpu_utilization_ratio", timeout=60)
        started = datetime.now(UTC)
        time.sleep(args.before_minutes * 60)
        down = datetime.now(UTC)
        server.stop() if args.mode == "stop" else server.pause()
        print(f"{down:%H:%M:%S} PostgreSQL: {args.mode} for {args.outage_minutes:g} min",
              flush=True)  # fmt: skip
        changes = watch(daemon, args.outage_minutes * 60)
        server.start() if args.mode == "stop" else server.resume()
        up = datetime.now(UTC)
        print(f"{up:%H:%M:%S} PostgreSQL back", flush=True)
        print(f"/metrics during the outage: {changes[0]} reads, the spooled count changed "
              f"{changes[1]} times, slowest answer {changes[2] * 1000:.0f} ms")  # fmt: skip
        drained = wait_until(lambda: spool_rounds(daemon) == 0, timeout=600, step=1.0)
        forwarded_in = (datetime.now(UTC) - up).total_seconds()
        # The rollup closes a minute 2 minutes after its end, once a minute.
        time.sleep(240)
        window = (minute_after(down), minute_before(up))
        # The whole minutes the daemon stored before the outage, at most as long as it.
        before = (max(minute_after(started), minute_before(down) - (window[1] - window[0])),
                  minute_before(down))  # fmt: skip
        if window[1] <= window[0]:
            raise SystemExit("the outage spans no whole minute: make it longer")
        outage = report(config, env, *window)
        baseline = report(config, env, *before) if before[1] > before[0] else None
    finally:
        daemon.stop(timeout=30)
        daemon.kill()
    ticks = stored_ticks(server, down, up)
    expected = (up - down).total_seconds() / args.interval
    gaps = [(b - a).total_seconds() for a, b in zip(ticks, ticks[1:], strict=False)]
    print(f"spool forwarded: {drained} in {forwarded_in:.0f} s after the server came back")
    doubled, gap = len(ticks) - len(set(ticks)), max(gaps, default=0.0)
    print(f"rounds stored during the outage: {len(ticks)} of ~{expected:.0f} ticks; "
          f"duplicates {doubled}; largest gap {gap:.1f} s")  # fmt: skip
    for name, (start, end), figures in (
        ("baseline: before the outage", before, baseline),
        ("the outage", window, outage),
    ):
        if figures is None:
            print(f"{name}: no whole minute stored (a longer --before-minutes)")
            continue
        hours = (end - start).total_seconds() / 3600 * GPUS
        gpu_hours, cost = figures
        print(f"{name:28s} {start:%H:%M}-{end:%H:%M}: GPU hours {gpu_hours:.4f} of {hours:.4f} "
              f"({100 * (gpu_hours / hours - 1):+.2f} %), metered ${cost:.4f} of "
              f"${hours * PRICE:.4f} ({100 * (cost / (hours * PRICE) - 1):+.2f} %)")  # fmt: skip
    print(daemon.log().count("Traceback"), "tracebacks in the daemon's log")
    return 0


def spool_rounds(daemon: RunningDaemon) -> bool | float:
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(daemon.metrics()):
        for sample in family.samples:
            if sample.name == "gpuwatch_spool_rounds":
                return float(sample.value)
    return -1.0


def watch(daemon: RunningDaemon, seconds: float) -> tuple[int, int, float]:
    """Read /metrics every second: (reads, times the spooled count changed, slowest read)."""
    reads, changed, slowest, last = 0, 0, 0.0, None
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        started = time.monotonic()
        value = spool_rounds(daemon)
        slowest = max(slowest, time.monotonic() - started)
        reads, changed, last = reads + 1, changed + (value != last), value
        time.sleep(1.0)
    return reads, changed, slowest


def minute_after(at: datetime) -> datetime:
    return at.replace(second=0, microsecond=0) + timedelta(minutes=1)


def minute_before(at: datetime) -> datetime:
    return at.replace(second=0, microsecond=0)


def report(
    config: Path, env: dict[str, str], start: datetime, end: datetime
) -> tuple[float, float]:
    command = [sys.executable, "-m", "agent.cli.main", "--log-level", "WARNING", "report",
               "--config", str(config), "--format", "json",
               "--from", start.isoformat(), "--to", end.isoformat()]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, check=False, cwd=REPO,
                          env={**os.environ, **env})  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"gpuwatch report failed: {done.stderr.strip()}")
    totals = json.loads(done.stdout)["totals"]
    return float(totals["gpu_hours"]), float(totals["metered_usd"])


def stored_ticks(server: OwnPostgres, start: datetime, end: datetime) -> list[datetime]:
    from sqlalchemy import create_engine, text

    engine = create_engine(server.url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                text("SELECT ts FROM collector_runs WHERE collector = 'nvml' AND ts >= :a "
                     "AND ts <= :b ORDER BY ts"), {"a": start, "b": end},
            )  # fmt: skip
            return [r[0] for r in rows]
    finally:
        engine.dispose()


if __name__ == "__main__":
    sys.exit(main())
