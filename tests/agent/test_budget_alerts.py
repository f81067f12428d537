"""Budget alerts: each condition over hand-built inputs (pure), then ``gather_budget`` against
real databases filled the daemon's way (collector rounds stored, the real rollup over them,
billing records saved as the billing job and FOCUS import save them), down to the lifecycle:
eight simulated days across a month boundary cross the levels on the days the rate card says."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from sqlalchemy import Engine

from agent.billing import save_records
from agent.budget_alerts import (
    BUDGET_RULES,
    BudgetInputs,
    budget_conditions,
    gather_budget,
    month_bounds,
)
from agent.config import Config, load_config
from agent.cost import Line
from agent.db import open_database, upgrade_database
from agent.ratecard import Rate, RateCard
from agent.rollup import Rollup
from agent.runner import CollectorRunner
from agent.store import Store
from alerts.lifecycle import evaluate
from alerts.model import AlertKey, AlertState, Condition, Severity, State
from alerts.rules import DEFAULT_RULES, RuleSpec
from collectors.base import Sample
from collectors.billing.base import CostKind, CostRecord

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


# -- gather_budget, against SQLite and PostgreSQL -----------------------------------------------

GiB = 2**30
# 3.60 USD an hour is exactly 0.001 USD a second: every expected figure below is exact.
CARD = RateCard((Rate(usd_per_hour=Decimal("3.60")),))
TOKENS = "gpuwatch_engine_generation_tokens_total"


@dataclass
class Gpu:
    """NVML, scripted: one GPU, busy at 50 %, and which serving target holds its memory."""

    host: str
    uuid: str
    target: str | None = None
    name: str = "nvml"

    def collect(self, now: datetime) -> Iterable[Sample]:
        labels = {"host": self.host, "gpu_uuid": self.uuid, "gpu_index": "0"}
        out = [
            Sample(metric="gpuwatch_gpu_info", value=1.0, labels=labels, ts=now),
            Sample(metric="gpuwatch_gpu_utilization_ratio", value=0.5, labels=labels, ts=now),
        ]
        if self.target:
            out.append(Sample(metric="gpuwatch_target_gpu_memory_bytes", value=8.0 * GiB,
                              labels={**labels, "target": self.target}, ts=now))  # fmt: skip
        return out


@dataclass
class Scrape:
    """An engine's /metrics, scripted: one model's generation-token counter."""

    host: str
    target: str
    model: str
    tokens: float = 0.0

    @property
    def name(self) -> str:
        return f"scrape:{self.target}"

    def collect(self, now: datetime) -> Iterable[Sample]:
        labels = {"host": self.host, "target": self.target, "engine": "vllm", "model": self.model}
        return [Sample(metric=TOKENS, value=self.tokens, labels=labels, ts=now)]


@dataclass
class Box:
    """One host's daemon minus the clock: collect and store a round, then roll up, at ``now``."""

    db: Engine
    host: str
    collectors: list[Any]
    rollup: Rollup
    runner: CollectorRunner = field(init=False)
    store: Store = field(init=False)

    def __post_init__(self) -> None:
        self.runner = CollectorRunner(self.host, self.collectors, timer=lambda: 0.0)
        self.store = Store(self.db, self.host)

    def tick(self, now: datetime) -> None:
        self.store.write_round(self.runner.run(now))
        self.rollup.run(now)


@pytest.fixture
def db(db_url: str) -> Iterator[Engine]:
    upgrade_database(db_url)
    engine = open_database(db_url)
    yield engine
    engine.dispose()


def config(tmp_path: Path, db_url: str, text: str) -> Config:
    path = tmp_path / "gpuwatch.toml"
    path.write_text(f'host = "box-a"\ndatabase_url = "{db_url}"\n{text}')
    return load_config(str(path), {})


