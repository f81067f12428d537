"""Reading a FOCUS export file: gzip or plain, UTF-8 with or without BOM, CSV records, streamed.

Checks the header (required columns, no doubled read column), guesses the FOCUS version from
the columns present, and hands each record to focus_row.py, turning any bad value into one
:class:`FocusError` that names the file and line.

A file is streamed, never held whole: :class:`FocusReader` yields rows as the csv module reads
them from a text stream, so an import's memory does not grow with the file. What would still
grow is bounded here, each limit failing with a message naming the file:

* the text read, plain or decompressed: ``max_bytes`` (2 GiB by default, about three million
  rows; a month of a large account's export is tens of MB), so a huge file fails in bounded
  time instead of running for hours;
* for gzip, the ratio of text out to compressed bytes in: over 100:1 after the first 1 MiB
  is a gzip bomb (CSV exports compress 5-20:1; one valid row repeated compresses about 200:1,
  a single repeated byte near deflate's limit of 1032:1), refused within the first few MiB
  instead of after 2 GiB;
* one physical line: 1 MiB (csv's own field limit, 128 KiB, bounds a quoted field that spans
  lines), so a file without line breaks is not read whole into one string;
* blank lines: 100,000 at most (a file of nothing but line breaks is cheap to compress and
  costs a loop turn per byte); notes on the first 20, then a count.
"""

from __future__ import annotations

import csv
import gzip
import io
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Protocol

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

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

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
DEFAULT_MAX_BYTES = 2 << 30
MAX_RATIO = 100
RATIO_GRACE_BYTES = 1 << 20
MAX_LINE_BYTES = 1 << 20
MAX_SKIPPED_NOTES = 20
MAX_BLANK_LINES = 100_000


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


def read_focus(path: Path, *, max_bytes: int = DEFAULT_MAX_BYTES) -> FocusFile:
    """Read a whole FOCUS export into memory (small files, tests); raise FocusError if any row
    is bad. Imports stream with :class:`FocusReader` instead."""
    with FocusReader(path, max_bytes=max_bytes) as reader:
        rows = tuple(reader.rows())
        return FocusFile(path, reader.version_guess, reader.columns, rows, reader.skipped)


