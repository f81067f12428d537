"""``[[budget.tenants]]``: monthly budgets per gateway tenant (docs/tenants.md).

[[budget.tenants]]
tenant = "search-app"       # as the gateway names it ([[gateways]] tenant: key alias, user, team)
monthly_usd = 300           # the budget rules' levels and forecast, on the tenant's real cost

Tenants are only known once a gateway reports them, so a name is not checked against a list;
a budget for a tenant that sent nothing is simply never reached.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from agent.config.reader import Reader, shown


@dataclass(frozen=True, slots=True)
class TenantBudget:
    tenant: str
    monthly_usd: Decimal


def parse_tenant_budgets(r: Reader, budget: dict[str, Any]) -> tuple[TenantBudget, ...]:
    """``budget`` is the ``[budget]`` table as the reader keyed it."""
    out: list[TenantBudget] = []
    for i, item in enumerate(r.array(budget, "budget.tenants")):
        path = f"budget.tenants[{i}]"
        t = r.table(item, path, {"tenant", "monthly_usd"})
        tenant = r.optional_string(t, f"{path}.tenant")
        monthly = r.money(t, f"{path}.monthly_usd")
        if tenant is None or not tenant.strip():
            got = "missing" if tenant is None else f"empty: {shown(tenant)}"
            r.problem(f"{path}.tenant", f"{got} (the tenant as the gateway names it)")
            continue
        if tenant in {b.tenant for b in out}:
            r.problem(f"{path}.tenant", f"tenant {tenant!r} has two budgets")
            continue
        if monthly is None:
            if f"{path}.monthly_usd" not in t:
                r.problem(f"{path}.monthly_usd", "missing (the tenant's monthly budget in USD)")
            continue
        out.append(TenantBudget(tenant, monthly))
    return tuple(out)


def check_tenant_budgets(r: Reader, budgets: tuple[TenantBudget, ...], gateways: int) -> None:
    """A tenant budget needs a gateway to tell the tenants apart."""
    if budgets and not gateways:
        r.problem("budget.tenants", "needs a [[gateways]] entry (tenants come from a gateway)")
