"""FOCUS (FinOps Open Cost and Usage Specification) Cost and Usage exports, read from CSV.

Hyperscalers export spend as FOCUS files (AWS Data Exports, Azure FocusCost, OCI reports);
importing them beats polling their priced or throttled cost APIs (reference/billing-apis.md §2).

What the reader accepts, and why:

* ``.csv`` or gzip-compressed CSV, told apart by the gzip magic bytes rather than the name,
  since exports are renamed on the way; an optional UTF-8 byte-order mark (Azure writes one).
* FOCUS 1.0 to 1.4, keyed on which columns are present, never on a declared version:
  the provider is ``ServiceProviderName`` (1.3+) or else the deprecated ``ProviderName``
  (1.0-1.2, removed in 1.4). Columns gpuwatch does not read, FOCUS or not (``x_*``, the
  sample data's bare ``Id``), are ignored.
* Times as the spec writes them (``2024-09-01T00:00:00Z``), as the official sample data does
  (``2024-09-01 00:00:00``, no zone: FOCUS times are UTC) and with fractions or offsets; all
  come back UTC-aware.
* NULL as the bare token ``NULL`` (official sample data) or as an empty field (toolkit output).

A file is read all or nothing: a missing required column or one bad value raises
:class:`FocusError` naming the file (and the line and column), and no row is returned, so a
half-read export can never be stored as if it were the whole bill.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import json
import re
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal, InvalidOperation
from enum import StrEnum
from pathlib import Path
from typing import Protocol, TextIO

from collectors.billing.base import BillingError, CostKind, CostRecord

# Every version from 1.0 has these as Mandatory; gpuwatch cannot price a row without them.
REQUIRED_COLUMNS = (
    "ChargePeriodStart",
    "ChargePeriodEnd",
    "BilledCost",
    "EffectiveCost",
    "BillingCurrency",
    "ChargeCategory",
)

# The columns that together say *which* charge a row is, hashed into ``FocusRow.row_key``.
# Amounts and quantities are deliberately left out: a month-to-date export is re-issued daily
# with late usage folded into earlier rows, and a restated row must replace its old record,
# not sit beside it. Tags and names are left out because they are edited after the fact.
# The 1.3 split-allocation columns are in, because one host's cost split over workloads gives
# rows that differ only there. Rows that still collide get an ordinal (see ``_KeyCounter``).
# A column the file lacks counts as NULL, so 1.0 and 1.3 exports of one charge hash alike.
KEY_COLUMNS = (
    "BillingAccountId",
    "SubAccountId",
    "ProviderName",  # the resolved provider: ServiceProviderName, else ProviderName
    "BillingPeriodStart",
    "ChargePeriodStart",
    "ChargePeriodEnd",
    "ChargeCategory",
    "ChargeClass",
    "ChargeDescription",
    "ServiceName",
    "ResourceId",
    "SkuId",
    "SkuPriceId",
    "RegionId",
    "PricingCategory",
    "CommitmentDiscountId",
    "CommitmentDiscountStatus",
    "AllocatedMethodId",
    "AllocatedResourceId",
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
# The spec's number format: plain decimal or E-notation, no separators or currency symbols.
# Python's Decimal alone would also take "1_000", "NaN" and "Infinity".
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_HOUR = timedelta(hours=1)
_MICROSECOND = timedelta(microseconds=1)


class FocusError(BillingError):
    """The export cannot be read; nothing from it is returned.

    Not retryable by default: the same bytes will fail the same way until the file changes.
    """

    def __init__(self, message: str, *, retryable: bool = False) -> None:
        super().__init__(message, retryable=retryable)


class ChargeCategory(StrEnum):
    """FOCUS ``ChargeCategory``, in the spec's spelling whatever case the file uses."""

    USAGE = "Usage"
    PURCHASE = "Purchase"
    TAX = "Tax"
    CREDIT = "Credit"
    ADJUSTMENT = "Adjustment"


