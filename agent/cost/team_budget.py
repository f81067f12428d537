"""Budgets per team (``[[budget.teams]]``): the fleet's budget figures scoped to a team's cost.

A team's spend is what the cost ledger allocated to its targets (``gpu_allocations``, labels
from :mod:`agent.config.teams`): metered only, because providers bill accounts, not teams. Its
month-end forecast is the fleet's rule on the team's own pace: the team's cost over the fleet's
burn window (the last day, from the first priced minute of it) over that window's metered
stretch. Each team's figures are a :class:`~agent.cost.budget.BudgetInputs` with ``team`` set,
so the threshold and forecast rules (:mod:`agent.alerting.budget_rules`) judge a team exactly
as they judge the fleet, under a ``team`` label.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING

from sqlalchemy import Engine, func, select

from agent.config.settings import Config
from agent.cost.split import Split
from agent.cost.teams import TargetKey, team_costs
from migrations.schema import gpu_allocations

if TYPE_CHECKING:
    from agent.cost.budget import BudgetInputs


def target_costs(engine: Engine, start: datetime, end: datetime) -> dict[TargetKey, Decimal]:
    """Each (host, target)'s allocated, priced cost over (start, end] (unpriced time adds 0)."""
    t = gpu_allocations.c
    with engine.connect() as conn:
        split = Split.read(conn, start, end)
        query = (
            select(t.host, t.target, func.sum(t.cost_usd))
            .where(split.rows(gpu_allocations, t.host))
            .group_by(t.host, t.target)
        )
        rows = conn.execute(query).all()
    return {(host, target): Decimal(0) + (cost or Decimal(0)) for host, target, cost in rows}


def team_inputs(
    engine: Engine, config: Config, fleet: BudgetInputs, burn_start: datetime
) -> tuple[BudgetInputs, ...]:
    """Each ``[[budget.teams]]`` team's budget figures beside the ``fleet``'s; ``burn_start``:
    where the fleet's burn window starts (its pace is the team's cost since then)."""
    budgets = config.budget.teams
    if not budgets:
        return ()
    end = fleet.now.replace(second=0, microsecond=0)
    month = team_costs(config.labels, target_costs(engine, fleet.month_start, end))
    burn = {}
    if fleet.burn_seconds > 0:
        burn = team_costs(config.labels, target_costs(engine, burn_start, end))
    zero = Decimal(0)
    return tuple(
        replace(
            fleet,
            team=b.team,
            budget_usd=b.monthly_usd,
            metered_usd=month.get(b.team, zero),
            billed_usd=None,
            burn_usd=burn.get(b.team, zero),
            hourly_usd=(),
            models=(),
            teams=(),
        )
        for b in budgets
    )
