"""Budgets per gateway tenant (``[[budget.tenants]]``): the fleet's budget figures scoped to a
tenant's real cost, as a team's are (:mod:`agent.cost.team_budget`).

A tenant's spend is its split of its models' cost (:mod:`agent.cost.tenants`) over the month
to date, and its pace the same over the fleet's burn window; priced cost only (a model's time
no rate priced adds nothing, as for a team). :mod:`agent.cost.budget` makes each tenant's
figures a ``BudgetInputs`` with ``tenant`` set, so the threshold and forecast rules judge it
as they judge the fleet, under a ``tenant`` label. Each evaluation reads the month's cost
summary and the gateways' counters once more, from the rollups: only with tenant budgets set.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from sqlalchemy import Engine

from agent.config.settings import Config
from agent.cost.split import Split
from agent.cost.summarize import summarize_on
from agent.cost.tenant_sources import all_use
from agent.cost.tenants import summary_models, tenants


@dataclass(frozen=True, slots=True)
class TenantSpend:
    """One budgeted tenant's month-to-date cost and its cost over the fleet's burn window."""

    tenant: str
    budget_usd: Decimal
    metered_usd: Decimal
    burn_usd: Decimal


def tenant_costs(
    engine: Engine, config: Config, start: datetime, end: datetime
) -> dict[str, Decimal]:
    """Each tenant's priced share of its models' cost over (start, end]."""
    rule = config.cost.useful_tokens
    with engine.connect() as conn:
        summary = summarize_on(conn, start, end, useful=rule)
        use = all_use(conn, Split.read(conn, start, end), config.gateways)
    found = tenants(summary_models(summary, rule), use, rule)
    return {
        t.name: sum((p.cost_usd for p in t.parts if p.cost_usd is not None), Decimal(0))
        for t in found.lines
    }


def tenant_spends(
    engine: Engine,
    config: Config,
    month_start: datetime,
    burn_start: datetime | None,
    end: datetime,
) -> tuple[TenantSpend, ...]:
    """Each ``[[budget.tenants]]`` tenant's cost since ``month_start`` and since ``burn_start``
    (None: the fleet has no metered time in its burn window), up to ``end``."""
    budgets = config.budget.tenants
    if not budgets or not config.gateways:
        return ()
    month = tenant_costs(engine, config, month_start, end)
    burn = tenant_costs(engine, config, burn_start, end) if burn_start is not None else {}
    zero = Decimal(0)
    return tuple(
        TenantSpend(b.tenant, b.monthly_usd, month.get(b.tenant, zero), burn.get(b.tenant, zero))
        for b in budgets
    )
