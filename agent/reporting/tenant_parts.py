"""The report's tenants: each gateway tenant's share of the report's own model rows (their cost
and idle dollars as the report shows them, to the cent), by :mod:`agent.cost.tenants`' rule, so
a model's tenant lines add up to its row's cost exactly."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from decimal import Decimal

from agent.cost.tenant_reads import TenantKey, TenantUse
from agent.cost.tenants import ModelCost, tenants
from agent.reporting.model import ModelRow, TenantRow

CENT = Decimal("0.01")


def tenant_rows(
    models: Sequence[ModelRow], use: Mapping[TenantKey, TenantUse], rule: str
) -> tuple[TenantRow, ...]:
    """One row per tenant (the unattributed last); none without a gateway's figures."""
    if not use:
        return ()
    costs = [
        ModelCost(m.model, m.cost_usd, m.useful_tokens, m.idle_cost_usd, m.cost_unknown_reason)
        for m in models
    ]
    found = tenants(costs, use, rule, CENT)
    return tuple(
        TenantRow(
            name=t.name,
            cost_usd=t.cost_usd,
            useful_tokens=t.tokens,
            cost_per_million_tokens_usd=t.per_million,
            idle_cost_usd=t.idle_usd,
            idle_ratio=None if t.idle_share is None else float(t.idle_share),
            list_price_usd=t.list_usd,
            list_minus_cost_usd=t.overcharged_usd,
            models=tuple(sorted({p.model for p in t.parts})),
        )
        for t in found.lines
    )
