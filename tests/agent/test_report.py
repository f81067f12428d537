"""The report's figures against a simulated month with known truth (tests/agent/report_month.py),
on SQLite and PostgreSQL: money to the cent, tokens exactly, latency quantiles by the bucket
arithmetic, daily series in the configured zone across the October DST change, filters,
alert counting, budget and forecast, and each recommendation's numbers. Then the periods:
month boundaries in Europe/Madrid, weeks, ranges and the messages bad input gets."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Sequence
from dataclasses import replace
from datetime import UTC, date, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

import pytest
from sqlalchemy import Engine

from agent.config.settings import BudgetConfig, Config, CostConfig
from agent.cost.billing import save_records
from agent.cost.summarize import summarize
from agent.reporting.build import build_report
from agent.reporting.model import Period, Report
from agent.reporting.period import (
    last_week_period,
    month_period,
    range_period,
)
from agent.reporting.render.dispatch import render
from agent.storage.db import open_database, upgrade_database
from alerts.rules import DEFAULT_RULES
from collectors.billing.base import CostKind, CostRecord
from tests.agent import report_month as M
from tests.agent.conftest import MonthTemplates
from tests.agent.report_parsers import PARSERS, figures_from_json

AFTER = datetime(2026, 11, 1, 1, 30, tzinfo=UTC)  # the report is made after the month
MID_OCTOBER = datetime(2026, 10, 15, 10, 30, 40, tzinfo=UTC)
OCTOBER = Period(M.OCT_START, M.OCT_END, "2026-10", M.ZONE)
CENT = Decimal("0.005")
MONTH_HOURS = Decimal(730)


# -- the month, built once per database -----------------------------------------------------------


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def month(request: pytest.FixtureRequest, month_templates: MonthTemplates) -> Iterator[Engine]:
    """The simulated month in a database of its own (module-scoped: every test here only reads
    it), a copy of the one tests/agent/conftest.py fills once per backend."""
    for url in month_templates.copy(request.param):
        engine = open_database(url)
        with engine.begin() as conn:
            save_records(conn, BILLS, AFTER)
        try:
            yield engine
        finally:
            engine.dispose()


def bill(
    source: str, day: str, amount: str, kind: CostKind = CostKind.BILLED, currency: str = "USD"
) -> CostRecord:
    start = M.at(f"{day}T00:00")
    end = start + timedelta(days=1)
    record_id = f"{source}-{day}-{kind.value}"
    return CostRecord(source, record_id, "pod-1", start, end, Decimal(amount), currency, kind)


BILLS = [
    bill("runpod", "2026-10-05", "5000"),
    bill("lambda", "2026-10-07", "4000"),
    bill("runpod", "2026-09-15", "777"),  # the month before
    bill("runpod", "2026-10-09", "1234", CostKind.LIST),  # list price, not the bill
    bill("vast", "2026-10-03", "300", currency="EUR"),  # not USD
]


def config(**changes: Any) -> Config:
    base = Config(
        host="a", database_url="sqlite://", timezone=M.ZONE, budget=BudgetConfig(Decimal(10000))
    )
    return replace(base, **changes)


def report(
    engine: Engine,
    period: Period = OCTOBER,
    now: datetime = AFTER,
    *,
    cfg: Config | None = None,
    hosts: Sequence[str] = (),
    models: Sequence[str] = (),
) -> Report:
    return build_report(engine, cfg or config(), period, now=now, hosts=hosts, models=models)


def usd(got: Decimal | None, want: Decimal) -> None:
    assert got is not None and abs(got - want) < CENT, (got, want)


def per_million(cost: Decimal, tokens: int) -> Decimal:
    return cost / tokens * 1_000_000


def close(got: Decimal | None, want: Decimal) -> None:
    assert got is not None and abs(got - want) <= abs(want) * Decimal("1e-9"), (got, want)


TRUTH = M.truth(M.OCT_START, M.OCT_END)
SEPTEMBER = M.truth(M.FIRST_TICK, M.OCT_START)  # the data the previous period has
METERED = sum(TRUTH.cost.values(), Decimal(0))
MODEL_OF = {t.name: t.model for t in M.TARGETS}


# -- the month's figures --------------------------------------------------------------------------


def test_the_months_totals_match_the_truth(month: Engine) -> None:
    r = report(month)
    t = r.totals
    assert Decimal("8046.00") == METERED  # 2 GPUs at $3.60 and 2 at $1.80, 745 hours
    usd(t.metered_usd, METERED)
    usd(t.billed_usd, Decimal(9000))  # runpod + lambda; not September, list prices or EUR
    usd(t.spend_usd, Decimal(9000))  # billed more than metered: the bill counts
    output = sum(TRUTH.output.values())
    assert (t.useful_tokens, t.output_tokens) == (output, output)  # exact, across the restart
    assert t.total_tokens == output + sum(TRUTH.prompt.values())
    assert t.requests == sum(TRUTH.requests.values())
    close(t.cost_per_million_tokens_usd, per_million(METERED, output))
    close(
        t.previous_cost_per_million_tokens_usd,
        per_million(sum(SEPTEMBER.cost.values(), Decimal(0)), sum(SEPTEMBER.output.values())),
    )
    busy = sum(TRUTH.busy_seconds.values()) / 3600
    assert t.gpu_hours == pytest.approx(4 * 745)
    assert t.busy_gpu_hours == pytest.approx(busy)
    assert t.utilization_ratio == pytest.approx(busy / (4 * 745))
    # Allocated: a0, b0 and b1 all the time (a1 never): idle-but-loaded is their idle time.
    allocated_busy = sum(TRUTH.busy_seconds[g] for g in ("GPU-a0", "GPU-b0", "GPU-b1")) / 3600
    assert t.idle_loaded_gpu_hours == pytest.approx(3 * 745 - allocated_busy)
    assert t.unallocated_gpu_hours == pytest.approx(745)
    usd(t.idle_cost_usd, sum(TRUTH.idle.values(), Decimal(0)))
    sources = {(s.source, s.kind): s.usd for s in r.spend_sources}
    assert sorted(sources) == [("lambda", "billed"), ("metered", "metered"), ("runpod", "billed")]
    usd(sources[("runpod", "billed")], Decimal(5000))
    assert (r.period, r.previous_period.label) == (OCTOBER, "2026-09")
    assert r.useful_tokens_rule == "output"
    assert (r.hosts_filter, r.models_filter, r.generated_at) == ((), (), AFTER)


def test_models_hosts_and_gpus_match_the_truth(month: Engine) -> None:
    r = report(month)
    models = {m.model: m for m in r.models}
    assert sorted(models) == ["llama-8b", "mistral-7b", "qwen-7b"]
    for target, model in MODEL_OF.items():
        row = models[model]
        usd(row.cost_usd, TRUTH.target_cost[target])
        assert (row.useful_tokens, row.requests) == (TRUTH.output[target], TRUTH.requests[target])
        assert row.total_tokens == TRUTH.output[target] + TRUTH.prompt[target]
        close(
            row.cost_per_million_tokens_usd,
            per_million(TRUTH.target_cost[target], TRUTH.output[target]),
        )
        close(
            row.previous_cost_per_million_tokens_usd,
            per_million(SEPTEMBER.target_cost[target], SEPTEMBER.output[target]),
        )
    usd(models["qwen-7b"].cost_usd, Decimal("2346.75"))  # b0 and 3/4 of b1 (memory share)
    usd(models["mistral-7b"].cost_usd, Decimal("335.25"))
    hosts = {h.host: h for h in r.hosts}
    usd(hosts["a"].cost_usd, Decimal("5364.00"))
    assert hosts["b"].useful_tokens == TRUTH.output["qwen"] + TRUTH.output["mistral"]
    close(
        hosts["a"].cost_per_million_tokens_usd, per_million(Decimal("5364"), TRUTH.output["llama"])
    )
    close(
        hosts["a"].previous_cost_per_million_tokens_usd,
        per_million(Decimal("172.80"), SEPTEMBER.output["llama"]),
    )
    assert hosts["b"].gpu_hours == pytest.approx(2 * 745)
    assert hosts["b"].utilization_ratio == pytest.approx((0.9 + 0.5) / 2)
    gpus = {g.gpu_uuid: g for g in r.gpus}
    assert [g.gpu_uuid for g in r.gpus] == ["GPU-a0", "GPU-a1", "GPU-b0", "GPU-b1"]
    for g in M.GPUS:
        gpu = gpus[g.uuid]
        assert (gpu.host, gpu.gpu_index, gpu.gpu_name) == (g.host, g.index, g.name)
        usd(gpu.cost_usd, TRUTH.cost[g.uuid])
        usd(gpu.idle_cost_usd, TRUTH.idle[g.uuid])
        assert gpu.observed_hours == pytest.approx(745)
        assert gpu.busy_hours == pytest.approx(TRUTH.busy_seconds[g.uuid] / 3600)
        assert gpu.vram_total_bytes == 80 * M.GiB
    assert gpus["GPU-a0"].vram_peak_bytes == 18 * M.GiB
    assert gpus["GPU-a1"].utilization_ratio == 0.0
    # Highest idle cost first: a1 ($3.60/h, never busy), a0, b1, b0; only GPUs with idle cost.
    assert [g.gpu_uuid for g in r.top_waste] == ["GPU-a1", "GPU-a0", "GPU-b1", "GPU-b0"]
    usd(r.top_waste[0].idle_cost_usd, Decimal("2682.00"))


def prometheus_quantile(q: float, bounds: tuple[str, ...], cumulative: list[int]) -> float:
    """histogram_quantile's linear interpolation, by hand: the rank's bucket, from its lower
    bound; a rank in the +Inf bucket gives the highest finite bound."""
    les = [float(b) for b in bounds]
    rank = q * cumulative[-1]
    for i, count in enumerate(cumulative):
        if count >= rank:
            if math.isinf(les[i]):
                return les[i - 1]
            lower, below = (les[i - 1], cumulative[i - 1]) if i else (0.0, 0)
            return lower + (les[i] - lower) * (rank - below) / (count - below)
    raise AssertionError("no bucket holds the rank")


def test_latency_quantiles_follow_the_bucket_arithmetic(month: Engine) -> None:
    models = {m.model: m for m in report(month).models}
    for target, model in (("llama", "llama-8b"), ("qwen", "qwen-7b")):
        for kind, bounds in (("ttft", M.TTFT_LE), ("e2e", M.E2E_LE)):
            cumulative = getattr(TRUTH, kind)[target]
            latency = getattr(models[model], kind)
            assert latency.count == cumulative[-1] == TRUTH.requests[target]
            for q, got in (
                (0.5, latency.p50_seconds),
                (0.95, latency.p95_seconds),
                (0.99, latency.p99_seconds),
            ):
                assert got == pytest.approx(prometheus_quantile(q, bounds, cumulative)), (
                    model,
                    kind,
                    q,
                )
    # A worked figure: llama's month of TTFT, 721 ordinary hours and the slow 20th (24 h).
    ordinary, slow = (200, 300, 350, 358, 360), (100, 200, 300, 340, 360)
    assert TRUTH.ttft["llama"] == [721 * a + 24 * b for a, b in zip(ordinary, slow, strict=True)]
    rank = 0.99 * 745 * 360  # 265,518: past 0.5 s (259,550), inside (0.5, 1.0] (266,278)
    assert models["llama-8b"].ttft.p99_seconds == pytest.approx(0.5 + 0.5 * (rank - 259550) / 6728)
    # mistral publishes no histograms: unknown, not zero.
    mistral = models["mistral-7b"]
    assert (mistral.ttft.p99_seconds, mistral.e2e.p50_seconds) == (None, None)
    assert mistral.ttft.count == 0


def test_daily_series_are_local_days_across_the_dst_change(month: Engine) -> None:
    r = report(month)
    days = [d.day for d in r.daily_spend]
    assert days == [date(2026, 10, 1) + timedelta(days=i) for i in range(31)]
    by_day = {d.day: d for d in r.daily_spend}

    def spent(day: date) -> Decimal:
        return by_day[day].busy_usd + by_day[day].idle_usd

    usd(spent(date(2026, 10, 25)), Decimal("270.00"))  # 25 hours at $10.80
    usd(spent(date(2026, 10, 24)), Decimal("259.20"))
    for day, spend in by_day.items():
        usd(spend.idle_usd, TRUTH.day_idle[day])
        usd(spend.busy_usd, TRUTH.day_cost[day] - TRUTH.day_idle[day])
    model_days = {(d.model, d.day): d.cost_per_million_tokens_usd for d in r.model_days}
    assert len(model_days) == 3 * 31
    for target, model in MODEL_OF.items():
        for day in days:
            want = per_million(
                TRUTH.day_target_cost[(day, target)], TRUTH.day_output[(day, target)]
            )
            close(model_days[(model, day)], want)
    gpu_days = {(g.gpu_uuid, g.day): g.utilization_ratio for g in r.gpu_days}
    assert len(gpu_days) == 4 * 31
    assert gpu_days[("GPU-a0", M.BAD_DAY)] == pytest.approx(0.75)
    assert gpu_days[("GPU-a0", date(2026, 10, 25))] == pytest.approx(0.25)
    assert gpu_days[("GPU-a1", date(2026, 10, 3))] == 0.0


def test_alerts_count_and_firing_time_are_clipped_to_the_period(month: Engine) -> None:
    r = report(month)
    rows = {a.rule: (a.count, a.firing_seconds) for a in r.alerts}
    hour = 3600.0
    assert rows == {
        # 26 h from the period's start (fired before it), then 527 h still firing at its end.
        "GpuIdle": (2, (26 + 527) * hour),
        "QueueGrowing": (2, (45 + 40) * 60.0),
        "BudgetThreshold": (1, 287 * hour),
    }
    assert [(q.host, q.target, q.model, q.summary) for q in r.queue_incidents] == [
        ("b", "qwen", "qwen-7b", "Queue growing (qwen): 42 waiting"),
        ("a", "llama", "llama-8b", "Queue growing (llama): 12 waiting"),
    ]
    first = r.queue_incidents[0]
    assert (first.fired_at, first.resolved_at) == (
        M.at("2026-10-12T08:00"),
        M.at("2026-10-12T08:45"),
    )
    # Made before the period's end, the still-firing alerts count up to ``now``.
    early = report(month, now=M.at("2026-10-31T12:00"))
    assert {a.rule: a.firing_seconds for a in early.alerts}["GpuIdle"] == (26 + 516) * hour


def test_budget_of_a_past_month_and_of_the_month_to_date(month: Engine) -> None:
    b = report(month).budget
    assert (b.monthly_usd, b.month) == (Decimal(10000), "2026-10")
    usd(b.spent_usd, Decimal(9000))  # billed, larger than the $8,046 metered
    usd(b.forecast_usd, Decimal(9000))  # the month is over
    assert b.used_ratio == pytest.approx(0.9)
    # On 15 October at 10:30 UTC: 348.5 h metered ($3,763.80), $9,000 billed already; the last
    # day's pace is $10.80 an hour for the 396.5 h left.
    mtd = report(month, month_period(None, MID_OCTOBER, M.ZONE), MID_OCTOBER).budget
    usd(mtd.spent_usd, Decimal(9000))
    usd(mtd.forecast_usd, Decimal(9000) + Decimal("10.80") * Decimal("396.5"))
    assert mtd.forecast_ratio == pytest.approx(1.32822)
    none = report(month, cfg=config(budget=BudgetConfig(None))).budget
    assert (none.monthly_usd, none.used_ratio, none.forecast_ratio) == (None, None, None)


def test_month_to_date_reads_the_partial_hour_from_minute_rows(month: Engine) -> None:
    period = month_period(None, MID_OCTOBER, M.ZONE)
    assert (period.start, period.end) == (M.OCT_START, M.at("2026-10-15T10:30"))
    r = report(month, period, MID_OCTOBER)
    want = M.truth(period.start, period.end)
    usd(r.totals.metered_usd, Decimal("10.80") * Decimal("348.5"))
    usd(r.totals.metered_usd, sum(want.cost.values(), Decimal(0)))
    assert r.totals.gpu_hours == pytest.approx(4 * 348.5)
    assert r.totals.useful_tokens == sum(want.output.values())
    assert r.previous_period.label == "2026-09"  # a month to date compares with last month
    assert [d.day for d in r.daily_spend][-1] == date(2026, 10, 15)


def test_a_window_inside_one_hour_reads_only_its_own_minutes(month: Engine) -> None:
    period = range_period("2026-10-15T12:05", "2026-10-15T12:35", M.ZONE)  # 10:05-10:35 UTC
    r = report(month, period)
    usd(r.totals.metered_usd, Decimal("10.80") / 2)
    assert r.totals.gpu_hours == pytest.approx(4 * 0.5)
    # summarize reads the same rows (its head once ran to the hour's end).
    s = summarize(month, period.start, period.end)
    usd(s.fleet.cost_usd, Decimal("5.40"))


def test_a_week_across_the_dst_change_and_the_week_before(month: Engine) -> None:
    week = last_week_period(M.at("2026-10-28T09:00"), M.ZONE)
    assert (week.label, week.end - week.start) == ("2026-W43", timedelta(hours=169))
    r = report(month, week)
    assert r.previous_period.label == "2026-W42"
    usd(r.totals.metered_usd, Decimal("10.80") * 169)
    assert len(r.daily_spend) == 7
    want = M.truth(week.start, week.end)
    before = M.truth(r.previous_period.start, r.previous_period.end)
    for got, t in (
        (r.totals.cost_per_million_tokens_usd, want),
        (r.totals.previous_cost_per_million_tokens_usd, before),
    ):
        close(got, per_million(sum(t.cost.values(), Decimal(0)), sum(t.output.values())))


def test_useful_tokens_can_include_computed_prompt_tokens(month: Engine) -> None:
    r = report(month, cfg=config(cost=CostConfig(useful_tokens="output+prompt")))
    assert r.useful_tokens_rule == "output+prompt"
    models = {m.model: m for m in r.models}
    # llama: computed prompt tokens (cache hits excluded); qwen: all prompt tokens.
    for target, model in MODEL_OF.items():
        assert models[model].useful_tokens == TRUTH.output[target] + TRUTH.prompt[target]
    assert TRUTH.prompt["llama"] == 745 * 360_000


# -- filters --------------------------------------------------------------------------------------


def test_a_host_filter_restricts_every_figure(month: Engine) -> None:
    r = report(month, hosts=["b"])
    assert r.hosts_filter == ("b",)
    usd(r.totals.metered_usd, Decimal("2682.00"))
    assert (r.totals.billed_usd, r.totals.spend_usd) == (None, r.totals.metered_usd)
    assert [s.source for s in r.spend_sources] == ["metered"]
    assert [m.model for m in r.models] == ["mistral-7b", "qwen-7b"]
    assert [h.host for h in r.hosts] == ["b"]
    assert [g.gpu_uuid for g in r.gpus] == ["GPU-b0", "GPU-b1"]
    assert r.totals.useful_tokens == TRUTH.output["qwen"] + TRUTH.output["mistral"]
    assert {a.rule: a.count for a in r.alerts} == {"QueueGrowing": 1}
    assert [q.target for q in r.queue_incidents] == ["qwen"]
    assert {d.gpu_uuid for d in r.gpu_days} == {"GPU-b0", "GPU-b1"}
    usd(sum((d.busy_usd + d.idle_usd for d in r.daily_spend), Decimal(0)), Decimal("2682.00"))
    assert r.budget.spent_usd > Decimal(8000)  # the budget is the fleet's, whatever the filter


def test_a_model_filter_keeps_its_tokens_latency_and_whole_gpus(month: Engine) -> None:
    r = report(month, models=["mistral-7b"])
    assert [m.model for m in r.models] == ["mistral-7b"]
    usd(r.models[0].cost_usd, Decimal("335.25"))  # its share of b1
    assert [g.gpu_uuid for g in r.gpus] == ["GPU-b1"]  # the GPU it was allocated, whole
    usd(r.totals.metered_usd, Decimal("1341.00"))
    assert r.totals.useful_tokens == TRUTH.output["mistral"]
    close(r.totals.cost_per_million_tokens_usd, per_million(Decimal(1341), TRUTH.output["mistral"]))
    assert [(h.host, h.useful_tokens) for h in r.hosts] == [("b", TRUTH.output["mistral"])]
    assert r.alerts == () and r.queue_incidents == ()
    llama = report(month, models=["llama-8b"])
    assert [g.gpu_uuid for g in llama.gpus] == ["GPU-a0"]
    # Its queue incident stays; GPU a1's idle alerts and the fleet's budget alert do not.
    assert {a.rule: a.count for a in llama.alerts} == {"QueueGrowing": 1}
    assert llama.models[0].ttft.count == TRUTH.requests["llama"]
    nothing = report(month, hosts=["a"], models=["qwen-7b"])
    assert (nothing.models, nothing.gpus, nothing.totals.metered_usd) == ((), (), Decimal(0))
    assert nothing.totals.cost_per_million_tokens_usd is None
    assert nothing.totals.utilization_ratio is None


# -- recommendations ------------------------------------------------------------------------------


def test_recommendations_carry_their_numbers(month: Engine) -> None:
    r = report(month)
    by = {(x.kind, x.title.split(":")[0]): x for x in r.recommendations}
    days = Decimal(745) / 24
    # Consolidation: a0 (26.6 % busy) and a1 (idle) are under 50 %; their 198.25 busy hours
    # need one GPU at 70 %; releasing one ($3.60/h, the idle a1 first) saves $2,628 a month.
    consolidate = by[("consolidate", "Consolidate 2 low-utilization GPU(s) onto 1")]
    usd(consolidate.saving_usd_per_month, Decimal("3.60") * MONTH_HOURS)
    assert "198.2 busy GPU-hours" in consolidate.detail
    assert "Releasing 1 (a/1;" in consolidate.detail
    # Smaller GPU: a0 peaked at 18 GiB; +20 % is 21.6 GiB: an L4 24GB at $0.80/h.
    smaller = by[("smaller_gpu", "a")]
    assert smaller.title == "a: move 1 GPU(s) to a smaller L4 24GB"
    usd(smaller.saving_usd_per_month, (Decimal("3.60") - Decimal("0.80")) * MONTH_HOURS)
    assert "21.6 GiB" in smaller.detail and "$0.80/h" in smaller.detail
    # Pod vs serverless ($2.50/GPU-h) vs API ($0.40/M): per model, per day of the period.
    serverless, api = Decimal("2.50"), Decimal("0.40")
    for target, kind in (("llama", "api"), ("qwen", "pod"), ("mistral", "serverless")):
        advice = by[(kind, MODEL_OF[target])]
        pod_day = TRUTH.target_cost[target] / days
        serverless_day = Decimal(repr(TRUTH.target_busy[target])) / days * serverless / 3600
        api_day = Decimal(TRUTH.output[target]) / days * api / 1_000_000
        best = {"pod": pod_day, "serverless": serverless_day, "api": api_day}
        assert min(best, key=best.__getitem__) == kind
        if kind == "pod":
            assert advice.saving_usd_per_month is None
        else:
            usd(advice.saving_usd_per_month, (pod_day - best[kind]) * MONTH_HOURS / 24)
        assert "$2.50 per GPU-hour" in advice.detail and "$0.40 per million" in advice.detail
        # Where the prices come from, in words a user can act on (no document they lack).
        assert "[alerts.rules.CostPerMtokHigh] api_usd_per_million" in advice.detail
        assert ".md" not in advice.detail
    usd(by[("serverless", "mistral-7b")].saving_usd_per_month, Decimal("100.375"))  # 3.30/day
    assert "$75.60/day" in by[("pod", "qwen-7b")].detail  # pod, then serverless $76.50
    # Largest saving first; "keep the pod" last.
    assert [x.kind for x in r.recommendations] == [
        "consolidate",
        "api",
        "smaller_gpu",
        "serverless",
        "pod",
    ]


def test_a_configured_api_price_is_the_one_compared(month: Engine) -> None:
    spec = DEFAULT_RULES["CostPerMtokHigh"]
    rules = {
        **DEFAULT_RULES,
        "CostPerMtokHigh": replace(
            spec, thresholds={**spec.thresholds, "api_usd_per_million": 2.0}
        ),
    }
    cfg = config(alerts=replace(config().alerts, rules=rules))
    advice = {x.title.split(":")[0]: x for x in report(month, cfg=cfg).recommendations}
    llama = advice["llama-8b"]
    assert llama.kind == "serverless"  # at $2/M the API costs more than serverless
    assert "api_usd_per_million" in llama.detail


# -- an empty store -------------------------------------------------------------------------------


def test_an_empty_database_gives_unknowns_not_zeros(db_url: str) -> None:
    upgrade_database(db_url)
    engine = open_database(db_url)
    try:
        r = build_report(engine, config(), OCTOBER, now=AFTER)
    finally:
        engine.dispose()
    t = r.totals
    zero = Decimal(0)
    assert (t.metered_usd, t.billed_usd, t.spend_usd, t.useful_tokens) == (zero, None, zero, 0.0)
    assert (t.cost_per_million_tokens_usd, t.utilization_ratio) == (None, None)
    assert (r.models, r.gpus, r.alerts, r.recommendations) == ((), (), (), ())
    assert len(r.daily_spend) == 31 and r.gpu_days == ()
    assert (r.budget.spent_usd, r.budget.forecast_usd) == (zero, zero)


# -- periods --------------------------------------------------------------------------------------


def test_the_months_json_matches_the_truth_and_every_format_shows_it(month: Engine) -> None:
    """The rendered report of the simulated month: the JSON figures are the truth to the cent
    (tokens exactly), and the table, CSV, markdown and HTML show the same figures."""
    r = report(month)
    doc = json.loads(render(r, "json"))
    totals = doc["totals"]
    assert Decimal(totals["spend_usd"]) == Decimal("9000.00")
    assert Decimal(totals["metered_usd"]) == METERED.quantize(CENT)
    assert totals["useful_tokens"] == sum(TRUTH.output.values())
    assert Decimal(totals["idle_cost_usd"]) == sum(TRUTH.idle.values(), Decimal(0)).quantize(
        CENT, rounding=ROUND_HALF_UP
    )
    per_model: dict[str, int] = {}
    for target in M.TARGETS:
        per_model[target.model] = per_model.get(target.model, 0) + TRUTH.output[target.name]
    assert {m["model"]: m["useful_tokens"] for m in doc["models"]} == per_model
    expected = figures_from_json(doc)
    for fmt, parse in PARSERS.items():
        assert parse(render(r, fmt)) == expected, fmt
