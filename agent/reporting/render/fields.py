"""Every figure of a Report as named cells, in JSON key order.

JSON dumps these records whole; the tabular formats pick columns from them by key. Both go
through the same cells, so a figure has one rounding and one name (the JSON key, which is also
the CSV header) wherever it appears.
"""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from agent.reporting.model import (
    AlertRow,
    Budget,
    DailySpend,
    Efficiency,
    Energy,
    GpuDay,
    GpuRow,
    GroupRow,
    HostRow,
    ModelDay,
    ModelRow,
    Period,
    QueueIncident,
    Recommendation,
    Report,
    SloRow,
    SpendSource,
    TargetRow,
    TeamBudgetRow,
    Totals,
    Work,
)
from agent.reporting.render.serving_fields import serving_record
from agent.reporting.render.values import Cell, Kind, change_ratio, text

Record = dict[str, Cell]


def zone_of(report: Report) -> ZoneInfo:
    """The zone the report is read in; an unknown name (not expected) falls back to UTC."""
    try:
        return ZoneInfo(report.period.timezone)
    except (ZoneInfoNotFoundError, ValueError):
        return ZoneInfo("UTC")


def local(moment: datetime | None, zone: ZoneInfo) -> datetime | None:
    """Storage is UTC (naive values are taken as UTC); reports read in the configured zone."""
    if moment is None:
        return None
    aware = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    return aware.astimezone(zone)


def data_record(report: Report, zone: ZoneInfo) -> Record:
    """What the window holds (agent.cost.provisional): its first stored instant, and the
    instant everything stored up to is in the report."""
    return {
        "first": Cell(Kind.TIME, local(report.data.first, zone)),
        "complete_to": Cell(Kind.TIME, local(report.data.last, zone)),
    }


def data_note(report: Report) -> str:
    """One line for people: up to when the report's data is complete, and where the window
    has none."""
    if report.data.empty:
        return "no data for this period"
    record = data_record(report, zone_of(report))
    note = f"data complete to {text(record['complete_to'])}"
    first = report.data.first
    if first is not None and first > report.period.start:
        note += f"; no data before {text(record['first'])}"
    return note


def period_record(period: Period, zone: ZoneInfo) -> Record:
    return {
        "start": Cell(Kind.TIME, local(period.start, zone)),
        "end": Cell(Kind.TIME, local(period.end, zone)),
        "label": Cell(Kind.TEXT, period.label),
        "timezone": Cell(Kind.TEXT, period.timezone),
    }


def totals_record(t: Totals) -> Record:
    per_m, previous = t.cost_per_million_tokens_usd, t.previous_cost_per_million_tokens_usd
    return {
        "spend_usd": Cell(Kind.USD, t.spend_usd),
        "metered_usd": Cell(Kind.USD, t.metered_usd),
        "billed_usd": Cell(Kind.USD, t.billed_usd, "no billing records"),
        "useful_tokens": Cell(Kind.COUNT, t.useful_tokens),
        "output_tokens": Cell(Kind.COUNT, t.output_tokens),
        "total_tokens": Cell(Kind.COUNT, t.total_tokens),
        "requests": Cell(Kind.COUNT, t.requests),
        "cost_per_million_tokens_usd": Cell(Kind.USD_PER_M, per_m),
        "previous_cost_per_million_tokens_usd": Cell(Kind.USD_PER_M, previous),
        "cost_per_million_tokens_change_ratio": Cell(Kind.CHANGE, change_ratio(per_m, previous)),
        "gpu_hours": Cell(Kind.HOURS, t.gpu_hours),
        "busy_gpu_hours": Cell(Kind.HOURS, t.busy_gpu_hours),
        "idle_loaded_gpu_hours": Cell(Kind.HOURS, t.idle_loaded_gpu_hours),
        "unallocated_gpu_hours": Cell(Kind.HOURS, t.unallocated_gpu_hours),
        "utilization_ratio": Cell(Kind.RATIO, t.utilization_ratio),
        "idle_cost_usd": Cell(Kind.USD, t.idle_cost_usd),
        "generated_tokens": Cell(Kind.COUNT, t.generated_tokens),
        "abandoned_tokens": Cell(Kind.COUNT, t.abandoned_tokens, UNCOUNTED),
        "abandoned_cost_usd": Cell(Kind.USD, t.abandoned_cost_usd, UNCOUNTED),
        "cost_unknown_reason": Cell(Kind.TEXT, t.cost_unknown_reason, "none"),
        **work_record(t.work),
        **energy_record(t.energy),
    }


# What people read where no profiling source (GPM, dcgm-exporter) gave SM activity.
NO_SM = "no SM activity source"


