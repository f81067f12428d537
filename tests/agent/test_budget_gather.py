"""``gather_budget`` against real databases filled the daemon's way (collector rounds stored,
the real rollup over them, billing records saved as the billing job and FOCUS import save
them), down to the lifecycle: eight simulated days across a month boundary cross the levels
on the days the rate card says."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from sqlalchemy import Engine

from agent.alerting.budget_rules import BUDGET_RULES, budget_conditions
from agent.collect.runner import CollectorRunner
from agent.config.rates import Rate
from agent.config.settings import Config, load_config
from agent.cost.billing import save_records
from agent.cost.budget import gather_budget
from agent.cost.metering import metered_rollup, rollup_for
from agent.cost.ratecard import RateCard
from agent.storage.rollup import Rollup
from agent.storage.store import Store
from alerts.lifecycle import evaluate
from alerts.model import AlertKey, AlertState, Severity
from alerts.rules import DEFAULT_RULES
from collectors.base import Sample
from collectors.billing.base import CostKind, CostRecord
from tests.agent.budget_helpers import MADRID, fired, tuned

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
    box = Box(db, "box-a", [Gpu("box-a", "GPU-a")], rollup_for(db, cfg))
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
    box = Box(db, "box-a", [Gpu("box-a", "GPU-a")], metered_rollup(db, "box-a", CARD, 600))
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
        Box(
            db, "box-a", [Gpu("box-a", "GPU-a", "a"), llama], metered_rollup(db, "box-a", CARD, 600)
        ),
        Box(
            db, "box-b", [Gpu("box-b", "GPU-b", "b"), qwen], metered_rollup(db, "box-b", dear, 600)
        ),
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
    box = Box(db, "box-a", [Gpu("box-a", "GPU-a")], metered_rollup(db, "box-a", CARD, 600))
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
