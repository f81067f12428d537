"""`gpuwatch import focus`: FOCUS exports streamed into the database, every file or none.

Each file is read row by row (collectors.billing.focus_csv.FocusReader) and staged in batches
of BATCH_ROWS rows (agent.cost.billing.StagedRecords), so memory stays flat whatever the file's
size and the time grows linearly with it. All the files go in one
transaction: a bad row anywhere (named with its file and line) rolls the whole import back, so
a half-read export is never stored as the bill, and what an earlier import stored stays as it
was. On SQLite the daemon's rounds wait in its spool while a large import holds the write
lock, and are stored when it commits (see docs/outages.md).
"""

from __future__ import annotations

import argparse
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING

from collectors.billing.focus_csv import DEFAULT_MAX_BYTES

if TYPE_CHECKING:
    from agent.config.settings import Config
    from agent.cost.billing import StagedRecords
    from collectors.billing.base import CostRecord
    from collectors.billing.focus import FocusTotals

FOCUS_SOURCE = "focus"
BATCH_ROWS = 2000  # a few thousand rows a statement: few round trips, little memory


@dataclass(frozen=True, slots=True)
class _Imported:
    name: str
    rows: int
    version: str
    records: Counter[str]  # cost records made, by kind ("billed", "effective")


def add_arguments(focus: argparse.ArgumentParser) -> None:
    focus.add_argument("files", nargs="+", metavar="FILE", type=Path)
    focus.add_argument("--config", metavar="PATH", help="TOML file (default as for `run`)")
    focus.add_argument(
        "--max-bytes",
        type=int,
        default=DEFAULT_MAX_BYTES,
        metavar="N",
        help=f"refuse a file of more text than this, decompressed (default {DEFAULT_MAX_BYTES})",
    )


def run_import_focus(args: argparse.Namespace, config: Config, now: datetime) -> int:
    from agent.cost.billing import StagedRecords
    from agent.storage.db import open_database
    from collectors.billing.focus import FocusTotals

    totals = FocusTotals()
    engine = open_database(config.database_url)
    try:
        with engine.begin() as conn:
            staged = StagedRecords(conn)
            done = [_import(staged, path, args.max_bytes, totals, now) for path in args.files]
            stored = staged.store()
    finally:
        engine.dispose()
    for f in done:
        print(f"{f.name}: {_count(f.rows, 'row')} (FOCUS {f.version})")
    print(_stored(stored, done))
    summary = totals.summary()
    if summary is not None:
        print(f"month-to-date billed {summary.month:%Y-%m}: " + _money(summary.month_to_date))
        print(
            "burn rate (effective cost of usage, last 24 h of charges): "
            f"{_money(summary.burn_per_hour)}/h"
        )
    return 0


def _import(
    staged: StagedRecords, path: Path, max_bytes: int, totals: FocusTotals, now: datetime
) -> _Imported:
    from collectors.billing.focus import FocusReader, cost_records

    batch: list[CostRecord] = []
    kinds: Counter[str] = Counter()
    with FocusReader(path, max_bytes=max_bytes) as reader:
        for row in reader.rows():
            totals.add(row)
            records = cost_records(row, FOCUS_SOURCE)
            kinds.update(r.kind.value for r in records)
            batch += records
            if len(batch) >= 2 * BATCH_ROWS:
                staged.add(batch, now)
                batch = []
        staged.add(batch, now)
        return _Imported(path.name, reader.rows_read, reader.version_guess, kinds)


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def _stored(stored: int, done: list[_Imported]) -> str:
    """How the rows became the records stored: each row is one record of its BilledCost and,
    where the row has one, one of its EffectiveCost; rows repeating an id already read in this
    import replace it."""
    rows = sum(f.rows for f in done)
    kinds: Counter[str] = sum((f.records for f in done), Counter())
    made = sum(kinds.values())
    parts = ", ".join(f"{kinds[k]:,} {k}" for k in ("billed", "effective") if kinds[k])
    line = f"stored {_count(stored, 'cost record')} from {_count(rows, 'row')}"
    if made:
        line += f" ({parts}: each row's BilledCost and, where given, its EffectiveCost)"
    if made > stored:
        line += f"; {made - stored:,} repeated a charge already read and replaced it"
    return line + "; re-importing replaces them, never adds"


def _money(amounts: dict[str, Decimal]) -> str:
    return (
        ", ".join(f"{currency} {amount:,.4f}" for currency, amount in sorted(amounts.items()))
        or "0"
    )
