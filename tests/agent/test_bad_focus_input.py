"""Bad input, FOCUS files: every hostile export fails `gpuwatch import focus` with one line
naming the file (and line) and the problem, stores nothing, and loses nothing stored before.

Each case is a real file written to disk and imported by the real command on SQLite and on
PostgreSQL, after a good export was imported: that import must come through untouched. A
good file given in the same command is not stored either (an import is all or nothing), and
is stored by the next command that leaves the bad file out: the bad file blinds nothing else.
"""

from __future__ import annotations

import csv
import functools
import gzip
import io
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest

from agent.cli.main import main
from agent.cost.billing import billed
from agent.storage.db import open_database, upgrade_database

FOCUS = Path(__file__).resolve().parents[1] / "fixtures" / "focus"
AWS, OCI = FOCUS / "focus-sample-aws.csv", FOCUS / "focus-sample-oci.csv"
AWS_BILLED, OCI_BILLED = Decimal("2.2258368599"), Decimal("0.53707392473")
EVER = (datetime(2000, 1, 1, tzinfo=UTC), datetime(2100, 1, 1, tzinfo=UTC))


def _table() -> tuple[list[str], list[list[str]]]:
    with AWS.open(newline="", encoding="utf-8-sig") as fh:
        header, *rows = list(csv.reader(fh))
    return header, rows


def _csv(rows: list[list[str]]) -> bytes:
    out = io.StringIO()
    csv.writer(out).writerows(rows)
    return out.getvalue().encode()


def with_value(column: str, value: str, line: int = 3) -> Callable[[], bytes]:
    """The AWS sample with ``column`` of file line ``line`` set to ``value``."""

    def make() -> bytes:
        header, rows = _table()
        rows[line - 2][header.index(column)] = value
        return _csv([header, *rows])

    return make


def with_line(text: bytes, line: int = 3) -> Callable[[], bytes]:
    """The AWS sample with ``text`` in place of file line ``line``."""

    def make() -> bytes:
        lines = AWS.read_bytes().splitlines(keepends=True)
        lines[line - 1] = text
        return b"".join(lines)

    return make


