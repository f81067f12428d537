"""The `[[rates]]` section: what a GPU costs per hour when no billing API says so.

A rate names its GPUs (a UUID, an index, or "*"), optionally a host, and a price in one unit:
``usd_per_hour``, ``usd_per_minute`` or ``usd_per_second`` per GPU, or
``usd_per_hour_instance`` for the whole machine (Lambda-style), split evenly across its GPUs.
Owned hardware has no hourly price: ``purchase_usd`` amortised over ``amortize_months``
plus energy at ``usd_per_kwh`` from the NVML energy counter. ``valid_from``/``valid_to`` bound a
rate in time (price changes). Which rate applies to a GPU at an instant, and what that costs, is
the cost room's business (:mod:`agent.cost.ratecard`); this module only reads and checks them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, time
from decimal import Decimal
from typing import Any

from agent.config.reader import Reader

PRICE_UNITS = {
    "usd_per_hour": Decimal(1),
    "usd_per_minute": Decimal(60),
    "usd_per_second": Decimal(3600),
}
_PRICE_KEYS = (*PRICE_UNITS, "usd_per_hour_instance", "purchase_usd")
# Bounds no real price reaches (the dearest GPU hour is tens of dollars): past them a value is a
# typo, and a month of it would overflow the ledger's NUMERIC columns.
MAX_HOURLY = Decimal(10**6)  # per GPU-hour; a whole instance may cost 64 GPUs' worth
MAX_KWH = Decimal(1000)
MAX_MONTHS = 1200  # a century


@dataclass(frozen=True, slots=True)
class Rate:
    """One line of the rate card, normalised to USD per GPU-hour where it can be."""

    gpu: str = "*"
    host: str | None = None
    usd_per_hour: Decimal | None = None  # per GPU
    usd_per_hour_instance: Decimal | None = None  # for the whole host
    purchase_usd: Decimal | None = None
    amortize_months: int | None = None
    usd_per_kwh: Decimal | None = None
    valid_from: datetime | None = None
    valid_to: datetime | None = None

    def specificity(self) -> tuple[int, int, datetime]:
        gpu = 2 if self.gpu.startswith(("GPU-", "MIG-")) else (0 if self.gpu == "*" else 1)
        since = self.valid_from or datetime.min.replace(tzinfo=UTC)
        return gpu, int(self.host is not None), since


def parse_rates(r: Reader, top: dict[str, Any]) -> tuple[Rate, ...]:
    """The ``[[rates]]`` array; problems go to ``r`` with their key paths."""
    allowed = {
        "gpu", "host", *PRICE_UNITS, "usd_per_hour_instance", "purchase_usd",
        "amortize_months", "usd_per_kwh", "valid_from", "valid_to",
    }  # fmt: skip
    return tuple(
        rate
        for i, item in enumerate(r.array(top, "rates"))
        if (rate := _rate(r, r.table(item, f"rates[{i}]", allowed), f"rates[{i}]")) is not None
    )


def _rate(r: Reader, t: dict[str, Any], path: str) -> Rate | None:
    problems_before = len(r.problems)
    prices = {
        unit: r.money(t, f"{path}.{unit}", MAX_HOURLY / PRICE_UNITS[unit]) for unit in PRICE_UNITS
    }
    given = {unit: v for unit, v in prices.items() if v is not None}
    instance = r.money(t, f"{path}.usd_per_hour_instance", MAX_HOURLY * 64)
    purchase = r.money(t, f"{path}.purchase_usd")
    months = r.number(t, f"{path}.amortize_months", 0, positive=True, maximum=MAX_MONTHS)
    kwh = r.money(t, f"{path}.usd_per_kwh", MAX_KWH)
    # Counted from the keys written, valid or not, so that "more than one price" is said in the
    # same pass as a wrong value of one of them.
    kinds = sum(f"{path}.{key}" in t for key in _PRICE_KEYS)
    if kinds == 0 and f"{path}.usd_per_kwh" not in t:
        r.problem(path, "no price: set usd_per_hour (or _minute, _second), usd_per_hour_instance, "
                        "or purchase_usd with amortize_months")  # fmt: skip
        return None
    if kinds > 1:
        r.problem(path, "more than one price; give exactly one unit")
        return None
    if len(r.problems) > problems_before:
        return None  # a wrong value, already reported
    if purchase is not None and not months:
        r.problem(f"{path}.amortize_months", "missing (purchase_usd is spread over it)")
        return None
    hourly = next((v * PRICE_UNITS[u] for u, v in given.items()), None)
    valid_from = _instant(r, t, f"{path}.valid_from")
    valid_to = _instant(r, t, f"{path}.valid_to")
    if valid_from and valid_to and valid_to <= valid_from:
        r.problem(f"{path}.valid_to", "must be after valid_from")
    return Rate(
        gpu=r.string(t, f"{path}.gpu", "*"),
        host=r.optional_string(t, f"{path}.host"),
        usd_per_hour=hourly,
        usd_per_hour_instance=instance,
        purchase_usd=purchase,
        amortize_months=int(months) if purchase is not None else None,
        usd_per_kwh=kwh,
        valid_from=valid_from,
        valid_to=valid_to,
    )


def _instant(r: Reader, t: dict[str, Any], key: str) -> datetime | None:
    """A TOML date or datetime, or an ISO 8601 string; naive means UTC."""
    value = t.get(key)
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            r.problem(
                key, f"expected a date like 2026-11-01 or 2026-11-01T00:00:00Z, got {value!r}"
            )
            return None
    if isinstance(value, datetime):
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    if isinstance(value, date):
        return datetime.combine(value, time(), tzinfo=UTC)
    r.problem(key, f"expected a date or datetime, got {value!r}")
    return None
