"""The split rule of agent.cost.tenants on figures worked by hand: shares of the larger of the
engine's and the gateway's token counts, micro-dollar lines that add up exactly, the rounding
remainder's place, and unknown cost kept unknown."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

from agent.cost.tenant_reads import TenantUse
from agent.cost.tenants import UNATTRIBUTED, ModelCost, split_model


def _line(cost: str, useful: float, unknown: str | None = None, idle: str = "0") -> ModelCost:
    return ModelCost("llama", Decimal(cost), useful, Decimal(idle), unknown)


def test_tokens_no_key_sent_stay_unattributed_and_carry_the_remainder() -> None:
    used = {"a": TenantUse(output=300.0), "b": TenantUse(output=100.0, spend_usd=0.5)}
    parts = {p.tenant: p for p in split_model(_line("10", 1000.0, idle="4"), used, "output")}
    assert parts["a"].cost_usd == Decimal("3.000000") and parts["a"].idle_usd == Decimal("1.2")
    assert parts["b"].cost_usd == Decimal("1.000000") and parts["b"].list_usd == Decimal("0.5")
    assert parts[UNATTRIBUTED].cost_usd == Decimal("6.000000")
    assert parts[UNATTRIBUTED].share == Decimal("0.6")


def test_thirds_round_to_micro_dollars_and_the_largest_tenant_takes_the_remainder() -> None:
    # The gateway accounts for every token: no unattributed line; 1/3 of $1 each is
    # $0.333333, the cent-fraction left over goes to the largest (here the first by name).
    used = {k: TenantUse(output=100.0) for k in ("a", "b", "c")}
    parts = split_model(_line("1", 300.0), used, "output")
    assert [p.tenant for p in parts] == ["a", "b", "c"]
    assert [p.cost_usd for p in parts] == [Decimal("0.333334"), Decimal("0.333333"),
                                           Decimal("0.333333")]  # fmt: skip
    assert sum(p.cost_usd or 0 for p in parts) == Decimal("1")


def test_a_gateway_counting_more_than_the_engine_gives_the_shares_by_its_own_sum() -> None:
    # LiteLLM counts every prompt token, the engine only the computed ones: the gateway's
    # 1500 tokens are the whole model, 2:1.
    used = {"a": TenantUse(prompt=900.0, output=100.0), "b": TenantUse(prompt=400.0, output=100.0)}
    parts = split_model(_line("3", 1200.0), used, "output+prompt")
    assert {p.tenant: p.cost_usd for p in parts} == {"a": Decimal("2"), "b": Decimal("1")}


def test_the_rule_output_counts_output_tokens_only() -> None:
    used = {"a": TenantUse(prompt=1e6, output=50.0), "b": TenantUse(prompt=0.0, output=50.0)}
    parts = {p.tenant: p for p in split_model(_line("2", 100.0), used, "output")}
    assert parts["a"].cost_usd == parts["b"].cost_usd == Decimal("1")


def test_an_unknown_model_cost_leaves_every_line_unknown_not_zero() -> None:
    used = {"a": TenantUse(output=10.0)}
    parts = split_model(_line("0", 20.0, "no rate"), used, "output")
    assert [(p.tenant, p.cost_usd, p.idle_usd) for p in parts] == [
        ("a", None, None), (UNATTRIBUTED, None, None)]  # fmt: skip


def test_the_report_splits_to_the_cent_and_still_adds_up() -> None:
    used = {k: TenantUse(output=100.0) for k in ("a", "b", "c")}
    parts = split_model(_line("1.004", 400.0), used, "output", Decimal("0.01"))
    assert [p.cost_usd for p in parts] == [Decimal("0.25")] * 3 + [Decimal("0.25")]
    assert parts[-1].tenant == UNATTRIBUTED


def test_without_a_gateway_cost_json_has_empty_tenant_lists_and_no_table(tmp_path: Path) -> None:
    from typing import Any, cast

    from agent.cli.cost_tenants import as_json, lines
    from agent.config.settings import load_config

    path = tmp_path / "g.toml"
    path.write_text('host = "box"\n')
    config = load_config(str(path), {})
    summary = cast(Any, None)  # not read: no gateway, nothing to split
    assert as_json(config, summary) == {"tenants": [], "tenant_models_not_served": []}
    assert lines(config, summary) == []
