"""Every gateway's tenant figures for a window: the scraped ones' rollups
(:mod:`agent.cost.tenant_reads`) and LiteLLM's spend logs read at read time
(:mod:`agent.cost.spendlog_reads`), added up per (model, tenant)."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Connection

from agent.config.gateways import GatewayConfig
from agent.cost.spendlog_reads import add, spendlog_use
from agent.cost.split import Split
from agent.cost.tenant_reads import TenantKey, TenantUse, use_on


def all_use(
    conn: Connection, split: Split, gateways: Sequence[GatewayConfig]
) -> dict[TenantKey, TenantUse]:
    if not gateways:
        return {}
    out = use_on(conn, split) if any(g.scraped for g in gateways) else {}
    for g in gateways:
        if not g.scraped:
            for key, use in spendlog_use(g, split.start, split.end).items():
                out[key] = add(out.get(key), use)
    return out
