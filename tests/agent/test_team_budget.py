"""Budgets per team: the fleet's threshold and forecast rules on a team's
cost, under its ``team`` label, on SQLite and PostgreSQL. Two teams, one over its budget: its
alerts fire, and none for the other team or the fleet."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from sqlalchemy import Engine

from agent.alerting.budget_rules import budget_conditions
from agent.cost.budget import gather_budget
from agent.cost.signals import cost_samples
from alerts.lifecycle import evaluate
from alerts.model import State
from alerts.rules import DEFAULT_RULES, RuleSpec
from tests.agent.team_helpers import fill, team_config

START = datetime(2026, 11, 10, 12, 0, tzinfo=UTC)
BUDGETS = """
[[budget.teams]]
team = "search"
monthly_usd = 4
[[budget.teams]]
team = "ads"
monthly_usd = 10000
"""


def _rules() -> dict[str, RuleSpec]:
    # One level (80 %) and a forecast from an hour of history: the figures below are one hour.
    threshold = DEFAULT_RULES["BudgetThreshold"]
    forecast = DEFAULT_RULES["ProjectedOverBudget"]
    return {
        **DEFAULT_RULES,
        "BudgetThreshold": replace(threshold, thresholds={"first_fraction": 0.8}),
        "ProjectedOverBudget": replace(forecast, thresholds={"min_history_seconds": 0.0}),
    }


def test_a_team_over_its_budget_fires_for_that_team_only(
    db_url: str, db: Engine, tmp_path: Path
) -> None:
    end = fill(db, START)
    config = team_config(tmp_path, db_url, BUDGETS)
    now = end + timedelta(minutes=5)
    rules = _rules()

    data = gather_budget(db, config, now, rules)
    found, evaluated = budget_conditions(rules, data)
    step = evaluate(rules, found, {}, now, evaluated_rules=evaluated)

    states = sorted(
        (s.key.rule, s.key.label_map().get("team"), s.key.label_map().get("level"), s.state)
        for s in step.states.values()
    )
    # The forecast is held an hour (its rule's "for") before it fires, as the fleet's is.
    assert states == [
        ("BudgetThreshold", "search", "80%", State.FIRING),
        ("ProjectedOverBudget", "search", None, State.PENDING),
    ]
    search, ads = data.teams
    # Each team holds one of the four GPUs, metered alike: a quarter of the fleet's spend.
    assert search.metered_usd == ads.metered_usd == data.metered_usd / 4 > Decimal("3.5")
    assert search.burn_usd == search.metered_usd and search.burn_seconds == data.burn_seconds
    threshold = next(c for c in found if c.key.rule == "BudgetThreshold")
    assert threshold.key.label_map() == {"scope": "team", "team": "search", "month": "2026-11",
                                         "level": "80%"}  # fmt: skip
    assert f"${search.metered_usd:,.2f} of the $4.00 budget" in threshold.annotations["summary"]
    assert "team=search" in threshold.annotations["summary"]
    # The fleet has no budget of its own: nothing for it.
    assert all(c.key.label_map()["scope"] == "team" for c in found)


def test_metrics_give_each_budgeted_team_its_used_ratio(
    db_url: str, db: Engine, tmp_path: Path
) -> None:
    end = fill(db, START)
    config = team_config(tmp_path, db_url, BUDGETS)
    now = end + timedelta(minutes=5)
    samples = cost_samples(db, config, now)
    ratios = {
        s.labels.get("team"): s.value
        for s in samples
        if s.metric == "gpuwatch_budget_used_ratio" and s.labels.get("scope") == "team"
    }
    search, ads = gather_budget(db, config, now).teams
    assert ratios == {
        "search": pytest.approx(float(search.metered_usd / 4)),
        "ads": pytest.approx(float(ads.metered_usd / 10000)),
    }