@dataclass(frozen=True, slots=True, kw_only=True)
class FocusRow:
    """One Cost and Usage row, normalised; a NULL or absent optional column is None.

    ``row_key`` is stable across reads of the same file (see ``KEY_COLUMNS``); ``line`` is the
    row's first physical line in the file (the header is line 1), for messages only.
    """

    line: int
    row_key: str
    billing_account_id: str | None
    sub_account_id: str | None
    billing_period_start: datetime | None
    charge_period_start: datetime
    charge_period_end: datetime
    charge_category: ChargeCategory
    charge_class: str | None  # "Correction" or None
    charge_description: str | None
    billed_cost: Decimal
    effective_cost: Decimal | None
    list_cost: Decimal | None
    billing_currency: str
    provider: str | None  # ServiceProviderName (1.3+), else ProviderName
    host_provider: str | None  # HostProviderName (1.3+)
    service_name: str | None
    resource_id: str | None
    resource_name: str | None
    sku_id: str | None
    sku_price_id: str | None
    consumed_quantity: Decimal | None
    consumed_unit: str | None
    pricing_quantity: Decimal | None
    pricing_unit: str | None
    region: str | None  # RegionId, else RegionName (the OCI sample fills only the name)
    tags: str | None  # the raw JSON text, unparsed


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


def to_cost_records(file: FocusFile, source: str) -> list[CostRecord]:
    """Each row as a BILLED record and, when it has an EffectiveCost, an EFFECTIVE one.

    Both kinds are kept because they answer different questions: BilledCost adds up to the
    invoice, EffectiveCost spreads prepaid commitments over the usage they cover (burn rate,
    cost per token). Their ids are ``row_key + ":billed"`` and ``row_key + ":effective"``, so
    storing the file again replaces both instead of counting them twice.
    """
    records: list[CostRecord] = []
    for row in file.rows:
        records.append(_record(row, source, CostKind.BILLED, row.billed_cost))
        if row.effective_cost is not None:
            records.append(_record(row, source, CostKind.EFFECTIVE, row.effective_cost))
    return records


def month_to_date_billed(
    rows: Iterable[FocusRow], month_start: datetime, now: datetime
) -> dict[str, Decimal]:
    """Per currency, the BilledCost of rows whose ChargePeriodStart is in [month_start, now).

    Every charge category counts, so credits and adjustments (negative) reduce the total, as
    they do on the invoice. Rows are placed by when the charge happened, not by their
    BillingPeriodStart: a late row the provider files under next month still counts in the
    month its usage ran.
    """
    _check_window(month_start, now, allow_empty=True)
    totals: dict[str, Decimal] = {}
    for row in rows:
        if month_start <= row.charge_period_start < now:
            currency = row.billing_currency
            totals[currency] = totals.get(currency, Decimal(0)) + row.billed_cost
    return totals


def burn_rate_per_hour(
    rows: Iterable[FocusRow], start: datetime, end: datetime
) -> dict[str, Decimal]:
    """Per currency, the EffectiveCost per hour of Usage rows over the window [start, end).

    A row counts by the share of its charge period that lies in the window (a row for
    10:00-11:00 read over 10:45-11:45 counts one quarter), and the sum is divided by the
    window's length in hours. Purchases, taxes, credits and adjustments are left out: they are
    not the rate at which running resources spend. A zero-length charge period counts whole if
    it starts in the window. A row without EffectiveCost is skipped.
    """
    _check_window(start, end, allow_empty=False)
    totals: dict[str, Decimal] = {}
    for row in rows:
        if row.charge_category is not ChargeCategory.USAGE or row.effective_cost is None:
            continue
        share = _share_in_window(row.effective_cost, row, start, end)
        if share is not None:
            currency = row.billing_currency
            totals[currency] = totals.get(currency, Decimal(0)) + share
    # Multiply before dividing: one rounding per currency, and exact for whole windows.
    window = _micros(end - start)
    return {cur: total * _micros(_HOUR) / window for cur, total in totals.items()}


# ---------------------------------------------------------------------------------------------
# Reading


class _BadValue(Exception):
    """One field cannot be read; the message starts with the column name."""


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
    keys = _KeyCounter()
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
            rows.append(_parse_row(_Record(index, values), line, keys))
        except _BadValue as bad:
            raise FocusError(f"{name} line {line}: {bad}") from None
    return rows, skipped