def work_record(w: Work) -> Record:
    """Real work beside the flag: SM activity over the GPU-hours profiling covered."""
    return {
        "sm_observed_gpu_hours": Cell(Kind.HOURS, w.sm_observed_gpu_hours),
        "sm_active_gpu_hours": Cell(Kind.HOURS, w.sm_active_gpu_hours, NO_SM),
        "sm_idle_cost_usd": Cell(Kind.USD, w.sm_idle_cost_usd, NO_SM),
        "flag_idle_cost_usd_over_sm_hours": Cell(Kind.USD, w.flag_idle_cost_usd, NO_SM),
    }


def energy_record(e: Energy) -> Record:
    return {
        "energy_kwh": Cell(Kind.MEASURE, e.gpu_kwh),
        "facility_energy_kwh": Cell(Kind.MEASURE, e.facility_kwh),
        "energy_basis": Cell(Kind.TEXT, e.basis, "no energy reading"),
        "energy_cost_usd": Cell(Kind.USD, e.cost_usd, "no energy.usd_per_kwh"),
        "co2_grams": Cell(Kind.MEASURE, e.co2_grams, "no energy.grams_co2_per_kwh"),
        "joules_per_useful_token": Cell(Kind.MEASURE, e.joules_per_useful_token),
        "co2_grams_per_million_tokens": Cell(
            Kind.MEASURE, e.co2_grams_per_million_tokens, "no energy.grams_co2_per_kwh"
        ),
    }


def efficiency_record(e: Efficiency) -> Record:
    return {
        "mfu_ratio": Cell(Kind.RATIO, e.mfu_ratio),
        "mbu_ratio": Cell(Kind.RATIO, e.mbu_ratio),
        "mfu_target_ratio": Cell(Kind.RATIO, e.mfu_target_ratio, "no cost.mfu_target"),
        "mfu_gap_usd": Cell(Kind.USD, e.mfu_gap_usd),
        "efficiency_basis": Cell(Kind.TEXT, e.basis, "no FLOPs estimate"),
    }


# What people read where an engine does not say what clients abandoned.
UNCOUNTED = "not counted"


def _cost(value: Decimal, reason: str | None) -> Cell:
    """A cost that may be unknown (no rate for some of its GPU time): null, never zero."""
    return Cell(Kind.USD, None if reason else value)


def spend_source_record(s: SpendSource) -> Record:
    return {
        "source": Cell(Kind.TEXT, s.source),
        "kind": Cell(Kind.TEXT, s.kind),
        "spend_usd": Cell(Kind.USD, s.usd),
    }


def model_record(m: ModelRow) -> Record:
    per_m, previous = m.cost_per_million_tokens_usd, m.previous_cost_per_million_tokens_usd
    # No token source at all (Ollama has no token counters): unknown, not 0 tokens.
    counted = m.tokens_counted
    record: Record = {
        "model": Cell(Kind.TEXT, m.model),
        "requests": Cell(Kind.COUNT, m.requests if counted else None, UNCOUNTED),
        "useful_tokens": Cell(Kind.COUNT, m.useful_tokens if counted else None, UNCOUNTED),
        "output_tokens": Cell(Kind.COUNT, m.output_tokens if counted else None, UNCOUNTED),
        "total_tokens": Cell(Kind.COUNT, m.total_tokens if counted else None, UNCOUNTED),
        "cost_usd": _cost(m.cost_usd, m.cost_unknown_reason),
        "cost_per_million_tokens_usd": Cell(Kind.USD_PER_M, per_m),
        "previous_cost_per_million_tokens_usd": Cell(Kind.USD_PER_M, previous),
        "cost_per_million_tokens_change_ratio": Cell(Kind.CHANGE, change_ratio(per_m, previous)),
        "useful_tokens_source": Cell(Kind.TEXT, m.useful_tokens_source),
        "generated_tokens": Cell(Kind.COUNT, m.generated_tokens),
        "abandoned_tokens": Cell(Kind.COUNT, m.abandoned_tokens, UNCOUNTED),
        "abandoned_requests": Cell(Kind.COUNT, m.abandoned_requests),
        "abandoned_cost_usd": Cell(Kind.USD, m.abandoned_cost_usd, UNCOUNTED),
        "cost_unknown_reason": Cell(Kind.TEXT, m.cost_unknown_reason, ""),
        "idle_cost_usd": _cost(m.idle_cost_usd, m.cost_unknown_reason),
    }
    for name, latency in (("ttft", m.ttft), ("e2e", m.e2e)):
        record[f"p50_{name}_seconds"] = Cell(Kind.SECONDS, latency.p50_seconds)
        record[f"p95_{name}_seconds"] = Cell(Kind.SECONDS, latency.p95_seconds)
        record[f"p99_{name}_seconds"] = Cell(Kind.SECONDS, latency.p99_seconds)
        record[f"{name}_observations"] = Cell(Kind.COUNT, latency.count)
    energy = energy_record(m.energy)
    for key in ("energy_kwh", "joules_per_useful_token", "co2_grams_per_million_tokens"):
        record[key] = Cell(energy[key].kind, energy[key].value)  # "n/a" in a row
    return record | efficiency_record(m.efficiency) | slo_record(m.slo) | serving_record(m.serving)


