"""The monthly (or weekly, or any period's) report: every figure, as :mod:`agent.reporting.model`
values, from the rollups and the cost ledger. The CLI and the weekly digest call
:func:`build_report` and nothing else; the renderers only format what it returns.

It wires four steps, one module each:

- :mod:`agent.reporting.queries`: the database reads of a window (the period, and the previous
  one for the trends): the cost ledger and the token counters per local day, latency buckets,
  VRAM, GPU names, alert history and billed spend; and the filters (:class:`Wanted`).
- :mod:`agent.reporting.figures`: a window under the filters: the GPUs and targets kept, and
  what each model or host cost, kept busy and produced.
- :mod:`agent.reporting.parts`: the report's sections from those figures, and where each
  figure comes from.
- :mod:`agent.reporting.recommendations`: deployment advice, smaller GPUs and consolidation.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import Engine

from agent.config.settings import Config
from agent.cost.pods_read import pod_costs, read_ledger
from agent.cost.provisional import reading
from agent.cost.split_basis import split_bases
from agent.cost.tenant_sources import all_use
from agent.reporting.efficiency_parts import with_efficiency
from agent.reporting.figures import Figures
from agent.reporting.mig_parts import mig_rows, read_mig
from agent.reporting.model import DataExtent, Period, Report
from agent.reporting.parts import (
    alert_rows,
    budget,
    daily_spend,
    gpu_days,
    gpu_rows,
    host_rows,
    model_days,
    model_rows,
    queue_incidents,
    spend_sources,
    target_rows,
    top_waste,
    totals,
)
from agent.reporting.period import local_days, previous_period
from agent.reporting.pod_parts import pod_rows
from agent.reporting.queries import (
    Wanted,
    Window,
    billed_by_source,
    gauges,
    gpu_names,
    history,
)
from agent.reporting.recommendations import recommendations
from agent.reporting.serving_parts import with_serving
from agent.reporting.serving_reads import estimates, serving_reads
from agent.reporting.slo_parts import with_slos
from agent.reporting.team_parts import group_rows, team_budget_rows
from agent.reporting.tenant_parts import tenant_rows


def build_report(
    engine: Engine,
    config: Config,
    period: Period,
    *,
    now: datetime,
    hosts: Sequence[str] = (),
    models: Sequence[str] = (),
    daily: bool = True,
    fresh: bool = True,
) -> Report:
    """Every figure of ``period`` (see :mod:`agent.reporting.parts`), restricted to ``hosts``
    and ``models`` when given (see :mod:`agent.reporting.figures`). ``daily``: False leaves the
    daily series empty and reads the window as one sum per GPU and target, for renderings that
    do not print them (a fleet's month is then ~3 k rows to read, not ~60 k)."""
    wanted = Wanted(frozenset(hosts), frozenset(models))
    before = previous_period(period)
    days = local_days(period) if daily else []
    rule = config.cost.useful_tokens
    # Rollups brought up to date for this read only, then rolled back (agent.cost.provisional).
    window = (period.start, period.end)
    with reading(engine, config, wanted.hosts, window, fresh=fresh) as (conn, coverage):
        starts = [at for _, at in days] or [period.start]
        current = Window.read(conn, *coverage.window, wanted, starts)
        previous = Window.read(conn, before.start, before.end, wanted, [before.start])
        measured = gauges(conn, current.split, wanted)
        names = gpu_names(conn, wanted)
        moved = estimates(conn, current.split, wanted)
        served = serving_reads(conn, current.split, wanted)
        bases = split_bases(conn, current.split, wanted.hosts)
        gateway_use = all_use(conn, current.split, config.gateways)
        pod_ledger = read_ledger(conn, current.split, wanted.hosts)
        mig_lines = read_mig(conn, current.split, wanted.hosts)
        fired = history(conn, period)
    figures = Figures.of(current, wanted, rule)
    earlier = Figures.of(previous, wanted, rule)
    billed_usd = None if wanted.any else billed_by_source(engine, period)
    gpus = gpu_rows(figures, measured, names, bases, config.cost.shared_gpu_split)
    alerts = [a for a in fired if wanted.keeps_alert(a, figures.targets, figures.gpus)]
    models_rows = with_efficiency(
        model_rows(figures, earlier, measured, config.energy), figures, moved, names,
        config.cost.mfu_target,
    )  # fmt: skip
    models_rows = with_slos(models_rows, measured.buckets, config.slos, measured.spans)
    models_rows = with_serving(models_rows, served)
    pod_costs_ = pod_costs(pod_ledger, figures.all_tokens, rule)
    teams, projects = group_rows(figures, config, pod_costs_)
    namespace_rows, pod_rows_ = pod_rows(pod_costs_, config.labels, bool(wanted.models))
    return Report(
        generated_at=now,
        period=period,
        previous_period=before,
        hosts_filter=tuple(sorted(wanted.hosts)),
        models_filter=tuple(sorted(wanted.models)),
        useful_tokens_rule=rule,
        totals=totals(figures, earlier, billed_usd, config.energy),
        spend_sources=spend_sources(figures, billed_usd),
        models=models_rows,
        hosts=host_rows(figures, earlier),
        gpus=gpus,
        top_waste=top_waste(gpus),
        alerts=alert_rows(alerts, period, now),
        queue_incidents=queue_incidents(alerts),
        budget=budget(engine, config, period, now),
        # Nothing stored: no advice (an empty month is not a fleet with nothing to change).
        recommendations=(
            recommendations(figures, gpus, config, period, now, served) if coverage.last else ()
        ),
        daily_spend=daily_spend(figures, days) if days else (),
        model_days=model_days(figures, days, rule),
        gpu_days=gpu_days(figures, gpus, days),
        data=DataExtent(coverage.first, coverage.last),
        targets=target_rows(figures),
        teams=teams,
        projects=projects,
        team_budgets=team_budget_rows(engine, config, period, now),
        tenants=tenant_rows(models_rows, gateway_use, rule),
        namespaces=namespace_rows,
        pods=pod_rows_,
        mig_instances=mig_rows(mig_lines, gpus),
    )