def test_a_simulated_month_fires_each_level_on_its_day(
    db_url: str, db: Engine, tmp_path: Path
) -> None:
    # $3.60 an hour is $86.40 a day: a $432 budget lasts five days. The fleet starts on
    # 29 October (Madrid), so October reaches 50 % on the 31st at noon; November starts from
    # zero at Madrid's midnight (23:00 UTC) and reaches 50, 80 and 100 % after 2.5, 4 and 5
    # days. Hourly ticks, each stored and rolled up, and the rules 5 minutes later, after the
    # daemon's minute rollup.
    toml = (
        'timezone = "Europe/Madrid"\n[daemon]\ninterval_seconds = 3600\n[budget]\n'
        'monthly_usd = 432\n[[rates]]\ngpu = "*"\nusd_per_hour = 3.60\n'
    )
    cfg = config(tmp_path, db_url, toml)
    box = Box(db, "box-a", [Gpu("box-a", "GPU-a")], Rollup.from_config(db, cfg))
    start = datetime(2026, 10, 29, tzinfo=MADRID).astimezone(UTC)
    prior: dict[AlertKey, AlertState] = {}
    seen: list[tuple[str, str, str, dict[str, str]]] = []
    firing: dict[str, AlertState] = {}
    for hour in range(8 * 24 + 1):
        tick = start + timedelta(hours=hour)
        box.tick(tick)
        now = tick + timedelta(minutes=5)
        box.rollup.run(now)
        data = gather_budget(db, cfg, now)
        found, evaluated = budget_conditions(DEFAULT_RULES, data)
        step = evaluate(DEFAULT_RULES, found, prior, now, evaluated_rules=evaluated)
        prior = step.states
        for t in step.transitions:
            when = f"{t.at.astimezone(MADRID):%m-%d %H:%M}"
            seen.append((when, t.to.value, t.key.rule, t.key.label_map()))
            firing.setdefault(f"{t.key.rule} {t.key.label_map().get('level', '')}", t.alert)
    october, november = (
        {"scope": "fleet", "month": "2026-10"},
        {"scope": "fleet", "month": "2026-11"},
    )
    assert seen == [
        ("10-31 12:05", "firing", "BudgetThreshold", october | {"level": "50%"}),
        ("11-01 00:05", "resolved", "BudgetThreshold", october | {"level": "50%"}),
        ("11-01 07:05", "firing", "ProjectedOverBudget", november),  # 6 h of history, 1 h for
        ("11-03 12:05", "firing", "BudgetThreshold", november | {"level": "50%"}),
        ("11-05 00:05", "firing", "BudgetThreshold", november | {"level": "80%"}),
        ("11-06 00:05", "firing", "BudgetThreshold", november | {"level": "100%"}),
    ]  # October's forecast stayed quiet: 3 days at $86.40 never reach $432.

    assert (
        firing["BudgetThreshold 80%"]
        .annotations["summary"]
        .endswith(": $345.60 of the $432.00 budget for 2026-11 (80.0%, metered spend)")
    )
    full = firing["BudgetThreshold 100%"]
    assert (full.severity, full.value) == (Severity.CRITICAL, 1.0)
    # At 07:05 on the 1st: $25.20 spent, and $3.60 an hour for the 712 h 55 m left.
    forecast = firing["ProjectedOverBudget "]
    assert forecast.annotations["forecast_usd"] == "2591.70"
    assert forecast.annotations["summary"].endswith(
        ": $2,591.70 forecast for 2026-11 against $432.00 at $3.60/h; at this pace the budget"
        " runs out on 2026-11-06"
    )
    last = gather_budget(db, cfg, start + timedelta(days=8, minutes=5))
    assert last.month_start == datetime(2026, 10, 31, 23, tzinfo=UTC)
    assert (round(last.spent_usd, 2), last.source) == (Decimal("432.00"), "metered")
    (projected,) = fired("ProjectedOverBudget", last)
    assert projected.annotations["summary"].endswith(
        "the budget is already spent ($432.00, metered)"
    )


def test_billed_records_of_the_month_count_when_they_exceed_the_metered_spend(
    db_url: str, db: Engine, tmp_path: Path
) -> None:
    cfg = config(tmp_path, db_url, "[budget]\nmonthly_usd = 100\n")
    box = Box(db, "box-a", [Gpu("box-a", "GPU-a")], Rollup(db, "box-a", CARD, 600))
    t0 = datetime(2026, 11, 2, tzinfo=UTC)
    for i in range(6 * 4 + 1):  # 4 hours at $3.60
        box.tick(t0 + timedelta(minutes=10 * i))
    now = t0 + timedelta(hours=4)

    def record(
        rid: str, day: int, amount: str, currency: str = "USD", month: int = 11
    ) -> CostRecord:
        begin = datetime(2026, month, day, tzinfo=UTC)
        return CostRecord("runpod", rid, "pod-1", begin, begin + timedelta(days=1),
                          Decimal(amount), currency, CostKind.BILLED)  # fmt: skip

    assert gather_budget(db, cfg, now).billed_usd is None
    with db.begin() as conn:
        save_records(conn, [record("oct", 31, "500", month=10), record("eur", 1, "900", "EUR"),
                            record("a", 1, "10.25")], now)  # fmt: skip
    lagging = gather_budget(db, cfg, now)  # the bill is behind what was metered
    assert (lagging.metered_usd, lagging.billed_usd) == (Decimal("14.40"), Decimal("10.25"))
    assert (lagging.spent_usd, lagging.source) == (Decimal("14.40"), "metered")
    with db.begin() as conn:
        save_records(conn, [record("a", 1, "60.50"), record("b", 2, "0.75")], now)  # restated
    data = gather_budget(db, cfg, now)
    assert (data.spent_usd, data.source) == (Decimal("61.25"), "billed")
    (half,) = fired("BudgetThreshold", data)
    assert half.annotations["summary"].endswith(
        ": $61.25 of the $100.00 budget for 2026-11 (61.2%, billed spend)"
    )


