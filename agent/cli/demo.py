"""`gpuwatch demo [--live]`: a simulated fleet's month through the real parts, then its report.

    gpuwatch demo [--days 30] [--state-dir DIR]
    gpuwatch demo --live [--metrics-port 9877] [--interval 10] [--days 30] [--state-dir DIR]

Writes the history into the demo's own database (agent.demo), prints the real ``report`` for
it, writes the HTML report and the digest preview (the real ``digest --dry-run``), and says
where everything is. ``--live`` then keeps the real daemon running on it until Ctrl-C.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import sys
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the command's modules are imported when it runs (`gpuwatch --help` is fast)
    from agent.config.settings import Config

DEFAULT_DAYS = 30
MAX_DAYS = 62  # minute rollups are kept 62 days: a longer history would lose its first days


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    demo = sub.add_parser(
        "demo",
        help="a simulated fleet's last month through gpuwatch, then its report (no GPU needed)",
        description="Simulates 2 hosts with 6 GPUs and 3 models on vLLM and SGLang over the "
        "last days, through gpuwatch's real collectors, store and rollups, into a demo "
        "database of its own; prints the report, writes the HTML report and a digest preview. "
        "--live then runs the real daemon on it against live simulators until Ctrl-C.",
    )
    demo.add_argument(
        "--days", type=_days, default=DEFAULT_DAYS, help=f"days of history (default {DEFAULT_DAYS})"
    )
    demo.add_argument(
        "--state-dir",
        metavar="DIR",
        help="the demo's folder (default: demo/ in gpuwatch's state directory)",
    )
    demo.add_argument(
        "--live",
        action="store_true",
        help="then run the daemon against live simulators until Ctrl-C/SIGTERM",
    )
    demo.add_argument(
        "--metrics-port",
        type=_port,
        default=9877,
        metavar="PORT",
        help="--live: /metrics port on 127.0.0.1 (0: any free one; default 9877)",
    )
    demo.add_argument(
        "--interval",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="--live: the daemon's tick (default 10)",
    )


def _days(text: str) -> int:
    value = int(text) if text.isdigit() else 0
    if not 1 <= value <= MAX_DAYS:
        raise argparse.ArgumentTypeError(f"expected whole days from 1 to {MAX_DAYS}, got {text!r}")
    return value


def _port(text: str) -> int:
    value = int(text) if text.isdigit() else -1
    if not 0 <= value < 65536:
        raise argparse.ArgumentTypeError(f"expected a port from 0 to 65535, got {text!r}")
    return value


def run(args: argparse.Namespace) -> int:
    from agent.collect.clock import utc_now
    from agent.demo import history, prepare
    from agent.demo.scenario import HOSTS
    from agent.demo.settings import DemoFiles, default_folder, read_config

    files = DemoFiles(Path(args.state_dir).resolve() if args.state_dir else default_folder())
    now = utc_now()
    month = prepare.month_ending(now, args.days)
    # The parts log as in a daemon (the restart's failed scrape, every alert): the report says
    # it all below, so the history is quiet but for errors of the demo itself.
    logging.disable(logging.ERROR)
    try:
        prepare.nvml(files)  # first: a missing compiler is said before anything is written
        prepare.fresh_database(files)
        started = time.monotonic()
        rounds = history.generate(files, month, progress=_progress_bar(), now=now)
        took = time.monotonic() - started
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM while simulating: stop, no traceback
        print("\ngpuwatch demo: interrupted; the demo database is incomplete", file=sys.stderr)
        return 130
    finally:
        logging.disable(logging.NOTSET)
    config = read_config(files, HOSTS[0])
    print(
        f"gpuwatch demo: {rounds} simulated rounds of {len(HOSTS)} hosts over {args.days} "
        f"day{'s' if args.days > 1 else ''} stored and rolled up in {took:.1f} s\n"
    )
    print(
        f"$ {_command()} report --config {files.config(HOSTS[0])} "
        f"--from {month.start:%Y-%m-%d} --to {now:%Y-%m-%dT%H:%M:%SZ}\n"
    )
    _report(config, month.start, now, "table", None)
    _report(config, month.start, now, "html", files.html_report)
    files.digest.write_text(_digest(config, now))
    print(f"\nThe demo's files ({files.folder}):")
    print(f"  HTML report     {files.html_report}")
    print(f"  digest preview  {files.digest}  (the Slack Block Kit payload of the last week)")
    print(f"  database        {files.database}  (simulated data, marked as a demo)")
    print(f"  look around     {_command()} report --config {files.config(HOSTS[0])} --week")
    sys.stdout.flush()
    if not args.live:
        return 0
    from agent.demo.live import run_live

    return run_live(
        files, month, metrics_port=args.metrics_port, interval_seconds=args.interval, announce=_say
    )


def _report(config: Config, start: datetime, now: datetime, fmt: str, output: Path | None) -> None:
    from agent.cli import report as report_cli

    args = argparse.Namespace(
        start=start.strftime("%Y-%m-%d"),
        end=now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        month=None,
        last_month=False,
        week=False,
        host=[],
        model=[],
        format=fmt,
        output=None if output is None else str(output),
    )
    with contextlib.redirect_stderr(io.StringIO()):  # its "written to" note: said below
        report_cli.run(args, config, now)


def _digest(config: Config, now: datetime) -> str:
    from agent.cli import digest as digest_cli

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        digest_cli.run(argparse.Namespace(send=False, dry_run=True), config, now)
    return out.getvalue()


def _command() -> str:
    """How this command was run (`make demo` runs .venv/bin/gpuwatch, not on the PATH)."""
    return sys.argv[0] if Path(sys.argv[0]).name == "gpuwatch" else "gpuwatch"


def _say(line: str) -> None:
    print(f"gpuwatch demo --live: {line}", flush=True)


def _progress_bar() -> Callable[[int, int], None] | None:
    """A bar on a terminal, nothing when stdout is a pipe or a file."""
    if not sys.stdout.isatty():
        return None

    def show(done: int, total: int) -> None:
        width = 40
        filled = width * done // total
        bar = "#" * filled + "." * (width - filled)
        end = "\n" if done == total else ""
        print(f"\rsimulating the fleet [{bar}] {100 * done // total:3d}%", end=end, flush=True)

    return show
