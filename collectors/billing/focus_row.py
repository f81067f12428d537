"""One FOCUS Cost and Usage record, decoded and validated into a :class:`FocusRow`.

Which columns gpuwatch reads and how their values are spelt (NULL, numbers, times, categories)
change together, so they live here; how a file is opened and split into records is
focus_csv.py's business, and what the rows add up to is focus.py's.
"""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from enum import StrEnum

from collectors.billing.base import MAX_KEY_CHARS, amount_problem

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
# rows that differ only there. Rows that still collide get an ordinal (see ``KeyCounter``).
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

# Duplicates of these would be ambiguous; duplicates of columns never read do no harm.
READ_COLUMNS = frozenset(
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

# The amounts stored as money; each must pass base.amount_problem (finite, under $10^9 a row).
AMOUNT_COLUMNS = frozenset({"BilledCost", "EffectiveCost", "ListCost"})
# ISO 4217, as FOCUS requires of BillingCurrency; the database keeps at most 8 characters.
_CURRENCY = re.compile(r"[A-Za-z]{3}")

# The spec's number format: plain decimal or E-notation, no separators or currency symbols.
# Python's Decimal alone would also take "1_000", "NaN" and "Infinity".
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")


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


class BadValue(Exception):
    """One field cannot be read; the message starts with the column name."""


class KeyCounter:
    """Hands out row keys; the n-th row with an already-seen identity gets ``<hash>#n``.

    FOCUS does not require rows to be unique, so two identical lines are two charges. Ordinals
    follow file order, so re-reading the same file gives the same keys.

    The identities seen are counted in a private temporary SQLite database (a file SQLite
    deletes on close, with a small page cache), not in a dict: a file of millions of rows would
    otherwise hold every row's hash in memory, and an import must stay small whatever its size.
    Close it when done.
    """

    def __init__(self) -> None:
        self._db = sqlite3.connect("", isolation_level=None)  # "": temporary, on disk
        self._db.executescript(
            "PRAGMA cache_size = -16384; PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF;"
            "CREATE TABLE seen (identity BLOB PRIMARY KEY, n INTEGER NOT NULL) WITHOUT ROWID;"
            # One transaction, never committed: a commit per row writes the pages out each time
            # (five times slower at 200,000 rows, and slower the larger the table).
            "BEGIN;"
        )

    def key(self, identity: str) -> str:
        (count,) = self._db.execute(
            "INSERT INTO seen VALUES (?, 1) ON CONFLICT (identity) DO UPDATE SET n = n + 1 "
            "RETURNING n",
            (bytes.fromhex(identity),),
        ).fetchone()
        return identity if count == 1 else f"{identity}#{count}"

    def close(self) -> None:
        self._db.close()


def parse_row(record: Record, line: int, keys: KeyCounter) -> FocusRow:
    """The record on file line ``line`` as a FocusRow; BadValue names the first bad field."""
    start = record.required_time("ChargePeriodStart")
    end = record.required_time("ChargePeriodEnd")
    if end < start:
        raise BadValue(f"ChargePeriodEnd {record.raw('ChargePeriodEnd')!r} is before its start")
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
        billing_currency=_currency(record),
        provider=provider,
        host_provider=record.text("HostProviderName"),
        service_name=record.text("ServiceName"),
        resource_id=record.key_text("ResourceId"),
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


def _identity(record: Record, normalised: Mapping[str, str | None]) -> str:
    values = [normalised[c] if c in normalised else record.text(c) for c in KEY_COLUMNS]
    # JSON keeps the boundaries between values unambiguous (a value may hold any character).
    blob = json.dumps(values, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def _category(record: Record) -> ChargeCategory:
    raw = record.required_text("ChargeCategory")
    for category in ChargeCategory:
        if raw.strip().casefold() == category.value.casefold():
            return category
    allowed = ", ".join(c.value for c in ChargeCategory)
    raise BadValue(f"ChargeCategory {raw!r} is not one of {allowed}")


def _currency(record: Record) -> str:
    raw = record.required_text("BillingCurrency")
    if not _CURRENCY.fullmatch(raw.strip()):
        raise BadValue(f"BillingCurrency {raw[:40]!r} is not an ISO 4217 code")
    return raw.strip().upper()


def _charge_class(raw: str | None) -> str | None:
    # "Correction" is the only value the spec allows; anything else is kept as the file says.
    if raw is not None and raw.strip().casefold() == "correction":
        return "Correction"
    return raw


class Record:
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

    def key_text(self, column: str) -> str | None:
        """Text that is stored in a column of at most MAX_KEY_CHARS characters."""
        value = self.text(column)
        if value is not None and len(value) > MAX_KEY_CHARS:
            raise BadValue(f"{column} is {len(value)} characters, at most {MAX_KEY_CHARS}")
        return value

    def required_text(self, column: str) -> str:
        value = self.text(column)
        if value is None:
            raise BadValue(f"{column} is NULL")
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
        raise BadValue(f"{column} {raw[:40]!r} is not a number")
    try:
        value = Decimal(text)
    except InvalidOperation:  # cannot happen after the pattern; kept so no raw error escapes
        raise BadValue(f"{column} {raw[:40]!r} is not a number") from None
    if column in AMOUNT_COLUMNS and (problem := amount_problem(value)) is not None:
        raise BadValue(f"{column} {problem[:120]}")
    return value


def _parse_time(column: str, raw: str) -> datetime:
    try:
        value = datetime.fromisoformat(raw.strip())
        # FOCUS times are UTC; the official sample data just leaves the zone out.
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    except ValueError:
        raise BadValue(f"{column} {raw[:40]!r} is not a date-time") from None
    except OverflowError:  # 0001-01-01T00:00:00+01:00 is before the first UTC instant
        raise BadValue(f"{column} {raw[:40]!r} is out of range") from None
