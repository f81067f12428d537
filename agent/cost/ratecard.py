"""The rate card: which `[[rates]]` line prices a GPU at an instant, and what that costs.

When several rates match, the most specific wins: a UUID over an index over "*", a named host
over any host, then the one valid from the latest date. Owned hardware is amortised over its
months (a month being 730.5 hours, 1/12 of an average year) plus energy at its kWh price.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal

from agent.config.rates import Rate

HOURS_PER_MONTH = Decimal("730.5")  # 365.25 * 24 / 12
JOULES_PER_KWH = Decimal(3_600_000)


@dataclass(frozen=True, slots=True)
class GpuPrice:
    """What one GPU costs at an instant: per hour of uptime, and per kWh it draws."""

    usd_per_hour: Decimal
    usd_per_kwh: Decimal | None = None

    def cost(self, seconds: Decimal, joules: Decimal | None) -> Decimal:
        """USD for ``seconds`` of uptime and ``joules`` of energy (None: energy not known)."""
        amount = self.usd_per_hour * seconds / 3600
        if self.usd_per_kwh is not None and joules is not None:
            amount += self.usd_per_kwh * joules / JOULES_PER_KWH
        return amount


@dataclass(frozen=True, slots=True)
class RateCard:
    rates: tuple[Rate, ...] = ()

    def price(
        self, host: str, gpu_uuid: str, gpu_index: str, gpus_on_host: int, at: datetime
    ) -> GpuPrice | None:
        """The price of one GPU at ``at``; None when no rate covers it (cost unknown)."""
        matching = [r for r in self.rates if _matches(r, host, gpu_uuid, gpu_index, at)]
        if not matching:
            return None
        rate = max(matching, key=Rate.specificity)
        if rate.usd_per_hour is not None:
            hourly = rate.usd_per_hour
        elif rate.usd_per_hour_instance is not None:
            hourly = rate.usd_per_hour_instance / max(gpus_on_host, 1)
        elif rate.purchase_usd is not None and rate.amortize_months:
            hourly = rate.purchase_usd / (rate.amortize_months * HOURS_PER_MONTH)
        else:
            hourly = Decimal(0)  # energy only
        return GpuPrice(hourly, rate.usd_per_kwh)


@dataclass
class GpuPrices:
    """:meth:`RateCard.price` of one GPU as a function of time, each answer kept for the
    stretch it holds: which rates match changes only at a rate's ``valid_from`` or
    ``valid_to``, so between two such bounds the price is one. The ledger asks for the price
    at both ends of every slice of every interval (a month of minutes is ~200 k asks a GPU);
    each is then a bisection and a dict look-up, not a walk over the rates."""

    card: RateCard
    host: str
    gpu_uuid: str
    gpu_index: str
    gpus_on_host: int
    _bounds: list[datetime] = field(init=False)
    _known: dict[int, GpuPrice | None] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        edges = {at for r in self.card.rates for at in (r.valid_from, r.valid_to) if at}
        self._bounds = sorted(edges)

    def __call__(self, at: datetime) -> GpuPrice | None:
        stretch = bisect_right(self._bounds, at)
        if stretch not in self._known:
            self._known[stretch] = self.card.price(
                self.host, self.gpu_uuid, self.gpu_index, self.gpus_on_host, at
            )
        return self._known[stretch]


def _matches(rate: Rate, host: str, uuid: str, index: str, at: datetime) -> bool:
    if rate.host is not None and rate.host != host:
        return False
    if rate.gpu not in ("*", uuid, index):
        return False
    if rate.valid_from is not None and at < rate.valid_from:
        return False
    return rate.valid_to is None or at < rate.valid_to