def _check_columns(name: str, columns: tuple[str, ...]) -> None:
    missing = [column for column in REQUIRED_COLUMNS if column not in columns]
    if missing:
        raise FocusError(f"{name}: missing required FOCUS column(s): {', '.join(missing)}")
    doubled = sorted({c for c in columns if columns.count(c) > 1 and c in _READ_COLUMNS})
    if doubled:
        raise FocusError(f"{name}: column(s) appear twice: {', '.join(doubled)}")


def _guess_version(columns: Sequence[str]) -> str:
    present = set(columns)
    for version, markers in _VERSION_MARKERS:
        if present.intersection(markers):
            return version
    return "1.0"


class _KeyCounter:
    """Hands out row keys; the n-th row with an already-seen identity gets ``<hash>#n``.

    FOCUS does not require rows to be unique, so two identical lines are two charges. Ordinals
    follow file order, so re-reading the same file gives the same keys.
    """

    def __init__(self) -> None:
        self._seen: dict[str, int] = {}

    def key(self, identity: str) -> str:
        count = self._seen.get(identity, 0) + 1
        self._seen[identity] = count
        return identity if count == 1 else f"{identity}#{count}"


def _parse_row(record: _Record, line: int, keys: _KeyCounter) -> FocusRow:
    start = record.required_time("ChargePeriodStart")
    end = record.required_time("ChargePeriodEnd")
    if end < start:
        raise _BadValue(f"ChargePeriodEnd {record.raw('ChargePeriodEnd')!r} is before its start")
    billing_period_start = record.time("BillingPeriodStart")
    category = _category(record)
    charge_class = _charge_class(record.text("ChargeClass"))
    provider = record.text("ServiceProviderName") or record.text("ProviderName")
    normalised = {
        "ProviderName": provider,
        "BillingPeriodStart": billing_period_start.isoformat() if billing_period_start else None,
        "ChargePeriodStart": start.isoformat(),
        "ChargePeriodEnd": end.isoformat(),
        "ChargeCategory": category.value,
        "ChargeClass": charge_class,
    }
    return FocusRow(
        line=line,
        row_key=keys.key(_identity(record, normalised)),
        billing_account_id=record.text("BillingAccountId"),
        sub_account_id=record.text("SubAccountId"),
        billing_period_start=billing_period_start,
        charge_period_start=start,
        charge_period_end=end,
        charge_category=category,
        charge_class=charge_class,
        charge_description=record.text("ChargeDescription"),
        billed_cost=record.required_decimal("BilledCost"),
        effective_cost=record.decimal("EffectiveCost"),
        list_cost=record.decimal("ListCost"),
        billing_currency=record.required_text("BillingCurrency").strip(),
        provider=provider,
        host_provider=record.text("HostProviderName"),
        service_name=record.text("ServiceName"),
        resource_id=record.text("ResourceId"),
        resource_name=record.text("ResourceName"),
        sku_id=record.text("SkuId"),
        sku_price_id=record.text("SkuPriceId"),
        consumed_quantity=record.decimal("ConsumedQuantity"),
        consumed_unit=record.text("ConsumedUnit"),
        pricing_quantity=record.decimal("PricingQuantity"),
        pricing_unit=record.text("PricingUnit"),
        region=record.text("RegionId") or record.text("RegionName"),
        tags=record.text("Tags"),
    )


