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
half-read export can never be stored as if it were the whole bill. Large files are streamed
(:class:`FocusReader`), and what an import prints is summed as the rows go by
(:class:`FocusTotals`), so memory does not grow with the file.

The module is the entry point: reading is in focus_csv.py (the file) and focus_row.py (one
record), and what rows add up to (cost records, month to date, burn rate) is here.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import TypeVar

from collectors.billing.base import CostKind, CostRecord
from collectors.billing.focus_csv import FocusError, FocusFile, FocusReader, read_focus
from collectors.billing.focus_row import KEY_COLUMNS, REQUIRED_COLUMNS, ChargeCategory, FocusRow

__all__ = [
    "KEY_COLUMNS",
    "REQUIRED_COLUMNS",
    "ChargeCategory",
    "FocusError",
    "FocusFile",
    "FocusReader",
    "FocusRow",
    "FocusTotals",
    "burn_rate_per_hour",
    "month_to_date_billed",
    "read_focus",
    "cost_records",
    "to_cost_records",
]

_HOUR = timedelta(hours=1)
_K = TypeVar("_K")
_MICROSECOND = timedelta(microseconds=1)


def to_cost_records(file: FocusFile, source: str) -> list[CostRecord]:
    """Each row as a BILLED record and, when it has an EffectiveCost, an EFFECTIVE one.

    Both kinds are kept because they answer different questions: BilledCost adds up to the
    invoice, EffectiveCost spreads prepaid commitments over the usage they cover (burn rate,
    cost per token). Their ids are ``row_key + ":billed"`` and ``row_key + ":effective"``, so
    storing the file again replaces both instead of counting them twice.
    """
    return [record for row in file.rows for record in cost_records(row, source)]


def cost_records(row: FocusRow, source: str) -> list[CostRecord]:
    """One row's records, as ``to_cost_records`` makes them."""
    records = [_record(row, source, CostKind.BILLED, row.billed_cost)]
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
        period = (row.charge_period_start, row.charge_period_end)
        share = _share_in_window(row.effective_cost, period, start, end)
        if share is not None:
            currency = row.billing_currency
            totals[currency] = totals.get(currency, Decimal(0)) + share
    # Multiply before dividing: one rounding per currency, and exact for whole windows.
    window = _micros(end - start)
    return {cur: total * _micros(_HOUR) / window for cur, total in totals.items()}


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
    cost: Decimal, period: tuple[datetime, datetime], start: datetime, end: datetime
) -> Decimal | None:
    length = period[1] - period[0]
    if not length:
        return cost if start <= period[0] < end else None
    overlap = min(end, period[1]) - max(start, period[0])
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


_DAY = timedelta(days=1)


@dataclass(frozen=True, slots=True)
class Summary:
    """What an import of some files adds up to (see :class:`FocusTotals`)."""

    month: datetime  # the first instant of the month of the latest charge
    month_to_date: dict[str, Decimal]
    burn_per_hour: dict[str, Decimal]


class FocusTotals:
    """The month to date and burn rate of rows seen one at a time, in bounded memory.

    Gives what ``month_to_date_billed`` and ``burn_rate_per_hour`` would over all the rows, for
    the month of the latest charge up to the latest charge end, and for the last 24 hours of
    charges, without keeping the rows: billed cost is summed per month and currency, and the
    effective cost of usage per charge period and currency, forgetting periods that ended more
    than a day before the latest end seen (they cannot reach the last 24 hours). A rows's
    start can only equal the latest end when it is a zero-length charge at that very instant,
    which the month to date leaves out ([month, end)): those are summed apart and subtracted.
    """

    def __init__(self) -> None:
        self.rows = 0
        self._first: datetime | None = None
        self._last_start: datetime | None = None
        self._end: datetime | None = None
        self._months: dict[tuple[datetime, str], tuple[Decimal, int]] = {}
        self._at_end: dict[str, tuple[Decimal, int]] = {}
        self._usage: dict[tuple[datetime, datetime, str], Decimal] = {}
        self._prune_at = 1024

    def add(self, row: FocusRow) -> None:
        start, end, currency = row.charge_period_start, row.charge_period_end, row.billing_currency
        self.rows += 1
        self._first = start if self._first is None else min(self._first, start)
        self._last_start = start if self._last_start is None else max(self._last_start, start)
        if self._end is None or end > self._end:
            self._end, self._at_end = end, {}
        month = _month(start)
        _add(self._months, (month, currency), row.billed_cost)
        if start == self._end:
            _add(self._at_end, currency, row.billed_cost)
        if row.charge_category is ChargeCategory.USAGE and row.effective_cost is not None:
            key = (start, end, currency)
            self._usage[key] = self._usage.get(key, Decimal(0)) + row.effective_cost
            if len(self._usage) >= self._prune_at:
                self._prune()

    def summary(self) -> Summary | None:
        """None when no row was added."""
        if self._first is None or self._last_start is None or self._end is None:
            return None
        month, end = _month(self._last_start), self._end
        mtd: dict[str, Decimal] = {}
        for (row_month, currency), (amount, count) in self._months.items():
            less, fewer = self._at_end.get(currency, (Decimal(0), 0))
            if row_month == month and count > fewer:
                mtd[currency] = amount - less
        day_start = max(end - _DAY, self._first)
        return Summary(month, mtd, self._burn(day_start, end) if end > day_start else {})

    def _burn(self, start: datetime, end: datetime) -> dict[str, Decimal]:
        totals: dict[str, Decimal] = {}
        for (period_start, period_end, currency), cost in self._usage.items():
            share = _share_in_window(cost, (period_start, period_end), start, end)
            if share is not None:
                totals[currency] = totals.get(currency, Decimal(0)) + share
        window = _micros(end - start)
        return {cur: total * _micros(_HOUR) / window for cur, total in totals.items()}

    def _prune(self) -> None:
        assert self._end is not None
        horizon = self._end - _DAY
        # Strictly before: a zero-length charge exactly at the window's start still counts.
        self._usage = {key: cost for key, cost in self._usage.items() if key[1] >= horizon}
        self._prune_at = max(1024, 2 * len(self._usage))


def _add(sums: dict[_K, tuple[Decimal, int]], key: _K, amount: Decimal) -> None:
    total, count = sums.get(key, (Decimal(0), 0))
    sums[key] = (total + amount, count + 1)


def _month(when: datetime) -> datetime:
    return when.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
