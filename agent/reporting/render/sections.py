"""The report as titled sections of rows and columns: what the table, CSV, markdown and HTML
formats lay out, each in its own way, from the same cells.

Column keys are JSON keys (and CSV headers); labels are what people read. Sections keep the
columns that fit a 100-column terminal; JSON has every field (see :mod:`.fields`).
"""

from __future__ import annotations

from agent.reporting.basis import spend_note
from agent.reporting.model import Report
from agent.reporting.render import fields
from agent.reporting.render.fields import Record
from agent.reporting.render.grid import PAIR_COLUMNS as PAIR_COLUMNS
from agent.reporting.render.grid import Column as Column
from agent.reporting.render.grid import Layout as Layout
from agent.reporting.render.grid import Section as Section
from agent.reporting.render.grid import each as _each
from agent.reporting.render.grid import grid as _grid
from agent.reporting.render.grid import pairs as _pairs
from agent.reporting.render.grid import text_column as _text
from agent.reporting.render.mig_sections import mig_sections
from agent.reporting.render.model_sections import aborted_sections
from agent.reporting.render.model_sections import objectives_sections as _objectives
from agent.reporting.render.model_sections import serving_section as _serving
from agent.reporting.render.pod_sections import pod_sections
from agent.reporting.render.tenant_sections import tenant_sections
from agent.reporting.render.values import Cell, Kind


def meta_section(report: Report) -> Section:
    """What the report is about; CSV's first section (the other formats have a header)."""
    zone = fields.zone_of(report)
    record: Record = {
        "schema_version": Cell(Kind.COUNT, report.schema_version),
        "generated_at": Cell(Kind.TIME, fields.local(report.generated_at, zone)),
        **{f"period_{k}": v for k, v in fields.period_record(report.period, zone).items()},
        **{
            f"previous_period_{k}": v
            for k, v in fields.period_record(report.previous_period, zone).items()
            if k != "timezone"
        },
        "hosts_filter": Cell(Kind.TEXT, ", ".join(report.hosts_filter)),
        "models_filter": Cell(Kind.TEXT, ", ".join(report.models_filter)),
        "useful_tokens_rule": Cell(Kind.TEXT, report.useful_tokens_rule),
        **{f"data_{k}": v for k, v in fields.data_record(report, zone).items()},
    }
    return _pairs("report", "Report", record, {k: k.replace("_", " ") for k in record})


SUMMARY_LABELS = {
    "spend_usd": "spend (billed or metered: see note)",
    "metered_usd": "metered (rate card x GPU time)",
    "billed_usd": "billed by providers",
    "useful_tokens": "useful tokens",
    "output_tokens": "output tokens",
    "total_tokens": "total tokens",
    "requests": "requests",
    "cost_per_million_tokens_usd": "cost per million useful tokens (metered)",
    "previous_cost_per_million_tokens_usd": "the same, previous period",
    "cost_per_million_tokens_change_ratio": "change vs previous period",
    "gpu_hours": "GPU hours",
    "busy_gpu_hours": "busy GPU hours",
    "idle_loaded_gpu_hours": "idle but loaded GPU hours",
    "unallocated_gpu_hours": "unallocated GPU hours",
    "utilization_ratio": "utilization",
    "idle_cost_usd": "idle cost",
    "abandoned_tokens": "abandoned output tokens",
    "abandoned_cost_usd": "abandoned work cost",
    "sm_observed_gpu_hours": "GPU hours with SM activity known (GPM or DCGM)",
    "sm_active_gpu_hours": "SM-active GPU hours",
    "sm_idle_cost_usd": "idle cost by SM activity (those hours)",
    "flag_idle_cost_usd_over_sm_hours": "idle cost by NVML's busy flag (same hours)",
    "energy_kwh": "GPU energy, kWh",
    "facility_energy_kwh": "facility energy (x PUE), kWh",
    "energy_basis": "energy from",
    "energy_cost_usd": "energy cost",
    "co2_grams": "CO2, grams",
    "joules_per_useful_token": "joules per useful token",
    "co2_grams_per_million_tokens": "grams CO2 per million useful tokens",
}

