"""The ``[budget]`` section: the fleet's monthly budget, and budgets per team.

[budget]
monthly_usd = 5000

[[budget.teams]]
team = "search"               # as on its targets or [[labels]] (agent.config.teams)
monthly_usd = 2000            # the budget rules' levels and forecast, on the team's cost
slack_channel = "#search-gpu" # the team's own weekly digest (Slack token + channel)
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from agent.config.reader import Reader
from agent.config.teams import Labels, label_value
from agent.config.tenant_budgets import TenantBudget, parse_tenant_budgets

_SLACK_TOKEN_KEYS = ("token_env", "token_file")


@dataclass(frozen=True, slots=True)
class TeamBudget:
    """``[[budget.teams]]``: a team's monthly budget and where its digest goes."""

    team: str
    monthly_usd: Decimal | None = None
    slack_channel: str | None = None


@dataclass(frozen=True, slots=True)
class BudgetConfig:
    monthly_usd: Decimal | None = None
    teams: tuple[TeamBudget, ...] = ()
    tenants: tuple[TenantBudget, ...] = ()  # [[budget.tenants]] (agent.config.tenant_budgets)

    def team(self, name: str) -> TeamBudget | None:
        return next((b for b in self.teams if b.team == name), None)


def parse_budget(r: Reader, top: dict[str, Any], labels: Labels) -> BudgetConfig:
    t = r.sub(top, "budget", {"monthly_usd", "teams", "tenants"})
    monthly = r.money(t, "budget.monthly_usd")
    return BudgetConfig(monthly, _team_budgets(r, t, top, labels), parse_tenant_budgets(r, t))


def _team_budgets(
    r: Reader, budget: dict[str, Any], top: dict[str, Any], labels: Labels
) -> tuple[TeamBudget, ...]:
    """``[[budget.teams]]``; ``budget`` is the ``[budget]`` table as the reader keyed it."""
    out: list[TeamBudget] = []
    items = r.array(budget, "budget.teams")
    for i, item in enumerate(items):
        path = f"budget.teams[{i}]"
        t = r.table(item, path, {"team", "monthly_usd", "slack_channel"})
        team = label_value(r, t, f"{path}.team")
        monthly = r.money(t, f"{path}.monthly_usd")
        channel = label_value(r, t, f"{path}.slack_channel")
        if f"{path}.team" not in t:
            r.problem(f"{path}.team", "missing (the team, as on its targets or [[labels]])")
            continue
        if team is None:
            continue
        if team in {b.team for b in out}:
            r.problem(f"{path}.team", f"team {team!r} has two budgets")
        elif team not in labels.teams:
            known = ", ".join(sorted(labels.teams)) or "none labelled"
            r.problem(f"{path}.team", f"no target is labelled team {team!r} (teams: {known})")
        if channel is not None and not _slack_token(top):
            why = "an incoming webhook posts to its own channel only"
            r.problem(
                f"{path}.slack_channel", f"needs [notify.slack] token_env or token_file ({why})"
            )
        out.append(TeamBudget(team, monthly, channel))
    return tuple(out)


def _slack_token(top: dict[str, Any]) -> bool:
    # [notify] is checked elsewhere; here only "is a Slack token named at all" matters.
    notify = top.get("notify")
    slack = notify.get("slack") if isinstance(notify, dict) else None
    return isinstance(slack, dict) and any(key in slack for key in _SLACK_TOKEN_KEYS)