class FocusReader:
    """One FOCUS export, streamed: open it with ``with``, then iterate ``rows()`` once.

    Opening reads and checks the header; ``rows()`` yields each row in file order and raises
    FocusError naming the file and line at the first bad one (rows already yielded are the
    caller's to discard: a file is taken all or nothing).
    """

    def __init__(self, path: Path, *, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.path = path
        self.columns: tuple[str, ...] = ()
        self.version_guess = "1.0"
        self.rows_read = 0
        self._max_bytes = max_bytes
        self._notes: list[str] = []
        self._blank = 0
        self._stream: _Stream | None = None
        self._keys: KeyCounter | None = None
        self._reader: _CsvReader | None = None

    @property
    def skipped(self) -> tuple[str, ...]:
        """One note per blank line passed over, e.g. ``"line 9: blank"``; the first 20, then
        a count of the rest."""
        rest = self._blank - len(self._notes)
        return (*self._notes, f"{rest} more blank lines") if rest > 0 else tuple(self._notes)

    def __enter__(self) -> FocusReader:
        try:
            with self._errors():
                self._stream = _Stream.open(self.path, self._max_bytes)
                self._reader = csv.reader(self._stream.lines(), strict=True)
                header = next(self._reader, None)
                if header is None:
                    raise FocusError(f"{self.path.name}: empty file, no header")
                self.columns = tuple(name.strip() for name in header)
                _check_columns(self.path.name, self.columns)
                self.version_guess = _guess_version(self.columns)
                self._keys = KeyCounter()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        if self._stream is not None:
            self._stream.close()
        if self._keys is not None:
            self._keys.close()

    def rows(self) -> Iterator[FocusRow]:
        if self._reader is None or self._keys is None:
            raise RuntimeError("open the reader with `with` first")
        index = {column: i for i, column in enumerate(self.columns)}
        name, reader, keys = self.path.name, self._reader, self._keys
        with self._errors():
            # line_num counts physical lines read so far; a quoted field may span several.
            previous_end = reader.line_num
            for values in reader:
                line, previous_end = previous_end + 1, reader.line_num
                if not any(value.strip() for value in values):
                    self._note_blank(line)
                    continue
                if len(values) != len(self.columns):
                    raise FocusError(
                        f"{name} line {line}: {len(values)} fields, the header has "
                        f"{len(self.columns)}"
                    )
                try:
                    row = parse_row(Record(index, values), line, keys)
                except BadValue as bad:
                    raise FocusError(f"{name} line {line}: {bad}") from None
                self.rows_read += 1
                yield row

    def _note_blank(self, line: int) -> None:
        self._blank += 1
        if self._blank > MAX_BLANK_LINES:
            raise FocusError(
                f"{self.path.name} line {line}: more than {MAX_BLANK_LINES:,} blank lines; "
                "not a FOCUS export"
            )
        if len(self._notes) < MAX_SKIPPED_NOTES:
            self._notes.append(f"line {line}: blank")

    def _errors(self) -> _Translate:
        return _Translate(self.path.name, lambda: self._reader.line_num if self._reader else 0)


class _Translate:
    """Turns what reading a file can raise into one FocusError naming the file (and line)."""

    def __init__(self, name: str, line: Callable[[], int]) -> None:
        self._name = name
        self._line = line

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        name = self._name
        if exc is None or isinstance(exc, FocusError):
            return
        if isinstance(exc, csv.Error):
            raise FocusError(f"{name} line {self._line()}: malformed CSV: {exc}") from exc
        if isinstance(exc, gzip.BadGzipFile | EOFError | zlib.error):  # BadGzipFile: an OSError
            raise FocusError(f"{name}: broken gzip data: {exc}") from exc
        if isinstance(exc, UnicodeDecodeError):
            raise FocusError(f"{name}: not UTF-8 text: {exc}") from exc
        if isinstance(exc, OSError):  # missing or unreadable now; may be fine once it lands
            raise FocusError(f"{name}: cannot read: {exc}", retryable=True) from exc


class _Stream:
    """The file's text, line by line, with its limits (see the module's docstring).

    Lines are split on b"\\n" (so "\\r\\n" too) and decoded one at a time, so a byte that is
    not UTF-8 is reported with its line.
    """

    def __init__(self, name: str, raw: io.BufferedReader, data: _Bytes, max_bytes: int) -> None:
        self._name = name
        self._raw = raw  # the file on disk, whose position is the compressed bytes read
        self._capped = _Capped(name, raw, data, max_bytes, gzipped=raw is not data)
        self._bytes = io.BufferedReader(self._capped, buffer_size=1 << 16)

    @classmethod
    def open(cls, path: Path, max_bytes: int) -> _Stream:
        raw = path.open("rb")
        try:
            gzipped = raw.read(2) == _GZIP_MAGIC
            raw.seek(0)
            data: _Bytes = gzip.GzipFile(fileobj=raw, mode="rb") if gzipped else raw
            return cls(path.name, raw, data, max_bytes)
        except BaseException:
            raw.close()
            raise

    def lines(self) -> Iterator[str]:
        number = 0
        while line := self._bytes.readline(MAX_LINE_BYTES + 1):
            number += 1
            if len(line) > MAX_LINE_BYTES:
                raise FocusError(
                    f"{self._name} line {number}: longer than {MAX_LINE_BYTES:,} bytes; "
                    "not a FOCUS export"
                )
            if b"\x00" in line:  # PostgreSQL refuses NUL in text; no export has one
                raise FocusError(f"{self._name} line {number}: holds a NUL byte; not CSV text")
            try:
                text = line.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise FocusError(f"{self._name} line {number}: not UTF-8 text: {exc}") from None
            # An optional byte-order mark (Azure writes one) is not part of the first column.
            yield text.removeprefix("\ufeff") if number == 1 else text

    def close(self) -> None:
        self._bytes.close()
        self._raw.close()


class _Capped(io.RawIOBase):
    """Bytes from ``data``, counted: more than ``max_bytes`` in all, or (gzip) more than
    MAX_RATIO times the compressed bytes read past the first RATIO_GRACE_BYTES, is an error."""

    def __init__(
        self, name: str, raw: io.BufferedReader, data: _Bytes, max_bytes: int, *, gzipped: bool
    ) -> None:
        super().__init__()
        self._name, self._raw, self._data = name, raw, data
        self._max_bytes, self._gzipped = max_bytes, gzipped
        self.count = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: WriteableBuffer) -> int:
        view = memoryview(buffer).cast("B")
        chunk = self._data.read(len(view))
        view[: len(chunk)] = chunk
        self.count += len(chunk)
        self._check()
        return len(chunk)

    def close(self) -> None:
        if self._data is not self._raw:
            self._data.close()
        super().close()

    def _check(self) -> None:
        if self.count > self._max_bytes:
            what = "decompresses to" if self._gzipped else "holds"
            raise FocusError(
                f"{self._name}: {what} more than {_size(self._max_bytes)} of text; split the "
                "export or raise --max-bytes"
            )
        if self._gzipped and self.count > RATIO_GRACE_BYTES:
            packed = max(self._raw.tell(), 1)
            if self.count > MAX_RATIO * packed:
                raise FocusError(
                    f"{self._name}: {_size(packed)} of gzip decompress to over "
                    f"{_size(self.count)} (more than {MAX_RATIO}:1): refused as a gzip bomb"
                )


def _size(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


class _Bytes(Protocol):
    """A binary stream: the plain file, or the gzip stream over it."""

    def read(self, size: int = -1, /) -> bytes: ...

    def close(self) -> None: ...


class _CsvReader(Protocol):
    """What ``csv.reader`` returns, as far as this module uses it."""

    @property
    def line_num(self) -> int: ...

    def __iter__(self) -> Iterator[list[str]]: ...

    def __next__(self) -> list[str]: ...


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
