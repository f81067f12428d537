"""`gpuwatch cost`'s real-work and energy figures: SM activity beside NVML's busy flag, and
energy, its cost and CO2 per useful token, read as the report reads them
(:mod:`agent.reporting.work_parts`), so the two commands cannot disagree."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from agent.config.slo import SloConfig, objective_for
from agent.reporting.figures import Figures
from agent.reporting.ledger_sums import Usage
from agent.reporting.queries import Gauges, Wanted, Window, gauges
from agent.reporting.render.fields import energy_record, work_record
from agent.reporting.render.values import json_value, text
from agent.reporting.slo_parts import model_slo
from agent.reporting.work_parts import energy_figures, work_totals

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from agent.config.settings import Config
    from agent.reporting.model import Energy, Work

EVERYTHING = Wanted(frozenset(), frozenset())
MODEL_KEYS = ("energy_kwh", "joules_per_useful_token", "co2_grams_per_million_tokens")


def read(
    conn: Connection, start: datetime, end: datetime, config: Config
) -> tuple[Work, Energy, dict[str, Energy], Gauges]:
    """The window's real work, its energy, each model's share of it, and the latency
    histograms' increases and span counts per model (for the objectives)."""
    rule = config.cost.useful_tokens
    window = Window.read(conn, start, end, EVERYTHING, [start])
    figures = Figures.of(window, EVERYTHING, rule)
    usages = list(figures.usage.values())
    total = sum(usages, Usage())
    useful = figures.produced.useful(rule)
    energy = energy_figures(total.energy, total.co2, useful, config.energy, total.energy_basis)
    models = {
        model: energy_figures(m.energy, m.co2, m.tokens.useful(rule), config.energy)
        for model, m in figures.model_sums().items()
    }
    return work_totals(usages), energy, models, gauges(conn, window.split, EVERYTHING)


def as_json(work: Work, energy: Energy) -> dict[str, Any]:
    cells = work_record(work) | energy_record(energy)
    return {key: json_value(cell) for key, cell in cells.items()}


def model_json(energy: Energy) -> dict[str, Any]:
    cells = energy_record(energy)
    return {key: json_value(cells[key]) for key in MODEL_KEYS}


def slo_json(
    model: str, cost_usd: str | None, measured: Gauges, slos: Sequence[SloConfig]
) -> dict[str, Any] | None:
    """A model's ``slo`` object (null where no objective applies)."""
    slo = objective_for(slos, model)
    if slo is None:
        return None
    cost = None if cost_usd is None else Decimal(cost_usd)
    row = model_slo(model, cost, measured.buckets, slo, measured.spans)
    return {
        "objective": row.objective,
        "thresholds_seconds": slo.thresholds(),
        "attainment": row.attainment,
        "attainment_lower": row.lower,
        "attainment_upper": row.upper,
        "exact": row.exact,
        "met": row.met,
        "basis": row.basis,
        "requests": row.requests,
        "good_requests": row.good_requests,
        "good_tokens": row.good_tokens,  # spans only: histograms count requests, not tokens
        "cost_per_million_good_tokens_usd": _usd(row.good_token_cost_per_million_usd),
        "missed_cost_usd": _usd(row.missed_cost_usd),
        "unmeasured": row.unmeasured,
    }


def _usd(amount: Decimal | None) -> str | None:
    return None if amount is None else str(round(amount, 6))


def lines(work: Work, energy: Energy) -> list[str]:
    """Two lines for people: real work beside the flag, and energy per useful token."""
    w, e = work_record(work), energy_record(energy)
    if work.sm_active_gpu_hours is None:
        sm = "SM activity  n/a (no GPM or dcgm-exporter profiling source): busy is NVML's flag"
    else:
        sm = (
            f"SM activity  {text(w['sm_active_gpu_hours'])} SM-active h of "
            f"{text(w['sm_observed_gpu_hours'])} h profiled; idle by SM activity "
            f"{text(w['sm_idle_cost_usd'])} (by NVML's flag over the same hours "
            f"{text(w['flag_idle_cost_usd_over_sm_hours'])})"
        )
    if energy.gpu_kwh is None:
        return [sm, "energy       n/a (no energy counter or power reading)"]
    return [
        sm,
        f"energy       {text(e['energy_kwh'])} kWh GPU ({text(e['energy_basis'])}), "
        f"{text(e['facility_energy_kwh'])} kWh facility, cost {text(e['energy_cost_usd'])}, "
        f"CO2 {text(e['co2_grams'])} g; per useful token {text(e['joules_per_useful_token'])} J,"
        f" {text(e['co2_grams_per_million_tokens'])} g CO2 per M",
    ]
