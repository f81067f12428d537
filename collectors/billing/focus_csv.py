"""Reading a FOCUS export file: gzip or plain, UTF-8 with or without BOM, CSV records.

Checks the header (required columns, no doubled read column), guesses the FOCUS version from
the columns present, and hands each record to focus_row.py, turning any bad value into one
:class:`FocusError` that names the file and line: a file is read all or nothing.
"""

from __future__ import annotations

import csv
import gzip
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TextIO

from collectors.billing.base import BillingError
from collectors.billing.focus_row import (
    READ_COLUMNS,
    REQUIRED_COLUMNS,
    BadValue,
    FocusRow,
    KeyCounter,
    Record,
    parse_row,
)

# Columns first introduced by each version, newest first (billing-apis.md §2, "Versions").
_VERSION_MARKERS = (
    ("1.4", ("InvoiceDetailId", "CommitmentProgramEligibilityDetails")),
    ("1.3", ("ServiceProviderName", "HostProviderName", "ContractApplied", "AllocatedMethodId")),
    ("1.2", ("InvoiceId", "PricingCurrency", "BillingAccountType", "SubAccountType")),
    (
        "1.1",
        ("CapacityReservationId", "CommitmentDiscountQuantity", "ServiceSubcategory", "SkuMeter"),
    ),
)
_GZIP_MAGIC = b"\x1f\x8b"


class FocusError(BillingError):
    """The export cannot be read; nothing from it is returned.

    Not retryable by default: the same bytes will fail the same way until the file changes.
    """

    def __init__(self, message: str, *, retryable: bool = False) -> None:
        super().__init__(message, retryable=retryable)


@dataclass(frozen=True, slots=True)
class FocusFile:
    """A whole export as read: its header, its rows in file order, and what was passed over.

    ``version_guess`` is the newest FOCUS version that introduced a column present; a lower
    bound, since providers may omit conditional columns. ``skipped`` holds one note per line
    that was passed over (blank lines), e.g. ``"line 9: blank"``.
    """

    path: Path
    version_guess: str
    columns: tuple[str, ...]
    rows: tuple[FocusRow, ...]
    skipped: tuple[str, ...]


def read_focus(path: Path) -> FocusFile:
    """Read a FOCUS Cost and Usage CSV export, plain or gzip; raise FocusError if any is bad."""
    try:
        with _open_text(path) as text:
            return _parse(path, text)
    except (gzip.BadGzipFile, EOFError, zlib.error) as exc:  # BadGzipFile is an OSError
        raise FocusError(f"{path.name}: broken gzip data: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise FocusError(f"{path.name}: not UTF-8 text: {exc}") from exc
    except OSError as exc:  # missing or unreadable now; may be fine once the export lands
        raise FocusError(f"{path.name}: cannot read: {exc}", retryable=True) from exc


def _open_text(path: Path) -> TextIO:
    with path.open("rb") as probe:
        magic = probe.read(2)
    # newline="" is what the csv module needs to keep line breaks inside quoted fields.
    if magic == _GZIP_MAGIC:
        return gzip.open(path, "rt", encoding="utf-8-sig", newline="")
    return path.open("r", encoding="utf-8-sig", newline="")


def _parse(path: Path, text: TextIO) -> FocusFile:
    reader = csv.reader(text, strict=True)
    try:
        header = next(reader, None)
        if header is None:
            raise FocusError(f"{path.name}: empty file, no header")
        columns = tuple(name.strip() for name in header)
        _check_columns(path.name, columns)
        rows, skipped = _parse_rows(path.name, columns, reader)
    except csv.Error as exc:
        raise FocusError(f"{path.name} line {reader.line_num}: malformed CSV: {exc}") from exc
    return FocusFile(path, _guess_version(columns), columns, tuple(rows), tuple(skipped))


class _CsvReader(Protocol):
    """What ``csv.reader`` returns, as far as this module uses it."""

    @property
    def line_num(self) -> int: ...

    def __iter__(self) -> Iterator[list[str]]: ...


def _parse_rows(
    name: str, columns: tuple[str, ...], reader: _CsvReader
) -> tuple[list[FocusRow], list[str]]:
    index = {column: i for i, column in enumerate(columns)}
    keys = KeyCounter()
    rows: list[FocusRow] = []
    skipped: list[str] = []
    # line_num counts physical lines read so far; a quoted field may span several.
    previous_end = reader.line_num
    for values in reader:
        line, previous_end = previous_end + 1, reader.line_num
        if not any(value.strip() for value in values):
            skipped.append(f"line {line}: blank")
            continue
        if len(values) != len(columns):
            raise FocusError(
                f"{name} line {line}: {len(values)} fields, the header has {len(columns)}"
            )
        try:
            rows.append(parse_row(Record(index, values), line, keys))
        except BadValue as bad:
            raise FocusError(f"{name} line {line}: {bad}") from None
    return rows, skipped


def _check_columns(name: str, columns: tuple[str, ...]) -> None:
    missing = [column for column in REQUIRED_COLUMNS if column not in columns]
    if missing:
        raise FocusError(f"{name}: missing required FOCUS column(s): {', '.join(missing)}")
    doubled = sorted({c for c in columns if columns.count(c) > 1 and c in READ_COLUMNS})
    if doubled:
        raise FocusError(f"{name}: column(s) appear twice: {', '.join(doubled)}")


def _guess_version(columns: Sequence[str]) -> str:
    present = set(columns)
    for version, markers in _VERSION_MARKERS:
        if present.intersection(markers):
            return version
    return "1.0"