def _identity(record: _Record, normalised: Mapping[str, str | None]) -> str:
    values = [normalised[c] if c in normalised else record.text(c) for c in KEY_COLUMNS]
    # JSON keeps the boundaries between values unambiguous (a value may hold any character).
    blob = json.dumps(values, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def _category(record: _Record) -> ChargeCategory:
    raw = record.required_text("ChargeCategory")
    for category in ChargeCategory:
        if raw.strip().casefold() == category.value.casefold():
            return category
    allowed = ", ".join(c.value for c in ChargeCategory)
    raise _BadValue(f"ChargeCategory {raw!r} is not one of {allowed}")


def _charge_class(raw: str | None) -> str | None:
    # "Correction" is the only value the spec allows; anything else is kept as the file says.
    if raw is not None and raw.strip().casefold() == "correction":
        return "Correction"
    return raw


class _Record:
    """One CSV record, read by column name; a column the file lacks reads as NULL."""

    __slots__ = ("_index", "_values")

    def __init__(self, index: Mapping[str, int], values: Sequence[str]) -> None:
        self._index = index
        self._values = values

    def raw(self, column: str) -> str | None:
        i = self._index.get(column)
        return None if i is None else self._values[i]

    def text(self, column: str) -> str | None:
        raw = self.raw(column)
        return None if raw is None or _is_null(raw) else raw

    def required_text(self, column: str) -> str:
        value = self.text(column)
        if value is None:
            raise _BadValue(f"{column} is NULL")
        return value

    def decimal(self, column: str) -> Decimal | None:
        value = self.text(column)
        return None if value is None else _parse_decimal(column, value)

    def required_decimal(self, column: str) -> Decimal:
        return _parse_decimal(column, self.required_text(column))

    def time(self, column: str) -> datetime | None:
        value = self.text(column)
        return None if value is None else _parse_time(column, value)

    def required_time(self, column: str) -> datetime:
        return _parse_time(column, self.required_text(column))


def _is_null(raw: str) -> bool:
    stripped = raw.strip()
    return not stripped or stripped.upper() == "NULL"


def _parse_decimal(column: str, raw: str) -> Decimal:
    text = raw.strip()
    if not _NUMBER.fullmatch(text):
        raise _BadValue(f"{column} {raw!r} is not a number")
    try:
        return Decimal(text)
    except InvalidOperation:  # cannot happen after the pattern; kept so no raw error escapes
        raise _BadValue(f"{column} {raw!r} is not a number") from None


def _parse_time(column: str, raw: str) -> datetime:
    try:
        value = datetime.fromisoformat(raw.strip())
    except ValueError:
        raise _BadValue(f"{column} {raw!r} is not a date-time") from None
    # FOCUS times are UTC; the official sample data just leaves the zone out.
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


# Duplicates of these would be ambiguous; duplicates of columns never read do no harm.
_READ_COLUMNS = frozenset(
    {
        *REQUIRED_COLUMNS,
        *KEY_COLUMNS,
        "ServiceProviderName",
        "HostProviderName",
        "ListCost",
        "ResourceName",
        "ConsumedQuantity",
        "ConsumedUnit",
        "PricingQuantity",
        "PricingUnit",
        "RegionName",
        "Tags",
    }
)


# ---------------------------------------------------------------------------------------------
# Records and aggregation


def _record(row: FocusRow, source: str, kind: CostKind, amount: Decimal) -> CostRecord:
    what = row.charge_description or row.service_name or ""
    return CostRecord(
        source=source,
        record_id=f"{row.row_key}:{kind.value}",
        resource=row.resource_id or "",
        period_start=row.charge_period_start,
        period_end=row.charge_period_end,
        amount=amount,
        currency=row.billing_currency,
        kind=kind,
        # The category keeps credits and adjustments recognisable once stored.
        description=f"{row.charge_category.value}: {what}" if what else row.charge_category.value,
    )


def _share_in_window(
    cost: Decimal, row: FocusRow, start: datetime, end: datetime
) -> Decimal | None:
    length = row.charge_period_end - row.charge_period_start
    if not length:
        return cost if start <= row.charge_period_start < end else None
    overlap = min(end, row.charge_period_end) - max(start, row.charge_period_start)
    if overlap <= timedelta(0):
        return None
    return cost * _micros(overlap) / _micros(length)


def _micros(span: timedelta) -> int:
    # Whole microseconds, never float seconds: money arithmetic stays exact.
    return span // _MICROSECOND


def _check_window(start: datetime, end: datetime, *, allow_empty: bool) -> None:
    if start.tzinfo is None or end.tzinfo is None:
        raise ValueError("window bounds must be timezone-aware")
    if end < start or (end == start and not allow_empty):
        raise ValueError(f"window end {end.isoformat()} is not after start {start.isoformat()}")