# What people read for a model no [[slo]] applies to.
NO_SLO = "no objective"


def slo_record(s: SloRow | None) -> Record:
    """A model's objective, flat (``slo_*``): null throughout where none applies."""
    met = None if s is None or s.met is None else ("met" if s.met else "missed")
    return {
        "slo_thresholds": Cell(Kind.TEXT, None if s is None else s.thresholds, NO_SLO),
        "slo_objective_ratio": Cell(Kind.RATIO, None if s is None else s.objective, NO_SLO),
        "slo_attainment_ratio": Cell(Kind.RATIO, None if s is None else s.attainment),
        "slo_attainment_lower_ratio": Cell(Kind.RATIO, None if s is None else s.lower),
        "slo_attainment_upper_ratio": Cell(Kind.RATIO, None if s is None else s.upper),
        "slo_met": Cell(Kind.TEXT, met, "cannot tell" if s is not None else NO_SLO),
        "slo_basis": Cell(Kind.TEXT, None if s is None else s.basis, NO_SLO),
        "slo_good_requests": Cell(Kind.COUNT, None if s is None else s.good_requests),
        "slo_missed_cost_usd": Cell(Kind.USD, None if s is None else s.missed_cost_usd),
        "slo_good_tokens": Cell(Kind.COUNT, None if s is None else s.good_tokens),
        "slo_good_token_cost_per_million_usd": Cell(
            Kind.USD_PER_M, None if s is None else s.good_token_cost_per_million_usd
        ),
    }


def host_record(h: HostRow) -> Record:
    per_m, previous = h.cost_per_million_tokens_usd, h.previous_cost_per_million_tokens_usd
    return {
        "host": Cell(Kind.TEXT, h.host),
        "gpu_hours": Cell(Kind.HOURS, h.gpu_hours),
        "utilization_ratio": Cell(Kind.RATIO, h.utilization_ratio),
        "cost_usd": _cost(h.cost_usd, h.cost_unknown_reason),
        "useful_tokens": Cell(Kind.COUNT, h.useful_tokens),
        "cost_per_million_tokens_usd": Cell(Kind.USD_PER_M, per_m),
        "previous_cost_per_million_tokens_usd": Cell(Kind.USD_PER_M, previous),
        "cost_per_million_tokens_change_ratio": Cell(Kind.CHANGE, change_ratio(per_m, previous)),
        "cost_unknown_reason": Cell(Kind.TEXT, h.cost_unknown_reason, ""),
    }


def gpu_record(g: GpuRow) -> Record:
    return {
        "host": Cell(Kind.TEXT, g.host),
        "gpu_uuid": Cell(Kind.TEXT, g.gpu_uuid),
        "gpu_index": Cell(Kind.TEXT, g.gpu_index),
        "gpu_name": Cell(Kind.TEXT, g.gpu_name, "unknown"),
        "cost_usd": _cost(g.cost_usd, g.cost_unknown_reason),
        "idle_cost_usd": _cost(g.idle_cost_usd, g.cost_unknown_reason),
        "observed_hours": Cell(Kind.HOURS, g.observed_hours),
        "busy_hours": Cell(Kind.HOURS, g.busy_hours),
        "utilization_ratio": Cell(Kind.RATIO, g.utilization_ratio),
        "vram_peak_bytes": Cell(Kind.BYTES, g.vram_peak_bytes),
        "vram_total_bytes": Cell(Kind.BYTES, g.vram_total_bytes),
        "cost_unknown_reason": Cell(Kind.TEXT, g.cost_unknown_reason, ""),
        "shared_split": Cell(Kind.TEXT, g.shared_split, ""),
        "activity_basis": Cell(Kind.TEXT, g.activity_basis),
        "sm_active_hours": Cell(Kind.HOURS, g.sm_active_hours),
        "sm_active_ratio": Cell(Kind.RATIO, g.sm_active_ratio),
        "sm_idle_cost_usd": Cell(Kind.USD, g.sm_idle_cost_usd),
        "energy_kwh": Cell(Kind.MEASURE, g.energy_kwh),
        "energy_basis": Cell(Kind.TEXT, g.energy_basis, "no energy reading"),
        "co2_grams": Cell(Kind.MEASURE, g.co2_grams),
    }


