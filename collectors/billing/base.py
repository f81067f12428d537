"""Values every pricing source produces, and the errors they raise.

Money is exact: ``Decimal`` in the source's currency (USD unless the provider says otherwise),
never float. Times are UTC-aware.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from enum import Enum

from collectors.base import CollectError

# Bounds on what any billing source may report, checked before anything is stored. Why these:
# the database keeps money as NUMERIC(24, 12), under 10^12 (PostgreSQL refuses more, with an
# error that would escape the billing job), and a real charge is nowhere near it: a month of
# 10,000 GPUs at $10/h is $73M. So one record's amount must be finite with |amount| under
# $10^9: 1,000 times headroom under the column, room for sums of thousands of records, and far
# above any bill. A running resource costs at most $10^6 an hour (the largest instances cost
# about $100/h): metered spend (rate x uptime) then stays under the column for a century of
# uptime. Text stored in keyed columns is at most 255 characters (VARCHAR(255) on PostgreSQL).
MAX_ABS_AMOUNT = Decimal(10**9)
MAX_USD_PER_HOUR = Decimal(10**6)
MAX_GPUS = 10_000  # per resource; GPU counts are stored as a 32-bit integer
MAX_KEY_CHARS = 255
MAX_CURRENCY_CHARS = 8


def amount_problem(value: Decimal, limit: Decimal = MAX_ABS_AMOUNT) -> str | None:
    """Why ``value`` cannot be stored as money (not finite, or |value| >= ``limit``); None if
    it can."""
    if not value.is_finite():
        return f"{value} is not a finite number"
    if abs(value) >= limit:
        shown = str(value) if len(str(value)) <= 24 else f"{value:.6E}"  # not 5,000 digits
        return f"{shown} is out of bounds (|amount| must be under {limit:.0e})"
    return None


class CostKind(Enum):
    LIST = "list"  # at public prices, before discounts and credits
    BILLED = "billed"  # what the invoice says (credits and discounts included)
    EFFECTIVE = "effective"  # amortised commitments included (FOCUS EffectiveCost)


@dataclass(frozen=True, slots=True)
class CostRecord:
    """Money spent on one resource over one period, as a provider reports it.

    ``record_id`` is stable across fetches of the same period, so storing a record twice
    replaces it instead of counting it twice.
    """

    source: str  # "runpod", "lambda", "vast", "focus:<file or account>"
    record_id: str
    resource: str  # provider's id of the pod / instance / resource ("" when account-wide)
    period_start: datetime
    period_end: datetime
    amount: Decimal
    currency: str
    kind: CostKind
    description: str = ""


@dataclass(frozen=True, slots=True)
class HourlyRate:
    """What a running resource costs per hour now (the whole resource, in ``currency``)."""

    source: str
    resource: str
    name: str  # a human name: pod name, instance name, GPU type
    usd_per_hour: Decimal
    gpus: int  # how many GPUs the rate covers (Lambda prices the whole instance)
    observed_at: datetime
    started_at: datetime | None = None  # when the provider says it started, if it says


class BillingError(CollectError):
    """A pricing source failed; nothing from that fetch is stored."""


def check_record(record: CostRecord) -> None:
    """Raise BillingError naming the record when any of its fields cannot be stored."""
    where = f"{record.source} record {record.record_id[:80]!r}"
    problem = amount_problem(record.amount)
    if problem is not None:
        raise BillingError(f"{where}: amount {problem}", retryable=False)
    texts = {"source": record.source, "record id": record.record_id, "resource": record.resource}
    _check_text(where, {**texts, "description": record.description})
    if not record.currency or len(record.currency) > MAX_CURRENCY_CHARS:
        raise BillingError(
            f"{where}: currency {record.currency[:20]!r} is not a currency code", retryable=False
        )
    if record.period_end < record.period_start:
        raise BillingError(f"{where}: the period ends before it starts", retryable=False)


def check_rate(rate: HourlyRate) -> None:
    """Raise BillingError naming the resource when any of its fields cannot be stored."""
    where = f"{rate.source} resource {rate.resource[:80]!r}"
    problem = amount_problem(rate.usd_per_hour, MAX_USD_PER_HOUR)
    if problem is None and rate.usd_per_hour < 0:
        problem = f"{rate.usd_per_hour} is negative"
    if problem is not None:
        raise BillingError(f"{where}: USD per hour {problem}", retryable=False)
    if not 0 <= rate.gpus <= MAX_GPUS:
        raise BillingError(f"{where}: {rate.gpus} GPUs is not in 0..{MAX_GPUS}", retryable=False)
    _check_text(where, {"source": rate.source, "resource": rate.resource, "name": rate.name})


def _check_text(where: str, fields: dict[str, str]) -> None:
    for what, text in fields.items():
        if "\x00" in text:  # PostgreSQL refuses NUL in text; nothing a provider means by it
            raise BillingError(f"{where}: {what} holds a NUL character", retryable=False)
        if len(text) > MAX_KEY_CHARS and what != "description":
            raise BillingError(
                f"{where}: {what} is {len(text)} characters, at most {MAX_KEY_CHARS} are stored",
                retryable=False,
            )


class BillingAuthError(BillingError):
    """401/403: the credentials are missing or refused. Retrying will not help."""

    def __init__(self, message: str) -> None:
        super().__init__(message, retryable=False)
