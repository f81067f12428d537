"""The weekly digest's Kubernetes namespaces: one short line each (cost, idle dollars, GPU
hours, and the team where ``[[labels]]`` names the namespace), the costliest first; nothing
where no GPU ran on Kubernetes in the week."""

from __future__ import annotations

from agent.cost.breakeven import usd
from agent.reporting.digest_text import NAME_LIMIT
from agent.reporting.digest_text import fit as _fit
from agent.reporting.model import Report

TITLE = "By namespace (cost · idle · GPU-hours)"


def namespace_lines(report: Report) -> list[str]:
    rows = sorted(report.namespaces, key=lambda n: (n.cost_unknown_reason is None, n.cost_usd),
                  reverse=True)  # fmt: skip
    lines = []
    for n in rows:
        unknown = n.cost_unknown_reason is not None
        team = f" (team {_fit(n.team, NAME_LIMIT)})" if n.team else ""
        lines.append(
            f"*{_fit(n.namespace, NAME_LIMIT)}*{team}: "
            f"{'cost unknown' if unknown else usd(n.cost_usd)}"
            f" · {'idle unknown' if unknown else usd(n.idle_cost_usd) + ' idle'}"
            f" · {n.gpu_hours:,.1f} GPU-h"
        )
    return lines
