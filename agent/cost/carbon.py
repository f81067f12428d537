"""Energy and carbon arithmetic, pure: GPU joules into facility kWh, grams of CO2, dollars and
per-token figures.

The GPUs' energy counters measure the GPUs alone; the facility draws more for the same work
(cooling, power conversion), which the PUE states: facility energy = GPU energy x PUE. CO2 and
energy's cost are of the facility's energy, since that is what the grid supplies and the meter
bills. Unknown stays unknown: a figure with an unknown input is None, never 0, and an hour
without an intensity borrows none from its neighbours (:class:`Intensity`).
"""

from __future__ import annotations

import math
from datetime import datetime
from decimal import Decimal

from agent.config.energy import EnergyConfig
from agent.config.energy import Intensity as Intensity
from agent.cost.ledger import Co2Of

JOULES_PER_KWH = 3.6e6
_JOULES_PER_KWH = Decimal(3_600_000)
_MONEY = Decimal("1e-12")  # the ledger's scale (Numeric(24, 12)): sums of it do not drift


def facility_kwh(gpu_joules: float | None, pue: float) -> float | None:
    """The facility's kWh for ``gpu_joules`` of GPU energy at power usage effectiveness
    ``pue``; None where the joules are unknown."""
    if gpu_joules is None:
        return None
    _check(gpu_joules, "joules")
    if not math.isfinite(pue) or pue < 1:
        raise ValueError(f"a PUE is at least 1, got {pue!r}")
    return gpu_joules * pue / JOULES_PER_KWH


def co2_grams(joules: float | None, at: datetime, energy: EnergyConfig) -> float | None:
    """Grams of CO2 for ``joules`` of GPU energy used in the hour of ``at``: facility kWh x
    the grid's intensity then. None where the energy or that hour's intensity is unknown.

    The joules are all charged at ``at``'s intensity: callers split energy at hour edges (the
    ledger's buckets are minutes and hours, so each slice lies within one hour)."""
    kwh = facility_kwh(joules, energy.pue)
    if kwh is None or energy.intensity is None:
        return None
    grams = energy.intensity.grams_per_kwh(at)
    return None if grams is None else kwh * grams


def co2_of(energy: EnergyConfig) -> Co2Of | None:
    """:func:`co2_grams` at this configuration, as the ledger takes it; None where no intensity
    is configured (CO2 is not counted at all)."""
    if energy.intensity is None:
        return None
    return lambda joules, at: co2_grams(joules, at, energy)


def energy_cost_usd(joules: float | None, energy: EnergyConfig) -> Decimal | None:
    """What the facility energy of ``joules`` of GPU energy costs at ``[energy] usd_per_kwh``,
    exact to the ledger's 12 decimals; None where the joules or the price are unknown."""
    if joules is None or energy.usd_per_kwh is None:
        return None
    _check(joules, "joules")
    # repr() is the float's shortest exact spelling: 0.1 becomes Decimal("0.1"), not 0.1000...
    facility = Decimal(repr(joules)) * Decimal(repr(energy.pue))
    return (facility * energy.usd_per_kwh / _JOULES_PER_KWH).quantize(_MONEY)


def joules_per_token(joules: float | None, tokens: float | None) -> float | None:
    """GPU joules per token; None where either is unknown or no token was made."""
    if joules is None or not tokens:
        return None
    return joules / tokens


def grams_per_million_tokens(grams: float | None, tokens: float | None) -> float | None:
    """Grams of CO2 per million tokens; None where either is unknown or no token was made."""
    if grams is None or not tokens:
        return None
    return grams * 1e6 / tokens


def _check(value: float, what: str) -> None:
    # Energy counters only grow (a reset is new energy): a negative amount is a bug upstream,
    # and carrying it on would subtract CO2.
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{what} must be a finite amount of at least 0, got {value!r}")
