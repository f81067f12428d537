"""The report's "Tenants" section and its records (agent.reporting.tenant_parts): the same
cells in every format, JSON with every field (docs/report-schema.md). No section without a
gateway's figures for the period."""

from __future__ import annotations

from agent.reporting.model import Report, TenantRow
from agent.reporting.render.grid import Column, Section, each, grid, text_column
from agent.reporting.render.values import Cell, Kind

Record = dict[str, Cell]
NOTE = (
    "each model's cost split by the tenant's share of its useful tokens (the gateway's count; "
    "the model's whole: the larger of the engines' and the gateway's), to the cent, adding up "
    "to the model's cost; (unattributed): its tokens no tenant accounts for; list price: what "
    "the gateway's prices charged, list - cost > 0: charged more than the GPU time cost"
)


def tenant_record(t: TenantRow) -> Record:
    """A tenant's row; unknown cost stays unknown, never 0."""
    return {
        "name": Cell(Kind.TEXT, t.name),
        "cost_usd": Cell(Kind.USD, t.cost_usd),
        "useful_tokens": Cell(Kind.COUNT, t.useful_tokens),
        "cost_per_million_tokens_usd": Cell(Kind.USD_PER_M, t.cost_per_million_tokens_usd),
        "idle_cost_usd": Cell(Kind.USD, t.idle_cost_usd),
        "idle_ratio": Cell(Kind.RATIO, t.idle_ratio),
        "list_price_usd": Cell(Kind.USD, t.list_price_usd),
        "list_minus_cost_usd": Cell(Kind.USD, t.list_minus_cost_usd),
        "models": Cell(Kind.TEXT, ", ".join(t.models)),
    }


def tenant_sections(report: Report) -> list[Section]:
    if not report.tenants:
        return []
    columns = (
        text_column("name", "tenant"),
        Column("cost_usd", "cost"),
        Column("useful_tokens", "useful tokens"),
        Column("cost_per_million_tokens_usd", "$/M tokens"),
        Column("idle_cost_usd", "idle cost"),
        Column("idle_ratio", "idle"),
        Column("list_price_usd", "list price"),
        Column("list_minus_cost_usd", "list - cost"),
        text_column("models", "models"),
    )
    return [grid("tenants", "Tenants", columns, each(report.tenants, tenant_record), note=NOTE)]
