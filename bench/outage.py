"""Benchmark: what does a database outage under the running daemon cost its record, and how
long an outage does the spool hold?

    python bench/outage.py [--outage-minutes 10] [--before-minutes 3] [--interval 2]
                           [--mode stop|pause] [--rounds 30]

1. The spool, in-process: the box of bench/box.py (8 fake GPUs, 2 vLLM 0.33 targets of 2 models
   x 2 data-parallel engines, every histogram) collected by the real ``App`` for ``--rounds``
   rounds of 10 s simulated time; each round encoded as the spool stores it
   (``agent.storage.spool.encode``: compressed JSON), next to the baseline: the same rounds as
   plain JSON. Printed: bytes a round, a spooled hour at 10 s and at 1 s ticks, and the hours
   the default ``[spool] max_bytes`` holds.
2. The outage: the real daemon (``gpuwatch run``, direct mode: ``database_url`` is a PostgreSQL
   server of this run's own, started with Debian's binaries; skipped without them) at
   ``--interval`` s ticks over 8 fake GPUs at $2.72/h each. After ``--before-minutes`` the
   server is stopped (``pg_ctl stop -m fast``; ``--mode pause``: SIGSTOP to every server
   process, so connections hang) for ``--outage-minutes``, then started again; once the spool
   is forwarded, ``gpuwatch report --from --to --format json`` over the outage (its whole
   minutes; a shorter outage, its exact span, whose edges may be off by up to a tick each).
   Printed: rounds stored during the outage against the ticks expected, duplicates, the
   largest gap, how long the spool took to forward, and the report's GPU hours and metered
   cost against the truth (8 GPUs x the window). Baseline, in the same run: the same report
   over as long a span stored before the outage, when nothing failed (the report rounds GPU
   hours to 0.01 h and money to the cent). Target: the outage's GPU time and cost within 1 %
   of the truth, nothing doubled.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from agent.storage.db import upgrade_database  # noqa: E402
from bench import box  # noqa: E402
from bench.common import busy_gpus, free_port, nvml_env, verdict  # noqa: E402
from tests.agent.daemon_harness import RunningDaemon, start_daemon  # noqa: E402
from tests.agent.own_postgres import OwnPostgres, pg_bin, wait_until  # noqa: E402

PRICE = 2.72
GPUS = 8


def spool(rounds: int) -> None:
    """What the spool holds per round, next to the same rounds as plain JSON."""
    from agent.collect.runner import Round
    from agent.config.spool import DEFAULT_MAX_BYTES
    from agent.daemon.app import App
    from agent.storage.spool import encode

    def plain(round_: Round) -> int:
        rows = [[s.metric, s.labels, s.value, s.ts.isoformat()] for _, s in round_.tagged_samples()]
        return len(json.dumps(rows))

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        box.load_box_nvml(folder)
        clock = box.SimClock()
        with box.engine_servers(clock) as servers:
            url = f"sqlite:///{folder / 'spool.db'}"
            upgrade_database(url)
            app = App.open(box.load_box_config(folder, url, [s.url for s in servers]))
            packed, baseline, samples = [], [], []
            for i in range(rounds):
                clock.now = box.T0 + timedelta(seconds=10 * i)
                for server in servers:
                    box.drive(server.traffic, i)
                round_ = app.tick(clock.now)
                packed.append(len(encode(round_)))
                baseline.append(plain(round_))
                samples.append(len(round_.tagged_samples()))
            app.close()
    per_round, base = statistics.median(packed), statistics.median(baseline)
    print(f"spool: {rounds} rounds of the box, {statistics.median(samples):.0f} samples a round")
    print(f"  baseline: plain JSON     {base:9,.0f} bytes a round")
    print(f"  spool: compressed JSON   {per_round:9,.0f} bytes a round ({base / per_round:.0f} x "
          "smaller)")  # fmt: skip
    for interval in (10.0, 1.0):
        hourly = per_round * 3600 / interval
        print(f"  at {interval:g} s ticks: {hourly / 1e6:6.1f} MB an hour; the default "
              f"{DEFAULT_MAX_BYTES / 2**20:.0f} MiB spool holds {DEFAULT_MAX_BYTES / hourly:6.1f} "
              "hours")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--outage-minutes", type=float, default=10.0)
    parser.add_argument("--before-minutes", type=float, default=3.0)
    parser.add_argument("--interval", type=float, default=2.0, help="the daemon's tick (s)")
    parser.add_argument(
        "--mode", choices=("stop", "pause"), default="stop",
        help="stop the server (pg_ctl stop -m fast) or pause it (SIGSTOP every process)",
    )  # fmt: skip
    parser.add_argument("--rounds", type=int, default=30, help="rounds the spool part encodes")
    args = parser.parse_args()
    spool(args.rounds)
    if pg_bin() is None:
        print("skipped: the outage needs PostgreSQL's server binaries (Debian's postgresql)")
        return 0
    server = OwnPostgres.create()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            return run(Path(tmp), server, args)
    finally:
        server.close()


def run(work: Path, server: OwnPostgres, args: argparse.Namespace) -> int:
    upgrade_database(server.url)
    port = free_port()
    config = work / "gpuwatch.toml"
    config.write_text(
        f'host = "box"\ndatabase_url = "{server.url}"\n'
        f'[daemon]\ninterval_seconds = {args.interval}\nmetrics_listen = "127.0.0.1:{port}"\n'
        f'[[rates]]\ngpu = "*"\nusd_per_hour = {PRICE}\n'
    )
    env = {**nvml_env(work, busy_gpus()), "STATE_DIRECTORY": str(work / "state")}
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
        # Minutes the rollup has not closed yet (it waits 2 minutes) are rolled up for the
        # report as it asks, as for any user asking right after.
        window, end = (minute_after(down), minute_before(up)), minute_before(down)
        if window[1] <= window[0]:  # no whole minute: the outage's own span, to the second
            window = (down.replace(microsecond=0) + timedelta(seconds=1),
                      up.replace(microsecond=0))  # fmt: skip
            end = down.replace(microsecond=0)
        # As long a span stored before the outage (or as much of it as was stored), ending at
        # the last whole minute (or second) before it.
        first = started.replace(microsecond=0) + timedelta(seconds=1)
        before = (max(first, end - (window[1] - window[0])), end)
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
            print(f"{name}: nothing stored before it to compare (a longer --before-minutes)")
            continue
        hours = (end - start).total_seconds() / 3600 * GPUS
        gpu_hours, cost = figures
        print(f"{name:28s} {start:%H:%M:%S}-{end:%H:%M:%S}: GPU hours {gpu_hours:.4f} of "
              f"{hours:.4f} "
              f"({100 * (gpu_hours / hours - 1):+.2f} %), metered ${cost:.4f} of "
              f"${hours * PRICE:.4f} ({100 * (cost / (hours * PRICE) - 1):+.2f} %)")  # fmt: skip
    print(daemon.log().count("Traceback"), "tracebacks in the daemon's log")
    if outage is not None:
        hours = (window[1] - window[0]).total_seconds() / 3600 * GPUS
        worst = max(abs(outage[0] / hours - 1), abs(outage[1] / (hours * PRICE) - 1))
        # The report rounds to 0.01 GPU hour and to the cent: a short outage is judged within
        # that rounding where it is more than 1 %.
        within = max(0.01, 0.005 / hours, 0.005 / (hours * PRICE))
        ok = worst <= within and not doubled
        print(f"target: the outage's GPU hours and cost within {within:.1%} of the truth (1 %, "
              f"or the report's rounding), nothing doubled -> {worst:.2%}, {doubled} doubled, "
              f"{verdict(ok)}")  # fmt: skip
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