def test_a_fleet_day_gives_hourly_spend_across_hosts_the_pace_and_cost_per_model(
    db_url: str, db: Engine, tmp_path: Path
) -> None:
    # Two hosts at $3.60 an hour each; box-b's price quadruples for the 26th hour (a bigger
    # instance), so that hour costs $18.00 against a $7.20 median: 2.5 x.
    t0 = datetime(2026, 11, 2, tzinfo=UTC)
    jump = t0 + timedelta(hours=25)
    dear = RateCard((Rate(usd_per_hour=Decimal("3.60"), valid_to=jump),
                     Rate(usd_per_hour=Decimal("14.40"), valid_from=jump)))  # fmt: skip
    llama = Scrape("box-a", "a", "llama")
    qwen = Scrape("box-b", "b", "qwen")
    boxes = [
        Box(db, "box-a", [Gpu("box-a", "GPU-a", "a"), llama], Rollup(db, "box-a", CARD, 600)),
        Box(db, "box-b", [Gpu("box-b", "GPU-b", "b"), qwen], Rollup(db, "box-b", dear, 600)),
    ]
    cfg = config(tmp_path, db_url, "[budget]\nmonthly_usd = 10000\n")
    for i in range(26 * 6 + 1):  # every 10 minutes for 26 hours
        llama.tokens += 100_000  # 600k useful tokens an hour
        qwen.tokens += 600  # 3,600 an hour: 86,400 in a day, under min_tokens
        for box in boxes:
            box.tick(t0 + timedelta(minutes=10 * i))
    now = t0 + timedelta(hours=26)

    data = gather_budget(db, cfg, now)

    assert len(data.hourly_usd) == 26
    assert {usd for _, usd in data.hourly_usd[:-1]} == {Decimal("7.20")}
    assert data.hourly_usd[-1] == (jump, Decimal("18.00"))
    # The pace: the last 24 h, both hosts, including the dear hour.
    assert (data.burn_usd, data.burn_seconds) == (Decimal("7.20") * 23 + Decimal(18), 86400.0)
    assert data.metered_usd == Decimal("7.20") * 25 + Decimal(18)
    by_model = {m.name: m for m in data.models}
    assert by_model["llama"].useful_tokens == 14_400_000
    assert by_model["llama"].cost_usd == Decimal("86.40")
    assert by_model["llama"].usd_per_million_tokens == Decimal("6.00")

    rules = {**DEFAULT_RULES, **tuned("CostPerMtokHigh", api_usd_per_million=5.0)}
    found, evaluated = budget_conditions(rules, data)
    assert evaluated == set(BUDGET_RULES)
    by_rule = {c.key.rule: c for c in found}
    assert set(by_rule) == {"BurnRateJump", "CostPerMtokHigh"}  # $10,000 is far away
    assert by_rule["BurnRateJump"].value == 2.5
    assert (
        "$18.00 spent in the hour from 2026-11-03 01:00 against a median $7.20"
        in (by_rule["BurnRateJump"].annotations["summary"])
    )
    assert by_rule["CostPerMtokHigh"].key.label_map() == {"scope": "fleet", "model": "llama"}
    assert (
        by_rule["CostPerMtokHigh"]
        .annotations["summary"]
        .endswith("an API would be cheaper: $6.00 vs $5.00 per million tokens")
    )


def test_a_new_install_forecasts_from_what_it_has_metered_not_the_whole_day(
    db_url: str, db: Engine, tmp_path: Path
) -> None:
    cfg = config(tmp_path, db_url, "[budget]\nmonthly_usd = 1000\n")
    box = Box(db, "box-a", [Gpu("box-a", "GPU-a")], Rollup(db, "box-a", CARD, 600))
    t0 = datetime(2026, 11, 20, 9, tzinfo=UTC)
    for i in range(5 * 6 + 1):
        box.tick(t0 + timedelta(minutes=10 * i))
    early = gather_budget(db, cfg, t0 + timedelta(hours=5, minutes=3))
    assert (early.burn_usd, early.burn_seconds) == (Decimal("18.00"), 5 * 3600.0)
    assert fired("ProjectedOverBudget", early) == []  # 5 h: not enough to judge
    for i in range(5 * 6 + 1, 7 * 6 + 1):
        box.tick(t0 + timedelta(minutes=10 * i))
    later = gather_budget(db, cfg, t0 + timedelta(hours=7, minutes=3))
    assert later.burn_seconds == 7 * 3600.0
    # $25.20 + $3.60 x (10 days 7 h 57 m left) = $917.82: within the $1,000.
    assert fired("ProjectedOverBudget", later) == []
    nothing = gather_budget(db, cfg, t0 - timedelta(days=40))
    assert (nothing.metered_usd, nothing.burn_seconds, nothing.hourly_usd) == (Decimal(0), 0.0, ())