@functools.cache
def bomb() -> bytes:
    """512 MiB of one repeated row behind about 0.5 MB of gzip."""
    header, rows = _table()
    head, row = _csv([header]), _csv([rows[0]])
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", compresslevel=9) as gz:
        gz.write(head)
        block = row * ((1 << 20) // len(row))
        for _ in range((512 << 20) // len(block)):
            gz.write(block)
    return out.getvalue()


@functools.cache
def blank_bomb() -> bytes:
    header, _ = _table()
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", compresslevel=9) as gz:
        gz.write(_csv([header]))
        for _ in range(64):
            gz.write(b"\n" * (4 << 20))
    return out.getvalue()


@dataclass(frozen=True)
class Case:
    name: str  # the file's name
    content: Callable[[], bytes]
    problem: str  # a regular expression the error line must match after "gpuwatch: "
    args: tuple[str, ...] = ()


CASES = [
    Case(
        "huge.csv",
        with_value("BilledCost", "1e999"),
        r"huge.csv line 3: BilledCost 1E\+999 is out of bounds",
    ),
    Case(
        "negative.csv",
        with_value("BilledCost", "-1e26"),
        r"negative.csv line 3: BilledCost -1E\+26 is out of bounds",
    ),
    Case(
        "trillion.csv",
        with_value("EffectiveCost", "1000000000000", 4),
        r"trillion.csv line 4: EffectiveCost 1000000000000 is out of bounds",
    ),
    Case(
        "listcost.csv",
        with_value("ListCost", "1e9"),
        r"listcost.csv line 3: ListCost 1E\+9 is out of bounds",
    ),
    Case(
        "nan.csv",
        with_value("EffectiveCost", "NaN"),
        r"nan.csv line 3: EffectiveCost 'NaN' is not a number",
    ),
    Case(
        "inf.csv",
        with_value("BilledCost", "-Infinity"),
        r"inf.csv line 3: BilledCost '-Infinity' is not a number",
    ),
    Case(
        "digits.csv",
        with_value("BilledCost", "9" * 5000),
        r"digits.csv line 3: BilledCost 1.000000E\+5000 is out of bounds",
    ),
    Case(
        "currency.csv",
        with_value("BillingCurrency", "US Dollars"),
        r"currency.csv line 3: BillingCurrency 'US Dollars' is not an ISO 4217 code",
    ),
    Case(
        "year1.csv",
        with_value("ChargePeriodStart", "0001-01-01T00:00:00+01:00"),
        r"year1.csv line 3: ChargePeriodStart '0001-01-01T00:00:00\+01:00' is out of range",
    ),
    Case(
        "reversed.csv",
        with_value("ChargePeriodEnd", "2024-09-18 21:00:00", 2),
        r"reversed.csv line 2: ChargePeriodEnd '2024-09-18 21:00:00' is before its start",
    ),
    Case(
        "longid.csv",
        with_value("ResourceId", "i-" + "x" * 300),
        r"longid.csv line 3: ResourceId is 302 characters, at most 255",
    ),
    Case(
        "longline.csv",
        with_line(b"x" * (2 << 20) + b"\n", 4),
        r"longline.csv line 4: longer than 1,048,576 bytes",
    ),
    Case(
        "field.csv",
        with_line(b'"' + b"y\n" * 100_000 + b'"\n', 3),
        r"field.csv line \d+: malformed CSV: field larger than field limit",
    ),
    Case(
        "nul.csv",
        with_value("ResourceId", "i-\x00abc", 5),
        r"nul.csv line 5: holds a NUL byte; not CSV text",
    ),
    Case(
        "quote.csv",
        with_line(b'NULL,"0.5\n', 8),
        r"quote.csv line \d+: malformed CSV: unexpected end of data",
    ),
    Case(
        "extra.csv",
        with_line(b"NULL," * 50 + b"NULL\n", 6),
        r"extra.csv line 6: 51 fields, the header has 44",
    ),
    Case(
        "latin1.csv",
        lambda: AWS.read_bytes().replace(b"Requests", b"R\xe9quests", 1),
        r"latin1.csv line 2: not UTF-8 text",
    ),
    Case(
        "garbage.csv",
        lambda: bytes(range(256)) * 64,
        r"garbage.csv line 1: holds a NUL byte; not CSV text",
    ),
    Case(
        "nocolumns.csv",
        lambda: b"a,b,c\n1,2,3\n",
        r"nocolumns.csv: missing required FOCUS column\(s\): ChargePeriodStart",
    ),
    Case("empty.csv", lambda: b"", r"empty.csv: empty file, no header"),
    Case(
        "truncated.csv.gz",
        lambda: gzip.compress(AWS.read_bytes())[:300],
        r"truncated.csv.gz: broken gzip data",
    ),
    Case(
        "bomb.csv.gz",
        bomb,
        r"bomb.csv.gz: .* of gzip decompress to over .* \(more than 100:1\): refused as a gzip b",
    ),
    Case(
        "blanks.csv.gz",
        blank_bomb,
        r"blanks.csv.gz line 100002: more than 100,000 blank lines; not a FOCUS export",
    ),
    Case(
        "capped.csv",
        lambda: AWS.read_bytes() + b"".join(AWS.read_bytes().splitlines(True)[1:]),
        r"capped.csv: holds more than 8.0 KiB of text; split the export or raise --max-bytes",
        ("--max-bytes", "8192"),
    ),
]


def _import(*args: str) -> int:
    return main(["import", "focus", *args])


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_a_bad_focus_file_is_named_and_loses_nothing(
    case: Case,
    db_url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GPUWATCH_DATABASE_URL", db_url)
    monkeypatch.delenv("GPUWATCH_CONFIG", raising=False)
    upgrade_database(db_url)
    assert _import(str(AWS)) == 0  # what was stored before the bad file came
    bad = tmp_path / case.name
    bad.write_bytes(case.content())
    capsys.readouterr()

    assert _import(str(OCI), str(bad), *case.args) == 1
    err = capsys.readouterr().err.strip()
    assert re.fullmatch("gpuwatch: " + case.problem + ".*", err), err
    assert len(err) < 400 and "\n" not in err  # one line, not a dump of the input
    assert _stored(db_url) == AWS_BILLED  # the earlier import is whole; nothing of OCI

    assert _import(str(OCI)) == 0  # the good file alone goes in
    assert _stored(db_url) == AWS_BILLED + OCI_BILLED


def _stored(db_url: str) -> Decimal:
    engine = open_database(db_url)
    try:
        totals = billed(engine, *EVER)
    finally:
        engine.dispose()
    assert set(totals) <= {("focus", "USD")}
    return totals.get(("focus", "USD"), Decimal(0))
