"""`gpuwatch export focus`: what gpuwatch metered over a period, as a FOCUS Cost and Usage CSV.

    gpuwatch export focus [--month [YYYY-MM] | --last-month | --week | --from DATE --to DATE]
                          [--granularity hour|day] [--focus-version 1.0|1.3] [--output FILE]

One row per GPU per UTC hour (or day) of the period (the periods of `gpuwatch report`, cut in
the configured timezone; default: this month to date), priced from the cost ledger. FOCUS 1.3
writes a GPU's row that serving targets used as its allocated charges instead (each target's
busy and idle time, and the time none held it), adding up to the same cost. The CSV
goes to standard output, or to FILE, written whole or not at all (a temporary file beside it,
renamed once complete). Notes (what was written, defaults taken, time no rate priced) go to
standard error, so the CSV can be piped.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from agent.cli.report import add_period_arguments, choose_period
from foundation.errors import GpuwatchError

if TYPE_CHECKING:
    from collections.abc import Callable

    from agent.config.settings import Config
    from agent.reporting.focus_charges import Charge
    from agent.reporting.focus_rows import Naming
    from agent.reporting.model import Period

# agent.reporting.focus_rows.VERSIONS, and 1.3 (agent.reporting.focus13_rows); not imported:
# the CLI starts fast. 1.0 stays the default: the FinOps Foundation's validator checks it here.
VERSIONS = ("1.0", "1.3")
DEFAULT_VERSION = "1.0"


class ExportError(GpuwatchError):
    """An export that cannot be written; the message names the flag or the file."""


@dataclass
class Written:
    rows: int = 0
    billed: Decimal = Decimal(0)
    unpriced_seconds: float = 0.0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    export = sub.add_parser("export", help="export what gpuwatch metered (FOCUS CSV)")
    kinds = export.add_subparsers(dest="export_kind", required=True, metavar="KIND")
    focus = kinds.add_parser(
        "focus",
        help="FOCUS Cost and Usage CSV of the metered GPU time, for FinOps tools",
        description="One row per GPU per hour (or day) of the period: GPU-hours metered and "
        "their cost at the rate card, the GPU UUID as ResourceId, host and models in Tags. "
        "Periods are cut in the configured timezone; the default is this month to date.",
    )
    add_period_arguments(focus)
    focus.add_argument(
        "--granularity",
        choices=("hour", "day"),
        default="hour",
        help="one row per GPU per UTC hour or UTC day (default: hour)",
    )
    focus.add_argument(
        "--focus-version",
        choices=VERSIONS,
        default=DEFAULT_VERSION,
        help=f"FOCUS version of the columns (default: {DEFAULT_VERSION}); 1.3 adds allocated "
        "rows per target (busy and idle) and the GPU time no target held",
    )
    focus.add_argument("--output", metavar="FILE", help="write to FILE, not standard output")
    focus.add_argument("--config", metavar="PATH", help="TOML file (default as for `run`)")


def run(args: argparse.Namespace, config: Config, now: datetime) -> int:
    period = choose_period(args, now, config.timezone)
    if args.output is None:
        written = _export(config, period, args, sys.stdout)
    else:
        written = _to_file(Path(args.output), config, period, args)
    _notes(written, config, period, args)
    return 0


def _to_file(path: Path, config: Config, period: Period, args: argparse.Namespace) -> Written:
    partial = path.with_name(f".{path.name}.partial")
    try:
        with partial.open("w", encoding="utf-8", newline="") as out:
            written = _export(config, period, args, out)
        partial.replace(path)
    except OSError as exc:
        partial.unlink(missing_ok=True)
        raise ExportError(f"--output: cannot write {path}: {exc.strerror or exc}") from None
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return written


def _export(config: Config, period: Period, args: argparse.Namespace, out: TextIO) -> Written:
    import csv

    from agent.cost.provisional import reading
    from agent.reporting.focus_charges import charges
    from agent.reporting.focus_rows import Naming
    from agent.storage.db import open_database

    writer = csv.writer(out, lineterminator="\n")
    naming = Naming.of(config.export.focus, config.host, config.labels)
    version = _Version.of(args.focus_version, config, naming)
    writer.writerow(version.header)
    written = Written()
    engine = open_database(config.database_url)
    try:
        # Every stored minute counts, the ones not yet rolled up too, as for `gpuwatch cost`.
        with reading(engine, config, (), (period.start, period.end)) as (conn, _):
            for charge in charges(conn, period, args.granularity, version.shares):
                if charge.cost_usd is None:
                    written.unpriced_seconds += charge.observed_seconds
                    continue
                for values in version.rows(charge):
                    writer.writerow(version.csv(values))
                    written.rows += 1
                    written.billed += Decimal(values["EffectiveCost"] or 0)
    finally:
        engine.dispose()
    return written


@dataclass(frozen=True)
class _Version:
    """What one FOCUS version writes: its header, a charge's rows, their CSV fields."""

    header: tuple[str, ...]
    rows: Callable[[Charge], list[dict[str, str | None]]]
    csv: Callable[[dict[str, str | None]], list[str]]
    shares: bool  # whether its rows need who used each GPU

    @classmethod
    def of(cls, version: str, config: Config, naming: Naming) -> _Version:
        if version == "1.0":
            from agent.reporting import focus_rows as f10

            return cls(f10.header("1.0"), lambda c: [f10.row(c, naming)], f10.as_csv_values, False)
        from agent.reporting import focus13_rows as f13
        from agent.reporting.focus_allocation import sources

        among = sources(config.labels, config.cost.shared_gpu_split)
        return cls(f13.header(), lambda c: f13.rows(c, naming, among), f13.as_csv_values, True)


def _notes(written: Written, config: Config, period: Period, args: argparse.Namespace) -> None:
    from agent.config.export import DEFAULT_PROVIDER

    where = "standard output" if args.output is None else args.output
    each = f"one per GPU per {args.granularity}"
    if args.focus_version != "1.0":
        each += ", or per allocated part where targets used it"
    lines = [
        f"FOCUS {args.focus_version} export of {period.label}: {written.rows} rows "
        f"({each}), ${written.billed:,.2f} metered, to {where}"
    ]
    if config.export.focus.provider is None:
        named = "ProviderName" if args.focus_version == "1.0" else "ServiceProviderName"
        lines.append(
            f"{named} is {DEFAULT_PROVIDER!r}: set [export.focus] provider to name who "
            "hosts these GPUs"
        )
    if written.rows and config.energy.intensity is None:
        lines.append(
            "x_Co2Grams is empty: set [energy] grams_co2_per_kwh to count CO2 (from then on)"
        )
    if written.unpriced_seconds:
        hours = written.unpriced_seconds / 3600
        lines.append(
            f"{hours:,.2f} GPU-hours left out: no [[rates]] line prices them (no cost to export)"
        )
    for line in lines:
        print(f"gpuwatch: {line}", file=sys.stderr)
