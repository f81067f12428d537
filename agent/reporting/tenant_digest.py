"""The weekly digest's gateway tenants: one short line each (cost, per 1M tokens, idle share,
and list price minus cost where the gateway gives a spend), the costliest first, the
unattributed last; nothing without a gateway's figures in the week."""

from __future__ import annotations

from decimal import Decimal

from agent.cost.breakeven import usd
from agent.reporting.digest_text import NAME_LIMIT
from agent.reporting.digest_text import fit as _fit
from agent.reporting.model import Report, TenantRow

TITLE = "By tenant (cost · per 1M tokens · idle · list price - cost)"
UNATTRIBUTED = "(unattributed)"


def tenant_lines(report: Report) -> list[str]:
    named = [t for t in report.tenants if t.name != UNATTRIBUTED]
    rest = [t for t in report.tenants if t.name == UNATTRIBUTED]
    named.sort(key=lambda t: (t.cost_usd is None, -(t.cost_usd or Decimal(0)), t.name))
    return [_line(t) for t in (*named, *rest)]


def _line(t: TenantRow) -> str:
    cost = "cost unknown" if t.cost_usd is None else usd(t.cost_usd)
    per = t.cost_per_million_tokens_usd
    idle = "" if t.idle_ratio is None else f" · {t.idle_ratio * 100:.0f}% idle"
    over = t.list_minus_cost_usd
    listed = "" if over is None else f" · list {'+' if over >= 0 else '-'}{usd(abs(over))}"
    return (f"*{_fit(t.name, NAME_LIMIT)}*: {cost}"
            f"{'' if per is None else ' · ' + usd(per) + '/1M'}{idle}{listed}")  # fmt: skip