def group_record(g: GroupRow) -> Record:
    """A team's or a project's row (agent.reporting.team_parts); unknown cost stays unknown."""
    return {
        "name": Cell(Kind.TEXT, g.name),
        "cost_usd": _cost(g.cost_usd, g.cost_unknown_reason),
        "useful_tokens": Cell(Kind.COUNT, g.useful_tokens),
        "cost_per_million_tokens_usd": Cell(Kind.USD_PER_M, g.cost_per_million_tokens_usd),
        "idle_cost_usd": _cost(g.idle_cost_usd, g.cost_unknown_reason),
        "gpu_hours": Cell(Kind.HOURS, g.gpu_hours),
        "utilization_ratio": Cell(Kind.RATIO, g.utilization_ratio),
        "targets": Cell(Kind.TEXT, ", ".join(g.targets)),
        "cost_unknown_reason": Cell(Kind.TEXT, g.cost_unknown_reason, ""),
    }


def team_budget_record(b: TeamBudgetRow) -> Record:
    return {
        "team": Cell(Kind.TEXT, b.team),
        "month": Cell(Kind.TEXT, b.month),
        "monthly_usd": Cell(Kind.USD, b.monthly_usd, "none configured"),
        "spent_usd": Cell(Kind.USD, b.spent_usd),
        "used_ratio": Cell(Kind.RATIO, b.used_ratio),
        "forecast_usd": Cell(Kind.USD, b.forecast_usd),
        "forecast_ratio": Cell(Kind.RATIO, b.forecast_ratio),
    }


def alert_record(a: AlertRow) -> Record:
    return {
        "rule": Cell(Kind.TEXT, a.rule),
        "count": Cell(Kind.COUNT, a.count),
        "firing_seconds": Cell(Kind.DURATION, a.firing_seconds),
    }


def incident_record(q: QueueIncident, zone: ZoneInfo) -> Record:
    return {
        "fired_at": Cell(Kind.TIME, local(q.fired_at, zone)),
        "resolved_at": Cell(Kind.TIME, local(q.resolved_at, zone), "still firing"),
        "host": Cell(Kind.TEXT, q.host),
        "target": Cell(Kind.TEXT, q.target),
        "model": Cell(Kind.TEXT, q.model),
        "summary": Cell(Kind.TEXT, q.summary),
    }


def budget_record(b: Budget) -> Record:
    return {
        "month": Cell(Kind.TEXT, b.month),
        "monthly_usd": Cell(Kind.USD, b.monthly_usd, "none configured"),
        "spent_usd": Cell(Kind.USD, b.spent_usd),
        "used_ratio": Cell(Kind.RATIO, b.used_ratio),
        "forecast_usd": Cell(Kind.USD, b.forecast_usd),
        "forecast_ratio": Cell(Kind.RATIO, b.forecast_ratio),
        "forecast_basis": Cell(Kind.TEXT, b.forecast_basis),
    }


def recommendation_record(r: Recommendation) -> Record:
    return {
        "kind": Cell(Kind.TEXT, r.kind),
        "title": Cell(Kind.TEXT, r.title),
        "detail": Cell(Kind.TEXT, r.detail),
        "saving_usd_per_month": Cell(Kind.USD, r.saving_usd_per_month),
    }


def daily_spend_record(d: DailySpend) -> Record:
    return {
        "day": Cell(Kind.DAY, d.day),
        "busy_usd": Cell(Kind.USD, d.busy_usd),
        "idle_usd": Cell(Kind.USD, d.idle_usd),
        "total_usd": Cell(Kind.USD, d.busy_usd + d.idle_usd),
    }


def model_day_record(m: ModelDay) -> Record:
    return {
        "model": Cell(Kind.TEXT, m.model),
        "day": Cell(Kind.DAY, m.day),
        "cost_per_million_tokens_usd": Cell(Kind.USD_PER_M, m.cost_per_million_tokens_usd),
    }


def gpu_day_record(g: GpuDay) -> Record:
    return {
        "host": Cell(Kind.TEXT, g.host),
        "gpu_uuid": Cell(Kind.TEXT, g.gpu_uuid),
        "gpu_index": Cell(Kind.TEXT, g.gpu_index),
        "day": Cell(Kind.DAY, g.day),
        "utilization_ratio": Cell(Kind.RATIO, g.utilization_ratio),
    }


def target_record(t: TargetRow) -> Record:
    return {
        "host": Cell(Kind.TEXT, t.host),
        "target": Cell(Kind.TEXT, t.target),
        "gpu_hours": Cell(Kind.HOURS, t.gpu_hours),
        "busy_gpu_hours": Cell(Kind.HOURS, t.busy_gpu_hours),
        "utilization_ratio": Cell(
            Kind.RATIO, t.busy_gpu_hours / t.gpu_hours if t.gpu_hours else None
        ),
        "cost_usd": _cost(t.cost_usd, t.cost_unknown_reason),
        "idle_cost_usd": _cost(t.idle_cost_usd, t.cost_unknown_reason),
        "cost_unknown_reason": Cell(Kind.TEXT, t.cost_unknown_reason, ""),
    }
