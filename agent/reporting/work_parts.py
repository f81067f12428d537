"""The report's real-work and energy figures, from the ledger's sums.

SM activity (GPM or dcgm-exporter profiling) is counted only over the GPU-hours a source gave
it; the idle dollars by SM activity stand beside the flag's idle dollars over the same hours,
so the two bases compare like for like. Energy per useful token divides a model's share of its
GPUs' energy by its useful tokens; CO2 is the facility's energy (x PUE) at the grid intensity of
each metered hour. Unknown stays None.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal

from agent.config.energy import EnergyConfig
from agent.cost.carbon import (
    JOULES_PER_KWH,
    energy_cost_usd,
    facility_kwh,
    grams_per_million_tokens,
    joules_per_token,
)
from agent.reporting.figures import hours
from agent.reporting.ledger_sums import Usage
from agent.reporting.model import Energy, Work


@dataclass(frozen=True, slots=True)
class GpuWork:
    """A GPU row's real-work and energy cells."""

    sm_active_hours: float | None
    sm_active_ratio: float | None
    sm_idle_cost_usd: Decimal | None
    activity_basis: str
    energy_kwh: float | None
    energy_basis: str | None
    co2_grams: float | None


def gpu_work(u: Usage) -> GpuWork:
    known = u.sm_observed > 0
    return GpuWork(
        sm_active_hours=hours(u.sm_active) if known else None,
        sm_active_ratio=u.sm_activity,
        sm_idle_cost_usd=u.sm_idle if known and u.unpriced <= 0 else None,
        activity_basis=u.activity_basis,
        energy_kwh=None if u.energy is None else u.energy / JOULES_PER_KWH,
        energy_basis=u.energy_basis,
        co2_grams=u.co2,
    )


def work_totals(usages: Iterable[Usage]) -> Work:
    """SM figures over the GPUs and hours profiling covered; the flag's idle dollars over the
    same GPUs' covered share, prorated by the covered fraction of each GPU's hours."""
    covered = [u for u in usages if u.sm_observed > 0]
    if not covered:
        return Work()
    priced = all(u.unpriced <= 0 for u in covered)
    flag_idle = sum(
        (u.idle * Decimal(repr(u.sm_observed / u.observed)) for u in covered if u.observed),
        Decimal(0),
    )
    return Work(
        sm_observed_gpu_hours=hours(sum(u.sm_observed for u in covered)),
        sm_active_gpu_hours=hours(sum(u.sm_active for u in covered)),
        sm_idle_cost_usd=sum((u.sm_idle for u in covered), Decimal(0)) if priced else None,
        flag_idle_cost_usd=flag_idle if priced else None,
    )


def energy_figures(
    joules: float | None,
    co2_grams: float | None,
    useful_tokens: float,
    energy: EnergyConfig,
    basis: str | None = None,
) -> Energy:
    """Energy, its cost at ``[energy] usd_per_kwh`` and its CO2, in total and per useful
    token."""
    if joules is None:
        return Energy()
    return Energy(
        gpu_kwh=joules / JOULES_PER_KWH,
        facility_kwh=facility_kwh(joules, energy.pue),
        basis=basis,
        cost_usd=energy_cost_usd(joules, energy),
        co2_grams=co2_grams,
        joules_per_useful_token=joules_per_token(joules, useful_tokens),
        co2_grams_per_million_tokens=grams_per_million_tokens(co2_grams, useful_tokens),
    )
