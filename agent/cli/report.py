"""`gpuwatch report`: what a period cost, per model, host and GPU, in the format asked for.

    gpuwatch report [--month [YYYY-MM] | --last-month | --week | --from DATE --to DATE]
                    [--host NAME]... [--model NAME]... [--format FORMAT] [--output FILE]

The default period is the current month to date, cut in the configured timezone. The lead's CLI
registers the command with ``add_parser`` and dispatches to ``run``; an argument that cannot be
used raises :class:`ReportArgumentError` naming it (exit 1 with the message).
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from agent.reporting.formats import DAILY_FORMATS, FORMATS
from foundation.errors import GpuwatchError

if TYPE_CHECKING:
    from agent.config.settings import Config
    from agent.reporting.model import Period

# report_period's ValueErrors start with the parameter's name; users know the flag.
_FLAGS = {"month": "--month", "start": "--from", "end": "--to"}
_CURRENT_MONTH = ""  # --month without a value


class ReportArgumentError(GpuwatchError):
    """An argument of `gpuwatch report` that cannot be used; the message names it."""


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    report = sub.add_parser(
        "report",
        help="cost, usage, waste and latency over a period (table, JSON, CSV, markdown, HTML)",
        description="What a period cost: spend by source, cost per million useful tokens per "
        "model and host (with the change vs the previous period), GPU time and idle cost, "
        "latency, alerts, queue incidents, budget and recommendations. Periods are cut in the "
        "configured timezone; the default is the current month to date.",
    )
    add_period_arguments(report)
    report.add_argument(
        "--host",
        action="append",
        default=[],
        metavar="NAME",
        help="only this host (repeatable)",
    )
    report.add_argument(
        "--model",
        action="append",
        default=[],
        metavar="NAME",
        help="only this model (repeatable)",
    )
    report.add_argument(
        "--format", choices=FORMATS, default="table", help="output format (default: table)"
    )
    report.add_argument(
        "--output", metavar="FILE", help="write the report to FILE instead of standard output"
    )
    report.add_argument("--config", metavar="PATH", help="TOML file (default as for `run`)")


def add_period_arguments(parser: argparse.ArgumentParser) -> None:
    """The period flags of `report`, which `export focus` takes too (read with
    :func:`choose_period`)."""
    period = parser.add_mutually_exclusive_group()
    period.add_argument(
        "--month",
        nargs="?",
        const=_CURRENT_MONTH,
        metavar="YYYY-MM",
        help="a calendar month (without a value: the current month to date)",
    )
    period.add_argument("--last-month", action="store_true", help="the last complete month")
    period.add_argument("--week", action="store_true", help="the current ISO week to date")
    period.add_argument(
        "--from",
        dest="start",
        metavar="DATE",
        help="start of a range, YYYY-MM-DD (local midnight) or an ISO datetime; needs --to",
    )
    parser.add_argument(
        "--to", dest="end", metavar="DATE", help="end of the range, exclusive; needs --from"
    )


def run(args: argparse.Namespace, config: Config, now: datetime) -> int:
    period = choose_period(args, now, config.timezone)
    text = report_text(config, period, now, tuple(args.host), tuple(args.model), args.format)
    if args.output is None:
        sys.stdout.write(text)
        return 0
    path = Path(args.output)
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise ReportArgumentError(f"--output: cannot write {path}: {exc.strerror}") from None
    # A note, not the report: stdout stays clean for whoever pipes the command.
    print(f"gpuwatch: {args.format} report for {period.label} written to {path}", file=sys.stderr)
    return 0


def report_text(
    config: Config,
    period: Period,
    now: datetime,
    hosts: tuple[str, ...] = (),
    models: tuple[str, ...] = (),
    fmt: str = "json",
) -> str:
    """The report of ``period`` rendered in ``fmt``, as `gpuwatch report` prints it (the MCP
    server's `report` tool answers the same); a host or model the database never saw is refused
    by name."""
    # Imported here: the report's queries are not the daemon's (`gpuwatch run` parses the same
    # command line), and they are megabytes of its memory (bench/memory.py).
    from agent.cli.report_filters import check_filters
    from agent.reporting.build import build_report
    from agent.reporting.render.dispatch import render
    from agent.storage.db import open_database

    engine = open_database(config.database_url)
    try:
        check_filters(engine, list(hosts), list(models))
        report = build_report(
            engine, config, period, now=now, hosts=hosts, models=models,
            daily=fmt in DAILY_FORMATS,
        )  # fmt: skip
    finally:
        engine.dispose()
    return render(report, fmt)


def choose_period(args: argparse.Namespace, now: datetime, zone: str) -> Period:
    """The period the flags ask for (argparse has already refused two period choices)."""
    from agent.reporting.period import (
        last_month_period,
        month_period,
        range_period,
        week_period,
    )

    if (args.start is None) != (args.end is None):
        given, missing = ("--from", "--to") if args.end is None else ("--to", "--from")
        raise ReportArgumentError(
            f"{given}: a range needs both --from and --to ({missing} missing)"
        )
    try:
        if args.start is not None:
            return range_period(args.start, args.end, zone)
        if args.last_month:
            return last_month_period(now, zone)
        if args.week:
            return week_period(now, zone)
        return month_period(args.month or None, now, zone)
    except ValueError as exc:
        raise ReportArgumentError(_flag_message(str(exc))) from None


def _flag_message(message: str) -> str:
    name, sep, rest = message.partition(": ")
    return f"{_FLAGS[name]}: {rest}" if sep and name in _FLAGS else message
