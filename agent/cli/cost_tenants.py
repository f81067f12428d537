"""`gpuwatch cost`'s tenants: each gateway tenant's share of its models' real cost
(:mod:`agent.cost.tenants`), as text lines and as JSON (``tenants``, empty without
``[[gateways]]``)."""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING, Any

from agent.cli.columns import aligned

if TYPE_CHECKING:
    from agent.config.settings import Config
    from agent.cost.summarize import Summary
    from agent.cost.tenants import TenantLine, Tenants


def read(config: Config, summary: Summary) -> Tenants | None:
    """The summary's window split among the gateways' tenants; None without a gateway."""
    if not config.gateways:
        return None
    from agent.cost.provisional import reading
    from agent.cost.split import Split
    from agent.cost.tenant_sources import all_use
    from agent.cost.tenants import summary_models, tenants
    from agent.storage.db import open_database

    engine = open_database(config.database_url)
    try:
        # The minutes not rolled up yet included, as the summary's (agent.cost.provisional).
        with reading(engine, config, (), (summary.start, summary.end)) as (conn, _):
            use = all_use(conn, Split.read(conn, summary.start, summary.end), config.gateways)
    finally:
        engine.dispose()
    rule = config.cost.useful_tokens
    return tenants(summary_models(summary, rule), use, rule)


def as_json(config: Config, summary: Summary) -> dict[str, Any]:
    found = read(config, summary)
    if found is None:
        return {"tenants": [], "tenant_models_not_served": []}
    return {
        "tenants": [_line(t) for t in found.lines],
        "tenant_models_not_served": list(found.unserved),
    }


def _line(t: TenantLine) -> dict[str, Any]:
    share, per, over = t.idle_share, t.per_million, t.overcharged_usd
    return {
        "name": t.name,
        "cost_usd": _usd(t.cost_usd),
        "useful_tokens": t.tokens,
        "cost_per_million_tokens_usd": _usd(per),
        "idle_cost_usd": _usd(t.idle_usd),
        "idle_share": None if share is None else float(share),
        "list_price_usd": _usd(t.list_usd),
        "list_minus_cost_usd": _usd(over),
        "models": [
            {"model": p.model, "cost_usd": _usd(p.cost_usd), "idle_cost_usd": _usd(p.idle_usd),
             "useful_tokens": p.tokens, "share": float(p.share),
             "list_price_usd": _usd(p.list_usd)}
            for p in t.parts
        ],
    }  # fmt: skip


def lines(config: Config, summary: Summary) -> list[str]:
    found = read(config, summary)
    if found is None or not found.lines:
        return []
    rows = [["by tenant", "cost USD", "useful tokens", "USD / M useful", "idle USD", "idle %",
             "list price USD", "list - cost"]]  # fmt: skip
    for t in found.lines:
        share = t.idle_share
        rows.append([t.name, _money(t.cost_usd, 2), f"{t.tokens:,.0f}", _money(t.per_million, 4),
                     _money(t.idle_usd, 2), "n/a" if share is None else f"{share * 100:.0f} %",
                     _money(t.list_usd, 4), _money(t.overcharged_usd, 4)])  # fmt: skip
    out = ["", *aligned(rows, right=range(1, len(rows[0])))]
    out.append(
        f"split by each tenant's share of the model's useful tokens: {', '.join(found.models)}"
    )
    if found.unserved:
        out.append(f"gateway models no GPU here served: {', '.join(found.unserved)}")
    return out


def _usd(value: Decimal | None) -> str | None:
    return None if value is None else str(round(value, 6))


def _money(value: Decimal | None, places: int) -> str:
    return "n/a" if value is None else f"{value:,.{places}f}"