BUDGET_LABELS = {
    "month": "month",
    "monthly_usd": "monthly budget",
    "spent_usd": "spent, month to date",
    "used_ratio": "budget used",
    "forecast_usd": "month-end forecast",
    "forecast_ratio": "forecast vs budget",
    "forecast_basis": "forecast basis",
}

_PER_M = (
    Column("cost_per_million_tokens_usd", "$/M tokens"),
    Column("previous_cost_per_million_tokens_usd", "previous"),
    Column("cost_per_million_tokens_change_ratio", "vs previous"),
)
_GPU = (_text("host", "host"), Column("gpu_index", "#"), _text("gpu_uuid", "GPU UUID"))


def sections(report: Report, *, daily: bool = True) -> list[Section]:
    """Every section, in reading order; the daily series last (``daily``: False leaves them
    out: a fleet's month is tens of thousands of GPU-day rows a text report does not print)."""
    return [
        _summary(report),
        _spend_sources(report),
        _models(report),
        _work(report),
        *aborted_sections(report),
        _targets(report),
        _hosts(report),
        *group_sections(report),
        *tenant_sections(report),
        *pod_sections(report),
        _efficiency(report),
        *_objectives(report),
        _serving(report),
        _gpus(report),
        *mig_sections(report),
        _real_work(report),
        _top_waste(report),
        _latency(report),
        _alerts(report),
        _queue_incidents(report),
        _pairs("budget", "Budget", fields.budget_record(report.budget), BUDGET_LABELS),
        *team_budget_sections(report),
        _recommendations(report),
        *(daily_sections(report) if daily else ()),
    ]


def _summary(report: Report) -> Section:
    record = fields.totals_record(report.totals)
    note = spend_note(report.totals, report.useful_tokens_rule)
    if report.totals.cost_unknown_reason:
        note += f"; cost per million tokens unknown: {report.totals.cost_unknown_reason}"
    return _pairs("summary", "Summary", record, SUMMARY_LABELS, note)


def _spend_sources(report: Report) -> Section:
    columns = (
        _text("source", "source"),
        _text("kind", "kind", False),
        Column("spend_usd", "spend"),
    )
    records = _each(report.spend_sources, fields.spend_source_record)
    return _grid("spend_sources", "Spend by source", columns, records)


def _models(report: Report) -> Section:
    columns = (
        _text("model", "model"),
        Column("requests", "requests"),
        Column("useful_tokens", "useful tokens"),
        Column("cost_usd", "cost"),
        *_PER_M,
    )
    records = _each(report.models, fields.model_record)
    note = f"previous period: {report.previous_period.label}"
    return _grid("models", "Models", columns, records, note=note)


def _work(report: Report) -> Section:
    """Per model: how its useful tokens were counted, and what was generated for nobody."""
    columns = (
        _text("model", "model"),
        _text("useful_tokens_source", "counted from", False),
        Column("generated_tokens", "generated"),
        Column("output_tokens", "useful output"),
        Column("abandoned_tokens", "abandoned"),
        Column("abandoned_cost_usd", "abandoned $"),
        Column("idle_cost_usd", "idle $"),
        _text("cost_unknown_reason", "cost unknown"),
    )
    records = _each(report.models, fields.model_record)
    note = (
        "completed_requests: output of finished requests (per-request histograms); "
        "token_counters: every token generated (abandoned work not counted)"
    )
    return _grid("work", "Useful and abandoned work", columns, records, note=note)


def _targets(report: Report) -> Section:
    columns = (
        _text("host", "host"),
        _text("target", "target"),
        Column("gpu_hours", "GPU hours"),
        Column("utilization_ratio", "util"),
        Column("cost_usd", "cost"),
        Column("idle_cost_usd", "idle cost"),
    )
    records = _each(report.targets, fields.target_record)
    note = "the GPU time each serving target held, and what its time not busy cost"
    return _grid("targets", "Targets", columns, records, note=note)


