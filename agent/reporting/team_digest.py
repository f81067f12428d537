"""A team's weekly digest, for its own Slack channel (``[[budget.teams]] slack_channel``).

The same week and figures as the fleet's digest (:mod:`agent.reporting.digest`), cut to the
team: its cost, cost per million useful tokens, idle dollars, useful tokens and GPU time, and
its budget's month so far and forecast. A team with no GPU time in the week says so. Names are
escaped for mrkdwn as in the fleet's digest.
"""

from __future__ import annotations

from typing import Any

from agent.cost.breakeven import usd
from agent.reporting.digest import HEADER_LIMIT, percent, team_lines, tokens, week_dates
from agent.reporting.model import Report
from alerts.mrkdwn import SECTION_LIMIT, cut_escaped, escape

NAME_LIMIT = 80


def team_digest_payload(report: Report, team: str) -> dict[str, Any]:
    """The message for ``team``'s channel: ``text`` (the fallback) and ``blocks``."""
    name = escape(team)[:NAME_LIMIT]
    header = f"GPU weekly digest, team {team}: {week_dates(report.period)}"
    row = next((g for g in report.teams if g.name == team), None)
    if row is None:
        body = f"*{name}*: no GPU time allocated to the team's targets this week."
        fallback = f"{header}: no GPU time"
    else:
        (line,) = team_lines(report, only=team)
        util = "unknown" if row.utilization_ratio is None else percent(row.utilization_ratio)
        body = (
            f"{line}\n{tokens(row.useful_tokens)} useful tokens · {row.gpu_hours:,.1f} GPU-hours,"
            f" {util} busy · targets: {escape(', '.join(row.targets))}"
        )
        cost = "cost unknown" if row.cost_unknown_reason else usd(row.cost_usd)
        fallback = f"{header}: {cost}, {usd(row.idle_cost_usd)} idle"
    context = (
        f"Week {report.period.label} in {report.period.timezone} · team label `{name}` · "
        "`gpuwatch report` has the details"
    )
    blocks = [
        {"type": "header", "text": {"type": "plain_text", "text": header[:HEADER_LIMIT]}},
        {"type": "context", "elements": [{"type": "mrkdwn", "text": context}]},
        {"type": "section", "text": {"type": "mrkdwn", "text": cut_escaped(body, SECTION_LIMIT)}},
    ]
    return {"text": fallback, "blocks": blocks}
