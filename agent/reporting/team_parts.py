"""The report's teams, projects and team budgets, from a window's figures.

Teams and projects are the configured labels (:mod:`agent.config.teams`) over the targets the
window kept: each target's allocated cost, idle dollars and GPU time shared among its models
as the Models section shares them (:mod:`agent.cost.teams`), so a team's row is the sum of its
targets' model figures; under a model filter, only the wanted models' shares. Without a model
filter a "(no target)" row carries the GPU time no target held, so the rows add up to the
metered spend. Team budgets are each ``[[budget.teams]]`` team's month to date at the period's
end and its month-end forecast, as the team's budget alerts compute them.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from sqlalchemy import Engine

from agent.config.settings import Config
from agent.config.teams import Label
from agent.cost import pods_teams, teams
from agent.cost.budget import gather_spend
from agent.cost.pods_read import PodCosts
from agent.cost.team_budget import target_costs
from agent.reporting.figures import Figures, hours
from agent.reporting.model import GroupRow, Period, TeamBudgetRow

MINUTE = timedelta(minutes=1)


def group_rows(
    f: Figures, config: Config, pods: PodCosts | None = None
) -> tuple[tuple[GroupRow, ...], tuple[GroupRow, ...]]:
    """(teams, projects) of the window; none where no label is configured at all. ``pods``:
    the window's Kubernetes pods, whose labelled namespaces' untargeted GPU time joins their
    teams and projects (agent.cost.pods_teams; not under a model filter)."""
    if not config.labels.entries:
        return (), ()
    targets = f.target_totals()
    kept = {key: a for key, a in targets.items() if key in f.targets}
    rule, labels, wanted = f.rule, config.labels, f.wanted.model
    extra: tuple[teams.GroupLine, ...] = ()
    if not f.wanted.models:
        total = f.total
        rest = teams.no_target(total.cost, total.observed, total.unpriced, kept)
        extra = (rest,) if rest.seconds > 0 or rest.cost_usd > 0 else ()
    by_team = teams.teams(labels, kept, f.all_tokens, rule, wanted) + extra
    by_project = teams.projects(labels, kept, f.all_tokens, rule, wanted) + extra
    if pods is not None and labels.namespaces and not f.wanted.models:
        by_team = pods_teams.merged(by_team, pods_teams.namespace_groups(labels, pods, _team))
        by_project = pods_teams.merged(
            by_project, pods_teams.namespace_groups(labels, pods, _project)
        )
    return _rows(by_team, rule), _rows(by_project, rule)


def _team(label: Label) -> str | None:
    return label.team


def _project(label: Label) -> str | None:
    return label.project


def _rows(lines: Sequence[teams.GroupLine], rule: str) -> tuple[GroupRow, ...]:
    return tuple(
        GroupRow(
            name=g.name,
            cost_usd=g.cost_usd,
            useful_tokens=g.useful(rule),
            cost_per_million_tokens_usd=g.per_million(rule),
            idle_cost_usd=g.idle_usd,
            gpu_hours=hours(g.seconds),
            utilization_ratio=g.utilization,
            targets=tuple(sorted(g.targets)),
            cost_unknown_reason=g.cost_unknown,
        )
        for g in lines
    )


def team_budget_rows(
    engine: Engine, config: Config, period: Period, now: datetime
) -> tuple[TeamBudgetRow, ...]:
    """Each budgeted team's month to date at the period's end (``now`` when earlier), read as
    :func:`agent.reporting.parts.budget` reads the fleet's (the last minute added)."""
    if not config.budget.teams:
        return ()
    at = min(period.end, now.replace(second=0, microsecond=0))
    fleet = gather_spend(engine, config, at - timedelta(microseconds=1))
    last_minute = pods_teams.plus(
        teams.team_costs(config.labels, target_costs(engine, at - MINUTE, at)),
        pods_teams.namespace_team_costs(engine, config.labels, at - MINUTE, at),
    )
    out = []
    for team in fleet.teams:
        assert team.team is not None
        spent = team.metered_usd + last_minute.get(team.team, 0)
        forecast = (team.forecast_usd - team.metered_usd) + spent
        monthly = team.budget
        out.append(
            TeamBudgetRow(
                team=team.team,
                monthly_usd=monthly,
                month=team.month,
                spent_usd=spent,
                used_ratio=None if monthly is None else float(spent / monthly),
                forecast_usd=forecast,
                forecast_ratio=None if monthly is None else float(forecast / monthly),
            )
        )
    return tuple(out)
