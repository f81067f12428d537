"""Budgets per team (``[[budget.teams]]``): the fleet's budget figures scoped to a team's cost.

A team's spend is what the cost ledger allocated to its targets (``gpu_allocations``, labels
from :mod:`agent.config.teams`), and its labelled Kubernetes namespaces' pods' time no target
held (:mod:`agent.cost.pods_teams`): metered only, because providers bill accounts, not teams. Its
month-end forecast is the fleet's rule on the team's own pace: the team's cost over the fleet's
burn window (the last day, from the first priced minute of it) over that window's metered
stretch. :mod:`agent.cost.budget` makes each team's figures a ``BudgetInputs`` with ``team`` set,
so the threshold and forecast rules (:mod:`agent.alerting.budget_rules`) judge a team exactly
as they judge the fleet, under a ``team`` label.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from sqlalchemy import Engine, func, select

from agent.config.settings import Config
from agent.cost.pods_teams import namespace_team_costs, plus
from agent.cost.split import Split
from agent.cost.teams import TargetKey, team_costs
from migrations.schema import gpu_allocations


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


@dataclass(frozen=True, slots=True)
class TeamSpend:
    """One budgeted team's month-to-date cost and its cost over the fleet's burn window."""

    team: str
    budget_usd: Decimal | None
    metered_usd: Decimal
    burn_usd: Decimal


def team_spends(
    engine: Engine,
    config: Config,
    month_start: datetime,
    burn_start: datetime | None,
    end: datetime,
) -> tuple[TeamSpend, ...]:
    """Each ``[[budget.teams]]`` team's cost since ``month_start`` and since ``burn_start``
    (where the fleet's burn window starts: the team's pace is its cost since then; None when
    the fleet has no metered time in it), up to ``end``."""
    budgets = config.budget.teams
    if not budgets:
        return ()
    labels = config.labels
    month = plus(team_costs(labels, target_costs(engine, month_start, end)),
                 namespace_team_costs(engine, labels, month_start, end))  # fmt: skip
    burn: dict[str, Decimal] = {}
    if burn_start is not None:
        burn = plus(team_costs(labels, target_costs(engine, burn_start, end)),
                    namespace_team_costs(engine, labels, burn_start, end))  # fmt: skip
    zero = Decimal(0)
    return tuple(
        TeamSpend(
            team=b.team,
            budget_usd=b.monthly_usd,
            metered_usd=month.get(b.team, zero),
            burn_usd=burn.get(b.team, zero),
        )
        for b in budgets
    )
