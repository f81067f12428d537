"""Budget alerts, each condition over hand-built inputs (pure): the month in the configured
zone, BudgetThreshold's levels, ProjectedOverBudget's forecast, BurnRateJump against the
median hour and CostPerMtokHigh against an API price or a ceiling. ``gather_budget`` over real
databases is in test_budget_gather.py."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

from agent.alerting.budget_rules import budget_conditions
from agent.cost.budget import month_bounds
from agent.cost.summarize import Line
from alerts.lifecycle import evaluate
from alerts.model import AlertKey, AlertState, Severity, State
from alerts.rules import DEFAULT_RULES
from tests.agent.budget_helpers import MADRID, NOV, budget_inputs, fired, levels, tuned

# -- month bounds ----------------------------------------------------------------------------


def test_the_month_is_the_calendar_month_of_the_configured_zone() -> None:
    # 23:30 UTC on 31 October is already November in Madrid (UTC+1 after the DST change).
    start, end = month_bounds(datetime(2026, 10, 31, 23, 30, tzinfo=UTC), MADRID)
    assert (start, end) == (
        datetime(2026, 10, 31, 23, tzinfo=UTC),
        datetime(2026, 11, 30, 23, tzinfo=UTC),
    )
    december = month_bounds(datetime(2026, 12, 15, tzinfo=UTC), UTC)
    assert december == (datetime(2026, 12, 1, tzinfo=UTC), datetime(2027, 1, 1, tzinfo=UTC))
    # A summer month in Madrid starts at 22:00 UTC (UTC+2).
    assert month_bounds(datetime(2026, 7, 4, tzinfo=UTC), MADRID)[0] == datetime(
        2026, 6, 30, 22, tzinfo=UTC
    )
    data = budget_inputs(now=datetime(2026, 10, 31, 23, 30, tzinfo=UTC), zone=MADRID)
    assert data.month == "2026-11"
    assert budget_inputs(zone=UTC).month == "2026-11"


# -- BudgetThreshold -------------------------------------------------------------------------


def test_each_level_reached_is_one_alert_and_the_boundary_counts() -> None:
    assert fired("BudgetThreshold", budget_inputs(metered_usd=Decimal("749.99"))) == []
    assert levels(fired("BudgetThreshold", budget_inputs(metered_usd=Decimal(750)))) == ["50%"]
    found = fired("BudgetThreshold", budget_inputs(metered_usd=Decimal("1275")))
    assert levels(found) == ["50%", "80%"]
    half = found[0]
    assert half.key == AlertKey.of(
        "BudgetThreshold", {"scope": "fleet", "month": "2026-11", "level": "50%"}
    )
    assert half.value == 0.85
    assert half.annotations["summary"] == (
        "Budget threshold crossed (level=50%, month=2026-11, scope=fleet): 85% of the budget"
        " spent: $1,275.00 of the $1,500.00 budget for 2026-11 (85.0%, metered spend)"
    )
    assert (half.annotations["spent_usd"], half.annotations["source"]) == ("1275.00", "metered")
    assert "severity" not in half.annotations


def test_the_full_budget_is_critical_and_the_lower_levels_stay_warnings() -> None:
    found = fired("BudgetThreshold", budget_inputs(metered_usd=Decimal(1500)))
    assert levels(found) == ["50%", "80%", "100%"]
    assert [c.annotations.get("severity") for c in found] == [None, None, "critical"]
    states = evaluate(DEFAULT_RULES, found, {}, NOV).states
    severity = {key.label_map()["level"]: s.severity for key, s in states.items()}
    assert severity == {"50%": Severity.WARNING, "80%": Severity.WARNING, "100%": Severity.CRITICAL}
    assert all(s.state is State.FIRING for s in states.values())  # for 0: at once


def test_billed_spend_counts_when_it_is_larger_than_the_metered_figure() -> None:
    billed = budget_inputs(metered_usd=Decimal(700), billed_usd=Decimal("1210.50"))
    (half, eighty) = fired("BudgetThreshold", billed)
    assert eighty.annotations["source"] == "billed"
    summary = eighty.annotations["summary"]
    assert summary.endswith("$1,210.50 of the $1,500.00 budget for 2026-11 (80.7%, billed spend)")
    lagging = budget_inputs(metered_usd=Decimal(800), billed_usd=Decimal(100))
    (only,) = fired("BudgetThreshold", lagging)
    assert only.annotations["source"] == "metered" and only.value == pytest.approx(800 / 1500)


def test_no_budget_is_evaluated_and_clear_so_a_removed_budget_resolves() -> None:
    firing = fired("BudgetThreshold", budget_inputs(metered_usd=Decimal(1300)))
    before = evaluate(DEFAULT_RULES, firing, {}, NOV).states
    for budget in (None, Decimal(0)):
        data = budget_inputs(metered_usd=Decimal(1300), budget_usd=budget)
        assert fired("BudgetThreshold", data) == []
    found, evaluated = budget_conditions(DEFAULT_RULES, budget_inputs(budget_usd=None))
    later = evaluate(DEFAULT_RULES, found, before, NOV + timedelta(minutes=1),
                     evaluated_rules=evaluated)  # fmt: skip
    assert {t.to for t in later.transitions} == {State.RESOLVED}
    assert len(later.transitions) == 2


def test_a_new_month_is_a_new_alert_and_the_old_one_resolves() -> None:
    rules = DEFAULT_RULES
    end_of_november = datetime(2026, 11, 30, 22, 59, tzinfo=UTC)  # 23:59 in Madrid
    prior: dict[AlertKey, AlertState] = {}
    history = []
    for now, spent in (
        (end_of_november, Decimal(1250)),
        (end_of_november + timedelta(minutes=2), Decimal(5)),  # 1 December in Madrid
        (datetime(2026, 12, 20, tzinfo=UTC), Decimal(760)),
    ):
        data = budget_inputs(now=now, zone=MADRID, metered_usd=spent)
        found, evaluated = budget_conditions(rules, data)
        step = evaluate(rules, found, prior, now, evaluated_rules=evaluated)
        prior = step.states
        history += [
            (t.to, t.key.label_map()["month"], t.key.label_map()["level"])
            for t in step.transitions
            if t.key.rule == "BudgetThreshold"
        ]
    assert history == [
        (State.FIRING, "2026-11", "50%"),
        (State.FIRING, "2026-11", "80%"),
        (State.RESOLVED, "2026-11", "50%"),
        (State.RESOLVED, "2026-11", "80%"),
        (State.FIRING, "2026-12", "50%"),
    ]


def test_a_level_fires_once_while_the_month_goes_on() -> None:
    prior: dict[AlertKey, AlertState] = {}
    firings = 0
    for day in range(5):
        now = NOV + timedelta(days=day)
        data = budget_inputs(now=now, metered_usd=Decimal(800 + 20 * day))
        found, evaluated = budget_conditions(DEFAULT_RULES, data)
        step = evaluate(DEFAULT_RULES, found, prior, now, evaluated_rules=evaluated)
        prior = step.states
        firings += sum(t.to is State.FIRING for t in step.transitions)
    assert firings == 1  # 50 % once; 80 % (1200) not reached by 880


def test_tuned_levels_are_labelled_by_their_percent() -> None:
    rules = tuned("BudgetThreshold", first_fraction=0.575, second_fraction=None,
                  critical_fraction=0.9)  # fmt: skip
    found = fired("BudgetThreshold", budget_inputs(metered_usd=Decimal(1400)), rules)
    assert levels(found) == ["57.5%", "90%"]
    assert [c.annotations.get("severity") for c in found] == [None, "critical"]


# -- ProjectedOverBudget ---------------------------------------------------------------------


def pace(usd_per_hour: float, hours: float) -> dict[str, Any]:
    return {"burn_usd": Decimal(repr(usd_per_hour * hours)), "burn_seconds": hours * 3600}


def test_the_forecast_adds_the_last_day_s_pace_until_the_month_ends() -> None:
    # $600 spent by 10 November, $3 an hour for the 21 days left: 600 + 3 x 504 h = $2,112;
    # the budget's last $900 lasts 300 h, until 22 November 12:00.
    data = budget_inputs(metered_usd=Decimal(600), **pace(3.0, 24))
    (found,) = fired("ProjectedOverBudget", data)
    assert found.key == AlertKey.of("ProjectedOverBudget", {"scope": "fleet", "month": "2026-11"})
    assert found.value == pytest.approx(2112 / 1500)
    assert found.annotations["forecast_usd"] == "2112.00"
    assert found.annotations["summary"] == (
        "Projected over budget (month=2026-11, scope=fleet): 141% of the budget by period end:"
        " $2,112.00 forecast for 2026-11 against $1,500.00 at $3.00/h; at this pace the budget"
        " runs out on 2026-11-22"
    )


def test_a_forecast_within_budget_is_quiet_and_exactly_the_budget_too() -> None:
    slower = budget_inputs(metered_usd=Decimal(600), **pace(1.5, 24))  # $1,356
    assert fired("ProjectedOverBudget", slower) == []
    exact = budget_inputs(metered_usd=Decimal(240), **pace(2.5, 24))  # 240 + 2.5 x 504 = 1500
    assert fired("ProjectedOverBudget", exact) == []
    assert fired("ProjectedOverBudget", replace(exact, metered_usd=Decimal("240.01")))


def test_no_forecast_from_less_history_than_the_minimum() -> None:
    assert fired("ProjectedOverBudget", budget_inputs(**pace(50.0, 5.99))) == []
    assert fired("ProjectedOverBudget", budget_inputs(**pace(50.0, 6)))  # 6 h: judged
    rules = tuned("ProjectedOverBudget", min_history_seconds=12 * 3600)
    assert fired("ProjectedOverBudget", budget_inputs(**pace(50.0, 6)), rules) == []
    assert fired("ProjectedOverBudget", budget_inputs(**pace(50.0, 6), budget_usd=None)) == []


def test_a_spent_budget_says_so_instead_of_a_date() -> None:
    data = budget_inputs(metered_usd=Decimal(1600), **pace(0.0, 24))
    (found,) = fired("ProjectedOverBudget", data)
    assert found.annotations["summary"].endswith("the budget is already spent ($1,600.00, metered)")


def test_the_exhaustion_date_is_in_the_configured_zone() -> None:
    # 22 November 23:30 UTC is 23 November in Madrid.
    data = budget_inputs(metered_usd=Decimal(600), zone=MADRID, **pace(3.0, 24))
    data = replace(data, now=NOV + timedelta(hours=11, minutes=30))
    (found,) = fired("ProjectedOverBudget", data)
    assert found.annotations["summary"].endswith("runs out on 2026-11-23")


# -- BurnRateJump ----------------------------------------------------------------------------


def hours(*usd: float, last: datetime = NOV - timedelta(hours=1)) -> tuple[Any, ...]:
    """Hourly spend ending with the hour that starts at ``last``."""
    start = last - timedelta(hours=len(usd) - 1)
    return tuple((start + timedelta(hours=i), Decimal(repr(v))) for i, v in enumerate(usd))


def test_an_hour_above_twice_the_median_hour_is_a_jump() -> None:
    data = budget_inputs(now=NOV + timedelta(minutes=3), hourly_usd=hours(*[10.0] * 24, 25.0))
    (found,) = fired("BurnRateJump", data)
    assert found.key == AlertKey.of("BurnRateJump", {"scope": "fleet"})
    assert found.value == 2.5
    assert found.annotations["summary"] == (
        "Burn rate jump (scope=fleet): 2.5x the baseline: $25.00 spent in the hour from"
        " 2026-11-09 23:00 against a median $10.00 an hour over the 24 hours before"
    )
    assert fired("BurnRateJump", replace(data, hourly_usd=hours(*[10.0] * 24, 20.0))) == []


def test_the_median_ignores_a_few_odd_hours_in_the_baseline() -> None:
    baseline = [10.0] * 20 + [0.5] * 4 + [200.0] * 3  # idle nights, one expensive afternoon
    (found,) = fired("BurnRateJump", budget_inputs(hourly_usd=hours(*baseline, 21.0)))
    assert found.value == 2.1


def test_too_little_history_or_nothing_lately_is_quiet() -> None:
    assert fired("BurnRateJump", budget_inputs(hourly_usd=hours(*[10.0] * 23, 50.0))) == []
    old = hours(*[10.0] * 24, 50.0, last=NOV - timedelta(hours=3))
    assert fired("BurnRateJump", budget_inputs(hourly_usd=old)) == []
    # While the last hour's rollup is still pending, the hour before is judged again.
    lagging = hours(*[10.0] * 24, 50.0, last=NOV - timedelta(hours=2))
    assert fired("BurnRateJump", budget_inputs(now=NOV + timedelta(minutes=2), hourly_usd=lagging))
    assert fired("BurnRateJump", budget_inputs(hourly_usd=hours(*[0.0] * 24, 5.0))) == []
    assert fired("BurnRateJump", budget_inputs()) == []
    rules = tuned("BurnRateJump", min_history_hours=48)
    assert fired("BurnRateJump", budget_inputs(hourly_usd=hours(*[10.0] * 47, 50.0)), rules) == []


def test_the_baseline_is_the_week_before_the_hour() -> None:
    # 8 days of hours: the oldest day, at $100, is out of the week; the rest is $10.
    data = budget_inputs(hourly_usd=hours(*[100.0] * 24, *[10.0] * 167, 30.0))
    (found,) = fired("BurnRateJump", data)
    assert found.value == 3.0
    assert "over the 168 hours before" in found.annotations["summary"]


# -- CostPerMtokHigh -------------------------------------------------------------------------


def line(model: str, usd: str, tokens: float) -> Line:
    return Line(model, Decimal(usd), tokens, tokens, tokens)


MODELS = (line("llama", "36", 6e6), line("qwen", "90", 99_999), line("idle", "10", 0))


def test_a_model_dearer_than_the_api_says_the_api_would_be_cheaper() -> None:
    rules = tuned("CostPerMtokHigh", api_usd_per_million=5.0)
    (found,) = fired("CostPerMtokHigh", budget_inputs(models=MODELS), rules)
    assert found.key == AlertKey.of("CostPerMtokHigh", {"scope": "fleet", "model": "llama"})
    assert found.value == 6.0
    assert found.annotations["summary"] == (
        "Cost per million tokens high (model=llama, scope=fleet): $6.00 per million useful"
        " tokens over the last 1d; an API would be cheaper: $6.00 vs $5.00 per million tokens"
    )
    cheaper = tuned("CostPerMtokHigh", api_usd_per_million=6.0)  # equal is not dearer
    assert fired("CostPerMtokHigh", budget_inputs(models=MODELS), cheaper) == []


def test_a_model_above_the_ceiling_fires_and_below_it_does_not() -> None:
    rules = tuned("CostPerMtokHigh", ceiling_usd=5.5)
    (found,) = fired("CostPerMtokHigh", budget_inputs(models=MODELS), rules)
    assert found.annotations["summary"].endswith("; above the $5.50 ceiling")
    higher = tuned("CostPerMtokHigh", ceiling_usd=7.0)
    assert fired("CostPerMtokHigh", budget_inputs(models=MODELS), higher) == []


def test_models_with_few_tokens_are_skipped_and_no_limit_means_quiet() -> None:
    found = fired("CostPerMtokHigh", budget_inputs(models=MODELS),
                  tuned("CostPerMtokHigh", ceiling_usd=1.0))  # fmt: skip
    assert [c.key.label_map()["model"] for c in found] == ["llama"]  # qwen: 99,999 tokens
    fewer = tuned("CostPerMtokHigh", ceiling_usd=1.0, min_tokens=99_999)
    found = fired("CostPerMtokHigh", budget_inputs(models=MODELS), fewer)
    assert [c.key.label_map()["model"] for c in found] == ["llama", "qwen"]  # "idle": no tokens
    assert fired("CostPerMtokHigh", budget_inputs(models=MODELS)) == []  # both limits unset


def test_a_disabled_rule_is_neither_evaluated_nor_reported() -> None:
    rules = dict(DEFAULT_RULES)
    rules["BudgetThreshold"] = replace(rules["BudgetThreshold"], enabled=False)
    found, evaluated = budget_conditions(rules, budget_inputs(metered_usd=Decimal(1500)))
    assert found == []
    assert evaluated == {"ProjectedOverBudget", "BurnRateJump", "CostPerMtokHigh"}