def _hosts(report: Report) -> Section:
    columns = (
        _text("host", "host"),
        Column("gpu_hours", "GPU hours"),
        Column("utilization_ratio", "util"),
        Column("cost_usd", "cost"),
        *_PER_M,
    )
    records = _each(report.hosts, fields.host_record)
    note = f"previous period: {report.previous_period.label}"
    return _grid("hosts", "Hosts", columns, records, note=note)


def group_sections(report: Report) -> list[Section]:
    """Teams and projects, by the configured labels (agent.reporting.team_parts); with no
    label configured, no sections (every row would be "(unlabelled)")."""
    if not (report.teams or report.projects):
        return []
    columns = (
        Column("cost_usd", "cost"),
        Column("useful_tokens", "useful tokens"),
        Column("cost_per_million_tokens_usd", "$/M tokens"),
        Column("idle_cost_usd", "idle cost"),
        Column("gpu_hours", "GPU hours"),
        Column("utilization_ratio", "util"),
        _text("targets", "targets"),
    )
    note = (
        "by the {} label of each target; (unlabelled): without one; "
        "(no target): GPU time no target held"
    )
    return [
        _grid(key, title, (_text("name", label), *columns), _each(rows, fields.group_record),
              note=note.format(label))
        for key, title, label, rows in (("teams", "Teams", "team", report.teams),
                                        ("projects", "Projects", "project", report.projects))
    ]  # fmt: skip


def team_budget_sections(report: Report) -> list[Section]:
    """The ``[[budget.teams]]`` budgets; none configured, no section."""
    if not report.team_budgets:
        return []
    columns = (
        _text("team", "team"),
        Column("monthly_usd", "budget"),
        Column("spent_usd", "spent"),
        Column("used_ratio", "used"),
        Column("forecast_usd", "forecast"),
        Column("forecast_ratio", "vs budget"),
    )
    records = _each(report.team_budgets, fields.team_budget_record)
    note = (
        f"month to date ({report.team_budgets[0].month}), metered; forecast at the last day's pace"
    )
    return [_grid("team_budgets", "Team budgets", columns, records, note=note)]


def _gpus(report: Report) -> Section:
    columns = (
        *_GPU,
        _text("gpu_name", "model"),
        Column("observed_hours", "hours"),
        Column("busy_hours", "busy h"),
        Column("utilization_ratio", "util"),
        Column("cost_usd", "cost"),
        Column("idle_cost_usd", "idle cost"),
        Column("vram_peak_bytes", "VRAM peak"),
    )
    records = _each(report.gpus, fields.gpu_record)
    note = "hours observed, hours busy, and what the time not busy cost"
    shared = [f"GPU {g.gpu_index} on {g.host} {g.shared_split_note}"
              for g in report.gpus if g.shared_split_note]  # fmt: skip
    note += "; shared: " + "; ".join(shared) if shared else ""
    return _grid("gpus", "GPU time", columns, records, note=note)


def _real_work(report: Report) -> Section:
    """Per GPU: busy by NVML's flag beside SM activity, and each basis's idle dollars."""
    columns = (
        _text("host", "host"),
        Column("gpu_index", "#"),
        _text("activity_basis", "busy from", False),
        Column("utilization_ratio", "util"),
        Column("sm_active_ratio", "SM active"),
        Column("idle_cost_usd", "idle $ (flag)"),
        Column("sm_idle_cost_usd", "idle $ (SM)"),
        Column("energy_kwh", "kWh"),
    )
    records = _each(report.gpus, fields.gpu_record)
    note = (
        "util: NVML's flag (a kernel ran); SM active: GPM or dcgm-exporter profiling, over the "
        "hours it covered (n/a: no SM activity source for that GPU)"
    )
    return _grid("real_work", "Real work and energy", columns, records, note=note)


