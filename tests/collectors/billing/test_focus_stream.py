"""FOCUS files streamed: the reader yields rows as it reads, the running totals equal the
whole-file functions, and what would grow with the file (notes, row keys) stays bounded."""

from __future__ import annotations

import gzip
from datetime import timedelta
from pathlib import Path

import pytest

from collectors.billing.focus import (
    FocusError,
    FocusReader,
    FocusTotals,
    burn_rate_per_hour,
    month_to_date_billed,
    read_focus,
)
from collectors.billing.focus_row import KeyCounter

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "focus"
SAMPLES = sorted(FIXTURES.glob("*.csv"))


@pytest.mark.parametrize("path", SAMPLES, ids=[p.name for p in SAMPLES])
def test_running_totals_equal_the_whole_file_functions(path: Path) -> None:
    rows = read_focus(path).rows
    totals = FocusTotals()
    for row in rows:
        totals.add(row)
    summary = totals.summary()
    assert summary is not None
    end = max(r.charge_period_end for r in rows)
    last = max(r.charge_period_start for r in rows)
    month = last.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    assert summary.month == month
    assert summary.month_to_date == month_to_date_billed(rows, month, end)
    start = max(end - timedelta(days=1), min(r.charge_period_start for r in rows))
    expected = burn_rate_per_hour(rows, start, end)
    assert summary.burn_per_hour.keys() == expected.keys()
    for currency, rate in expected.items():  # summed per period first: equal to 20 digits
        assert abs(summary.burn_per_hour[currency] - rate) <= abs(rate).scaleb(-20)


def test_no_rows_no_summary() -> None:
    assert FocusTotals().summary() is None


def test_rows_are_yielded_before_the_file_is_read_to_its_end(tmp_path: Path) -> None:
    lines = (FIXTURES / "focus-sample-aws.csv").read_bytes().splitlines(keepends=True)
    path = tmp_path / "late-error.csv.gz"
    path.write_bytes(gzip.compress(b"".join([*lines, b"NULL,x\n"])))
    seen = 0
    with FocusReader(path) as reader, pytest.raises(FocusError, match="line 9: 2 fields"):
        for _ in reader.rows():
            seen += 1
    assert seen == 7  # every good row came out before the bad line was met


def test_blank_line_notes_are_capped_and_counted(tmp_path: Path) -> None:
    lines = (FIXTURES / "focus-sample-aws.csv").read_text().splitlines()
    path = tmp_path / "blanks.csv"
    path.write_text("\n".join([lines[0], *[""] * 1000, *lines[1:]]) + "\n")
    focus = read_focus(path)
    assert len(focus.rows) == 7
    assert focus.skipped[:2] == ("line 2: blank", "line 3: blank")
    assert len(focus.skipped) == 21 and focus.skipped[-1] == "980 more blank lines"


def test_row_keys_count_repeats_beyond_memory() -> None:
    keys = KeyCounter()
    try:
        identity = "ab" * 32
        assert [keys.key(identity) for _ in range(3)] == [
            identity,
            f"{identity}#2",
            f"{identity}#3",
        ]
        assert keys.key("cd" * 32) == "cd" * 32
    finally:
        keys.close()
