"""The report's sections, as :mod:`agent.reporting.model` values, from a window's figures (all
over the period [start, end)):

- spend: "metered" is the cost ledger (``gpu_usage``: rate card x metered uptime); "billed" is
  what providers billed, per source. ``spend_usd`` is the billed figure where providers billed
  more than was metered (the bill includes what gpuwatch cannot see), else the metered one, as
  the budget rules do. Billed spend cannot be cut by host or model (providers bill accounts): a
  filtered report shows metered spend only.
- tokens and cost per million useful tokens: :mod:`agent.reporting.figures`; the previous period
  (:func:`agent.reporting.period.previous_period`) gives the same figures for the trend.
- GPU time: observed (metered) hours, busy hours (uptime x utilisation), idle-but-loaded hours
  (allocated to a serving target, not busy) and unallocated hours (no target), as ``Summary``.
  Idle cost is the ledger's cost x (1 - utilisation); the top waste is the five GPUs with the
  highest idle cost.
- latency: p50/p95/p99 of time to first token and end-to-end latency per model by the bucket
  arithmetic: the period's increase of every ``_bucket`` series (from the rollups), summed per
  bound over the model's targets, then :func:`agent.storage.series_math.histogram_quantile`.
- VRAM: the highest ``gpuwatch_gpu_memory_used_bytes`` any rollup row saw (its ``max``) and the
  GPU's total memory, per GPU; GPU names from ``gpuwatch_gpu_info``.
- alerts: the period's alerts counted per rule, with the firing time clipped to the period (an
  alert still firing counts up to the period's end, or ``now`` when that is earlier). Queue
  incidents are the QueueGrowing ones among them.
- budget: the fleet's, whatever the filters (a budget is for the whole account): spend month to
  date at the period's end (or ``now``) by :func:`agent.cost.budget.gather_spend`, and the
  month-end forecast as ProjectedOverBudget computes it: spent + the pace observed over the last
  24 h (metered cost / the time the GPUs were observed) x the time left in the month, with that
  basis stated.
- daily series: the same sums per local day (grouped by the database, see
  :mod:`agent.reporting.queries`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any

from sqlalchemy import Engine

from agent.config.energy import EnergyConfig
from agent.config.settings import Config
from agent.cost.budget import gather_spend
from agent.cost.split_basis import SplitBasis
from agent.cost.summarize import abandoned_cost, metered_usd
from agent.cost.teams import idle_usd
from agent.reporting.figures import Figures, Share, hours, per_million
from agent.reporting.ledger_sums import Usage
from agent.reporting.model import (
    AlertRow,
    Budget,
    DailySpend,
    GpuDay,
    GpuRow,
    HostRow,
    Latency,
    ModelDay,
    ModelRow,
    Period,
    QueueIncident,
    SpendSource,
    TargetRow,
    Totals,
)
from agent.reporting.queries import Alert, Gauges, GpuKey
from agent.reporting.work_parts import (
    GpuWork,
    energy_figures,
    gpu_work,
    work_totals,
)
from agent.storage.series_math import histogram_quantile

MINUTE = timedelta(minutes=1)
NO_ENERGY = EnergyConfig()


TOP_WASTE = 5
QUEUE_RULE = "QueueGrowing"


def totals(
    f: Figures,
    earlier: Figures,
    billed_usd: Mapping[str, Decimal] | None,
    energy: EnergyConfig = NO_ENERGY,
) -> Totals:
    total, produced, allocated = f.total, f.produced, f.allocated()
    billed_total = None if not billed_usd else sum(billed_usd.values(), Decimal(0))
    spend = billed_total if billed_total is not None and billed_total > total.cost else total.cost
    useful = produced.useful(f.rule)
    unknown = fleet_cost_unknown(f)
    return Totals(
        spend_usd=spend,
        metered_usd=total.cost,
        billed_usd=billed_total,
        useful_tokens=useful,
        output_tokens=produced.output,
        total_tokens=produced.output + produced.prompt,
        cost_per_million_tokens_usd=None if unknown else per_million(total.cost, useful),
        previous_cost_per_million_tokens_usd=(
            None
            if fleet_cost_unknown(earlier)
            else per_million(earlier.total.cost, earlier.produced.useful(f.rule))
        ),
        gpu_hours=hours(total.observed),
        busy_gpu_hours=hours(total.busy),
        idle_loaded_gpu_hours=hours(allocated.seconds - allocated.busy),
        unallocated_gpu_hours=hours(total.observed - allocated.seconds),
        utilization_ratio=total.utilization,
        idle_cost_usd=total.idle,
        requests=produced.requests,
        generated_tokens=produced.generated,
        abandoned_tokens=produced.abandoned,
        abandoned_cost_usd=_abandoned_usd(f.model_sums().values()),
        cost_unknown_reason=unknown,
        work=work_totals(f.usage.values()),
        energy=energy_figures(total.energy, total.co2, useful, energy, total.energy_basis),
    )


def fleet_cost_unknown(f: Figures) -> str | None:
    """Why the kept GPUs' cost is not known: no rate for some of their time (the first such
    GPU named), or tokens with no GPU time at all."""
    unpriced = sorted(key for key, u in f.usage.items() if u.unpriced > 0)
    if unpriced:
        (host, uuid), more = unpriced[0], len(unpriced) - 1
        return f"no rate for GPU {uuid} on {host}" + (f" and {more} more" if more else "")
    return Share(seconds=f.total.observed, tokens=f.produced).cost_unknown


def _abandoned_usd(models: Iterable[Share]) -> Decimal | None:
    """The models' abandoned cost summed, None where no model's engine counts abandoned work."""
    costs = [abandoned_cost(m.cost, m.tokens, m.cost_unknown) for m in models]
    known = [c for c in costs if c is not None]
    return sum(known, Decimal(0)) if known else None


def spend_sources(f: Figures, billed_usd: Mapping[str, Decimal] | None) -> tuple[SpendSource, ...]:
    metered = SpendSource("metered", "metered", f.total.cost)
    billed_rows = [SpendSource(s, "billed", usd) for s, usd in sorted((billed_usd or {}).items())]
    return (metered, *billed_rows)


def model_rows(
    f: Figures, earlier: Figures, gauges: Gauges, energy: EnergyConfig = NO_ENERGY
) -> tuple[ModelRow, ...]:
    before = earlier.model_sums()
    return tuple(
        ModelRow(
            model=model,
            cost_usd=m.cost,
            useful_tokens=m.tokens.useful(f.rule),
            output_tokens=m.tokens.output,
            total_tokens=m.tokens.output + m.tokens.prompt,
            requests=m.tokens.requests,
            generated_tokens=m.tokens.generated,
            abandoned_tokens=m.tokens.abandoned,
            abandoned_cost_usd=abandoned_cost(m.cost, m.tokens, m.cost_unknown),
            abandoned_requests=m.tokens.aborted,
            useful_tokens_source=m.tokens.basis,
            cost_unknown_reason=m.cost_unknown,
            idle_cost_usd=m.idle,
            cost_per_million_tokens_usd=m.per_million(f.rule),
            previous_cost_per_million_tokens_usd=_previous(before.get(model), f.rule),
            ttft=_latency(gauges.buckets.get((model, "ttft"))),
            e2e=_latency(gauges.buckets.get((model, "e2e"))),
            energy=energy_figures(m.energy, m.co2, m.tokens.useful(f.rule), energy),
        )
        for model, m in f.model_sums().items()
    )


def _previous(share: Share | None, rule: str) -> Decimal | None:
    return None if share is None else share.per_million(rule)


def _latency(by_le: Mapping[float, float] | None) -> Latency:
    if not by_le:
        return Latency()
    ordered = sorted(by_le.items())
    count = max(n for _, n in ordered)
    if count <= 0:
        return Latency()
    p50, p95, p99 = (histogram_quantile(q, ordered) for q in (0.5, 0.95, 0.99))
    return Latency(p50, p95, p99, count)


def host_rows(f: Figures, earlier: Figures) -> tuple[HostRow, ...]:
    now, before, usage = _per_host(f), _per_host(earlier), _host_usage(f)
    return tuple(
        HostRow(
            host=host,
            cost_usd=h.cost,
            useful_tokens=h.tokens.useful(f.rule),
            cost_per_million_tokens_usd=h.per_million(f.rule),
            previous_cost_per_million_tokens_usd=_previous(before.get(host), f.rule),
            cost_unknown_reason=h.cost_unknown,
            gpu_hours=hours(usage[host].observed),
            utilization_ratio=usage[host].utilization,
        )
        for host, h in sorted(now.items())
    )


def _per_host(f: Figures) -> dict[str, Share]:
    """Per host, its kept GPUs' metered cost and its wanted models' tokens."""
    out: dict[str, Share] = defaultdict(Share)
    for (host, _), u in f.usage.items():
        out[host] = out[host] + Share(u.cost, seconds=u.observed, unpriced=u.unpriced)
    for (host, _, _), t in f.tokens.items():
        out[host] = out[host] + Share(tokens=t)
    return out


def _host_usage(f: Figures) -> dict[str, Usage]:
    out: dict[str, Usage] = defaultdict(Usage)
    for (host, _), u in f.usage.items():
        out[host] = out[host] + u
    return out


def gpu_rows(
    f: Figures,
    gauges: Gauges,
    names: Mapping[GpuKey, str],
    bases: Mapping[GpuKey, SplitBasis] = {},
    split_rule: str = "memory",
) -> tuple[GpuRow, ...]:
    rows = [
        GpuRow(
            host=host,
            gpu_uuid=uuid,
            gpu_index=u.index,
            gpu_name=names.get((host, uuid)),
            cost_usd=u.cost,
            idle_cost_usd=u.idle,
            observed_hours=hours(u.observed),
            busy_hours=hours(u.busy),
            utilization_ratio=u.utilization,
            vram_peak_bytes=gauges.vram_peak.get((host, uuid)),
            vram_total_bytes=gauges.vram_total.get((host, uuid)),
            cost_unknown_reason=f"no rate for GPU {uuid} on {host}" if u.unpriced > 0 else None,
            **_shared(bases.get((host, uuid)), split_rule),
            **_work(gpu_work(u)),
        )
        for (host, uuid), u in f.usage.items()
    ]
    return tuple(sorted(rows, key=lambda g: (g.host, _index_order(g.gpu_index), g.gpu_uuid)))


def _work(w: GpuWork) -> dict[str, Any]:
    # GpuWork's fields are GpuRow's by name: a name that drifts fails every report built.
    return {name: getattr(w, name) for name in GpuWork.__slots__}


def _shared(basis: SplitBasis | None, rule: str) -> dict[str, Any]:
    if basis is None:
        return {}
    if rule == "equal":
        return {"shared_split": "equal", "shared_split_note": "split equally"}
    return {"shared_split": basis.basis, "shared_split_note": basis.describe()}


def _index_order(index: str) -> tuple[int, str]:
    return (int(index), "") if index.isdigit() else (1 << 30, index)


def top_waste(gpus: Sequence[GpuRow]) -> tuple[GpuRow, ...]:
    wasteful = [g for g in gpus if g.idle_cost_usd > 0]
    return tuple(sorted(wasteful, key=lambda g: (-g.idle_cost_usd, g.host, g.gpu_uuid))[:TOP_WASTE])


# -- alerts ---------------------------------------------------------------------------------------


def alert_rows(alerts: Sequence[Alert], period: Period, now: datetime) -> tuple[AlertRow, ...]:
    cap = min(period.end, now)
    count: dict[str, int] = defaultdict(int)
    seconds: dict[str, float] = defaultdict(float)
    for a in alerts:
        low = max(a.fired_at, period.start)
        high = min(a.resolved_at or cap, cap)
        count[a.rule] += 1
        seconds[a.rule] += max((high - low).total_seconds(), 0.0)
    return tuple(AlertRow(rule, count[rule], seconds[rule]) for rule in sorted(count))


def queue_incidents(alerts: Sequence[Alert]) -> tuple[QueueIncident, ...]:
    return tuple(
        QueueIncident(
            host=a.labels.get("host", a.scope),
            target=a.labels.get("target", ""),
            model=a.labels.get("model", ""),
            fired_at=a.fired_at,
            resolved_at=a.resolved_at,
            summary=a.summary,
        )
        for a in alerts
        if a.rule == QUEUE_RULE
    )


# -- budget ---------------------------------------------------------------------------------------


def budget(engine: Engine, config: Config, period: Period, now: datetime) -> Budget:
    """The fleet's month to date at the period's end (``now`` when earlier) and the forecast.

    gather_spend reads up to its ``now``'s minute; asked at the last instant before ``at``
    (so that a period ending on a month boundary reads the month it ends, not the next one),
    it stops a minute short, and that minute is added."""
    at = min(period.end, now.replace(second=0, microsecond=0))
    inputs = gather_spend(engine, config, at - timedelta(microseconds=1))
    last_minute = metered_usd(engine, at - MINUTE, at)
    inputs = replace(inputs, metered_usd=inputs.metered_usd + last_minute)
    spent, forecast = inputs.spent_usd, inputs.forecast_usd  # ProjectedOverBudget's arithmetic
    monthly = inputs.budget
    return Budget(
        monthly_usd=monthly,
        month=inputs.month,
        spent_usd=spent,
        used_ratio=None if monthly is None else float(spent / monthly),
        forecast_usd=forecast,
        forecast_ratio=None if monthly is None else float(forecast / monthly),
        forecast_basis=inputs.basis,
    )


# -- daily series ---------------------------------------------------------------------------------


def daily_spend(f: Figures, days: Sequence[tuple[date, datetime]]) -> tuple[DailySpend, ...]:
    cost = [Decimal(0)] * len(days)
    idle = [Decimal(0)] * len(days)
    for key, by_day in f.window.usage.items():
        if key not in f.gpus:
            continue
        for d, u in by_day.items():
            cost[d] += u.cost
            idle[d] += u.idle
    return tuple(DailySpend(day, cost[i] - idle[i], idle[i]) for i, (day, _) in enumerate(days))


def model_days(
    f: Figures, days: Sequence[tuple[date, datetime]], rule: str
) -> tuple[ModelDay, ...]:
    names = list(f.model_sums())
    out = []
    for i, (day, _) in enumerate(days):
        sums = f.model_sums(i)
        for model in names:
            out.append(ModelDay(model, day, sums.get(model, Share()).per_million(rule)))
    return tuple(out)


def gpu_days(
    f: Figures, gpus: Sequence[GpuRow], days: Sequence[tuple[date, datetime]]
) -> tuple[GpuDay, ...]:
    out = []
    for g in gpus:
        by_day = f.window.usage.get((g.host, g.gpu_uuid), {})
        for i, (day, _) in enumerate(days):
            u = by_day.get(i)
            util = None if u is None else u.utilization
            out.append(GpuDay(g.host, g.gpu_uuid, g.gpu_index, day, util))
    return tuple(out)


def target_rows(f: Figures) -> tuple[TargetRow, ...]:
    """Every serving target on the kept GPUs: its allocated GPU time, cost and idle dollars
    (the allocated time that was not busy, at that time's price; agent.cost.teams.idle_usd)."""
    rows = []
    for (host, target), a in sorted(f.target_totals().items()):
        if not f.wanted.hosts or host in f.wanted.hosts:
            unknown = Share(seconds=a.seconds, unpriced=a.unpriced).cost_unknown
            rows.append(
                TargetRow(host, target, hours(a.seconds), hours(a.busy), a.cost, idle_usd(a),
                          unknown)
            )  # fmt: skip
    return tuple(rows)