def _efficiency(report: Report) -> Section:
    """Per model: FLOPs and bandwidth against the GPU's peak, and energy per token."""
    columns = (
        _text("model", "model"),
        Column("mfu_ratio", "MFU"),
        Column("mbu_ratio", "MBU"),
        Column("mfu_gap_usd", "MFU gap $"),
        Column("joules_per_useful_token", "J/token"),
        Column("co2_grams_per_million_tokens", "g CO2/M"),
        _text("efficiency_basis", "basis"),
    )
    records = _each(report.models, fields.model_record)
    targets = [m.efficiency.mfu_target_ratio for m in report.models]
    target = next((t for t in targets if t is not None), None)
    note = "MFU/MBU: the engine's FLOPs and bytes estimates over the GPU's peak; MFU gap: "
    note += f"what an MFU of {target:.0%} would have saved" if target else "set cost.mfu_target"
    return _grid("efficiency", "Model efficiency and energy", columns, records, note=note)


def _top_waste(report: Report) -> Section:
    columns = (
        *_GPU,
        Column("idle_cost_usd", "idle cost"),
        Column("cost_usd", "cost"),
        Column("utilization_ratio", "util"),
        Column("observed_hours", "hours"),
    )
    records = _each(report.top_waste, fields.gpu_record)
    note = "the GPUs whose idle time cost the most"
    return _grid("top_waste", "Top waste", columns, records, note=note)


def _latency(report: Report) -> Section:
    quantiles = tuple(
        Column(f"p{q}_{name}_seconds", f"{name.upper()} p{q}")
        for name in ("ttft", "e2e")
        for q in (50, 95, 99)
    )
    records = _each(report.models, fields.model_record)
    note = "seconds; quantiles from the engines' histograms over the period"
    return _grid("latency", "Latency", (_text("model", "model"), *quantiles), records, note=note)


def _alerts(report: Report) -> Section:
    columns = (
        _text("rule", "rule"),
        Column("count", "times fired"),
        Column("firing_seconds", "firing for"),
    )
    return _grid("alerts", "Alerts", columns, _each(report.alerts, fields.alert_record))


def _queue_incidents(report: Report) -> Section:
    zone = fields.zone_of(report)
    columns = (
        Column("fired_at", "fired", numeric=False),
        Column("resolved_at", "resolved", numeric=False),
        _text("host", "host"),
        _text("target", "target"),
        _text("model", "model"),
        _text("summary", "summary"),
    )
    records = [fields.incident_record(q, zone) for q in report.queue_incidents]
    note = "QueueGrowing alerts: when another replica was needed"
    return _grid("queue_incidents", "Queue incidents", columns, records, note=note)


def _recommendations(report: Report) -> Section:
    columns = (
        _text("kind", "kind", False),
        _text("title", "title"),
        Column("saving_usd_per_month", "saving / month"),
        _text("detail", "detail"),
    )
    records = _each(report.recommendations, fields.recommendation_record)
    return _grid(
        "recommendations",
        "Recommendations",
        columns,
        records,
        layout=Layout.NOTES,
        empty="no data for this period" if report.data.empty else "nothing to change",
    )


def daily_sections(report: Report) -> list[Section]:
    """The daily series behind the HTML charts, long form (one row per day and series)."""
    day = Column("day", "day", numeric=False)
    spend = (
        day,
        Column("busy_usd", "busy"),
        Column("idle_usd", "idle"),
        Column("total_usd", "total"),
    )
    per_m = (_text("model", "model"), day, Column("cost_per_million_tokens_usd", "$/M tokens"))
    util = (*_GPU, day, Column("utilization_ratio", "util"))
    return [
        _grid(
            "daily_spend",
            "Daily spend",
            spend,
            _each(report.daily_spend, fields.daily_spend_record),
            daily=True,
        ),
        _grid(
            "model_days",
            "Daily cost per million tokens",
            per_m,
            _each(report.model_days, fields.model_day_record),
            daily=True,
        ),
        _grid(
            "gpu_days",
            "Daily GPU utilization",
            util,
            _each(report.gpu_days, fields.gpu_day_record),
            daily=True,
        ),
    ]
