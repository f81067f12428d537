"""The cost signals of DESIGN.md, for /metrics: recomputed after each rollup, from the rollups.

Each host computes its own figures from its own rows (:func:`host_samples`, labelled
``scope="host"`` where a fleet-wide twin exists); the fleet-wide ones (:func:`fleet_samples`,
``scope="fleet"``) are computed once a minute by the fleet leader, stored in ``fleet_signals``
and read by every daemon (:mod:`agent.cost.fleet_signals`), so no host's minute job reads the
whole fleet.

- ``gpuwatch_gpu_hourly_cost_usd``: what each GPU of this host costs per hour now (rate card).
- ``gpuwatch_spend_usd_total{source}``: all spend stored, ``metered`` (rate card x uptime of this
  host, scope host) and per billing source (what providers billed, whole account, scope fleet).
- ``gpuwatch_idle_cost_usd_total``: the metered cost of this host's GPU time that was not busy.
- ``gpuwatch_cost_per_million_tokens_usd{model, window, scope}``: 1h, 24h, 7d, 30d and month;
  ``scope="host"`` over this host's GPUs and tokens, ``scope="fleet"`` over every host's.
- ``gpuwatch_slo_attainment_ratio{model, window, basis, estimate}``: per model with an
  objective, this host's requests within it (agent.cost.slo_signals).
- ``gpuwatch_budget_used_ratio{scope="fleet"}``: month-to-date spend over
  ``budget.monthly_usd``; the spend is what providers billed this month when they billed
  anything, else the metered figure of the whole fleet. ``{scope="team", team}``: per
  ``[[budget.teams]]`` team, its metered (allocated) cost over its ``monthly_usd``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from sqlalchemy import Engine, func, select

from agent.config.settings import Config
from agent.cost.billing import billed
from agent.cost.ratecard import RateCard
from agent.cost.slo_signals import attainment_samples
from agent.cost.split import DAY, HOUR, MINUTE
from agent.cost.summarize import Summary, summarize
from agent.cost.teams import team_costs
from collectors.base import Sample
from migrations.schema import cost_records, gpu_usage

WINDOWS = {"1h": timedelta(hours=1), "24h": timedelta(days=1), "7d": timedelta(days=7),
           "30d": timedelta(days=30)}  # fmt: skip


def hourly_prices(config: Config, gpus: Iterable[Sample], now: datetime) -> list[Sample]:
    """``gpuwatch_gpu_hourly_cost_usd`` for the GPUs of a round (its gpuwatch_gpu_info samples)."""
    physical = [
        s for s in gpus if s.metric == "gpuwatch_gpu_info" and "mig_instance" not in s.labels
    ]
    out = []
    for s in physical:
        price = RateCard(config.rates).price(
            config.host, s.labels["gpu_uuid"], s.labels["gpu_index"], len(physical), now
        )
        if price is not None:
            labels = {k: s.labels[k] for k in ("host", "gpu_uuid", "gpu_index")}
            out.append(_sample("gpuwatch_gpu_hourly_cost_usd", price.usd_per_hour, now, labels))
    return out


def cost_samples(engine: Engine, config: Config, now: datetime) -> list[Sample]:
    """Every cost signal computed here, host and fleet figures both: a lone box, or a test.
    The daemon splits them (:func:`host_samples` here, :func:`fleet_samples` on the leader)."""
    host = {"host": config.host}
    fleet = [replace(s, labels={**host, **s.labels}) for s in fleet_samples(engine, config, now)]
    return host_samples(engine, config, now) + fleet


def host_samples(engine: Engine, config: Config, now: datetime) -> list[Sample]:
    """This host's spend, idle cost and cost per million useful tokens, as of ``now``: its
    own rows only, so the minute job costs the same beside 1 or 1,000 other hosts."""
    host = {"host": config.host}
    metered = _sum(engine, gpu_usage.c.cost_usd, config.host)
    out = [_sample("gpuwatch_spend_usd_total", metered, now, host | {"source": "metered"})]
    idle = _sum(engine, gpu_usage.c.idle_cost_usd, config.host)
    out.append(_sample("gpuwatch_idle_cost_usd_total", idle, now, host))
    for name, start, end in _windows(config, now):
        summary = summarize(engine, start, end, useful=config.cost.useful_tokens, host=config.host)
        out += _per_million(summary, now, host | {"window": name, "scope": "host"})
    return out + attainment_samples(engine, config, now)


def fleet_samples(engine: Engine, config: Config, now: datetime) -> list[Sample]:
    """The fleet-wide figures (no ``host`` label: they belong to no host): cost per million
    useful tokens per model over every host, budget use, billed spend per source."""
    fleet = {"scope": "fleet"}
    out = [_sample("gpuwatch_spend_usd_total", v, now, fleet | {"source": source})
           for source, v in _billed_totals(engine).items()]  # fmt: skip
    for name, start, end in _windows(config, now):
        summary = summarize(engine, start, end, useful=config.cost.useful_tokens)
        out += _per_million(summary, now, fleet | {"window": name})
        if name == "month" and config.budget.monthly_usd:
            used = _month_spend(engine, summary.fleet.cost_usd, start, end)
            ratio = used / config.budget.monthly_usd
            out.append(_sample("gpuwatch_budget_used_ratio", ratio, now, fleet))
        if name == "month":
            out += _team_budgets(config, summary, now)
    return out


def _team_budgets(config: Config, month: Summary, now: datetime) -> list[Sample]:
    """Each budgeted team's month to date over its budget (the team budget alerts' figure)."""
    spent = team_costs(config.labels, {key: t.cost for key, t in month.targets.items()})
    return [
        _sample("gpuwatch_budget_used_ratio", spent.get(b.team, Decimal(0)) / b.monthly_usd, now,
                {"scope": "team", "team": b.team})
        for b in config.budget.teams
        if b.monthly_usd
    ]  # fmt: skip


def _windows(config: Config, now: datetime) -> list[tuple[str, datetime, datetime]]:
    end = now.replace(second=0, microsecond=0)
    month_start = end.astimezone(config.zone).replace(day=1, hour=0, minute=0)
    return [*((n, end - d, end) for n, d in WINDOWS.items()), ("month", month_start, end)]


def _per_million(summary: Summary, now: datetime, labels: dict[str, str]) -> list[Sample]:
    return [
        _sample("gpuwatch_cost_per_million_tokens_usd", per, now, labels | {"model": line.name})
        for line in summary.models
        if (per := line.usd_per_million_tokens) is not None
    ]


def _sample(metric: str, value: Decimal, now: datetime, labels: dict[str, str]) -> Sample:
    return Sample(metric=metric, value=float(value), labels=labels, ts=now)


def _sum(engine: Engine, column: Any, host: str) -> Decimal:
    """The host's whole ledger: its day rows, the hour rows after the last day and the minute
    rows after the last hour. Summing every hour row made the minute job's cost grow with the
    box's age (17,520 rows a GPU after two years; 730 day rows)."""
    total, after = Decimal(0), None
    t = gpu_usage.c
    with engine.connect() as conn:
        for resolution in (DAY, HOUR, MINUTE):
            query = select(func.sum(column), func.max(t.start)).where(
                t.host == host, t.resolution == resolution
            )
            if after is not None:
                query = query.where(t.start >= after)
            amount, last = conn.execute(query).one()
            total += Decimal(str(amount or 0))
            if last is not None:
                after = last + timedelta(seconds=resolution)
    return total


def _billed_totals(engine: Engine) -> dict[str, Decimal]:
    out: dict[str, Decimal] = {}
    query = (
        select(cost_records.c.source, func.sum(cost_records.c.amount))
        .where(cost_records.c.kind == "billed", cost_records.c.currency == "USD")
        .group_by(cost_records.c.source)
    )
    with engine.connect() as conn:
        for source, amount in conn.execute(query):
            out[source] = Decimal(str(amount))
    return out


def _month_spend(engine: Engine, metered: Decimal, start: datetime, end: datetime) -> Decimal:
    usd = [
        amount for (_, currency), amount in billed(engine, start, end).items() if currency == "USD"
    ]
    return sum(usd, Decimal(0)) if usd else metered
