"""Shared by the budget alert tests: budget inputs for 10 November 2026 against a $1,500
budget, rules with tuned thresholds, and the conditions a rule finds."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

from agent.alerting.budget_rules import budget_conditions
from agent.cost.budget import BudgetInputs
from alerts.model import Condition
from alerts.rules import DEFAULT_RULES, RuleSpec

MADRID = ZoneInfo("Europe/Madrid")
NOV = datetime(2026, 11, 10, tzinfo=UTC)  # 21 whole days of November left
BUDGET = Decimal(1500)


def budget_inputs(**overrides: Any) -> BudgetInputs:
    base = BudgetInputs(now=NOV, budget_usd=BUDGET, metered_usd=Decimal(0))
    return replace(base, **overrides)


def tuned(rule: str, **thresholds: float | None) -> dict[str, RuleSpec]:
    spec = DEFAULT_RULES[rule]
    return {rule: replace(spec, thresholds={**spec.thresholds, **thresholds})}


def fired(
    rule: str, data: BudgetInputs, rules: dict[str, RuleSpec] | None = None
) -> list[Condition]:
    found, evaluated = budget_conditions(rules or DEFAULT_RULES, data)
    assert rule in evaluated
    return [c for c in found if c.key.rule == rule]


def levels(found: Iterable[Condition]) -> list[str]:
    return [c.key.label_map()["level"] for c in found]
