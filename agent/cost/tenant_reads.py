"""The gateways' counters over a window, per (model, tenant): restart-safe increases from the
rollups (per-hour and per-day rows where whole, per-minute rows at the edges), summed over the
gateways and hosts that reported them. What a window's tenants are split by
(agent.cost.tenants)."""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, func, select, union_all

from agent.cost.split import Split, series_ranges
from agent.storage import rolled_up
from migrations.schema import rollups, series

PROMPT, OUTPUT, SPEND = rolled_up.rolled_up(
    rolled_up.GATEWAY_PROMPT_TOKENS, rolled_up.GATEWAY_GENERATION_TOKENS, rolled_up.GATEWAY_SPEND
)
TenantKey = tuple[str, str]  # (model, tenant)


@dataclass(frozen=True, slots=True)
class TenantUse:
    """A tenant's counters on one model over a window; a counter the gateway did not export
    is None (LiteLLM's spend without a price for the model: unknown, not 0)."""

    prompt: float = 0.0
    output: float = 0.0
    spend_usd: float | None = None

    def useful(self, rule: str) -> float:
        """As gpuwatch counts a model's useful tokens (``[cost] useful_tokens``)."""
        return self.output + (self.prompt if rule == "output+prompt" else 0.0)


def use_on(conn: Connection, split: Split) -> dict[TenantKey, TenantUse]:
    """Per (model, tenant), the window's increases of every scraped gateway's counters."""
    query = select(series.c.id, series.c.host, series.c.metric, series.c.labels).where(
        series.c.metric.in_((PROMPT, OUTPUT, SPEND))
    )
    meta = {sid: (host, metric, labels) for sid, host, metric, labels in conn.execute(query)}
    r = rollups.c
    parts: list[Any] = [
        select(r.series_id, func.sum(r.increase)).where(condition).group_by(r.series_id)
        for condition in series_ranges(split, {sid: m[0] for sid, m in meta.items()})
    ]
    sums: dict[TenantKey, dict[str, float]] = defaultdict(dict)
    for sid, increase in conn.execute(union_all(*parts)) if parts else ():
        if increase is None:
            continue
        _, metric, labels_json = meta[sid]
        labels = json.loads(labels_json)
        into = sums[(labels.get("model", ""), labels.get("tenant", ""))]
        into[metric] = into.get(metric, 0.0) + float(increase)
    return {
        key: TenantUse(got.get(PROMPT, 0.0), got.get(OUTPUT, 0.0), got.get(SPEND))
        for key, got in sums.items()
    }
