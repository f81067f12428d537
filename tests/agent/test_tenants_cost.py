"""Who pays behind a gateway, end to end: a vLLM engine and a LiteLLM replay (two keys on one
model, tests/fixtures/gateways/litellm) scraped over loopback HTTP by the App, ticked and rolled
up over the fake NVML. Each key's cost is its token share of the model's real cost, the rest is
"(unattributed)", and the lines add up to the model's cost exactly."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from agent.config.settings import load_config
from agent.daemon.app import App
from agent.sim.gateway import GatewayReplay
from agent.sim.server import EngineServer
from agent.sim.traffic import Traffic
from agent.storage.db import upgrade_database
from tests.conftest import FakeNvml
from tests.fakenvml.build import FakeGpu, FakeNvmlConfig

GPU = "GPU-dddddddd-1111-2222-3333-444444444444"
MODEL = "llama-8b"
CAPTURE = (Path(__file__).parents[1] / "fixtures/gateways/litellm/two-keys.txt").read_text()
START = datetime(2026, 11, 30, 16, 0, 0, tzinfo=UTC)
STEP = timedelta(seconds=10)
TICKS = 13
# Each tick, the capture's counters grow by a fiftieth: search-app 480 output tokens, chat-bot
# 160 (3:1); the engine serves 10 requests of about 70 output tokens a tick, so a tenth of the
# model's tokens went through no key.
GROWTH = 0.02


@pytest.fixture
def box(db_url: str, tmp_path: Path, fake_nvml: FakeNvml) -> Iterator[tuple[App, Path]]:
    yield from _run(db_url, tmp_path, fake_nvml, lambda i: 1.0 + i * GROWTH)


@pytest.fixture
def restarted(db_url: str, tmp_path: Path, fake_nvml: FakeNvml) -> Iterator[tuple[App, Path]]:
    """LiteLLM restarts after the sixth tick: its counters start again from 0."""
    yield from _run(db_url, tmp_path, fake_nvml, lambda i: 1.0 + i * GROWTH if i <= 6
                    else (i - 7) * GROWTH)  # fmt: skip


def _run(
    db_url: str, tmp_path: Path, fake_nvml: FakeNvml, factor: Callable[[int], float]
) -> Iterator[tuple[App, Path]]:
    """TICKS ticks of a vLLM engine (10 requests a tick) and a LiteLLM replay whose counters
    are the capture's times ``factor(tick)``, ticked and rolled up by the App."""
    fake_nvml.write(FakeNvmlConfig(gpus=(FakeGpu(uuid=GPU, util=60),)))
    traffic = Traffic(models=(MODEL,))
    with EngineServer("vllm-0.33", traffic) as engine, GatewayReplay(CAPTURE) as gateway:
        path = tmp_path / "gpuwatch.toml"
        path.write_text(
            f'host = "box"\ndatabase_url = "{db_url}"\n[daemon]\ninterval_seconds = 10\n'
            '[[rates]]\ngpu = "*"\nusd_per_hour = 3.6\n'
            f'[[targets]]\nname = "t1"\nurl = "{engine.url}"\ngpus = [0]\n'
            f'[[gateways]]\nname = "litellm"\nurl = "{gateway.url}"\n'
            f'[gateways.models]\n"meta-llama/Llama-3.1-8B-Instruct" = "{MODEL}"\n'
        )
        upgrade_database(db_url)
        app = App.open(load_config(str(path), {}))
        try:
            for i in range(TICKS):
                if i:
                    traffic.serve(10)
                    gateway.advance(factor(i))
                now = START + i * STEP
                app.tick(now)
                app.roll_up(now)
            yield app, path
        finally:
            app.close()


def _cost_json(path: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    from agent.cli.main import main  # the command as users run it, in this process

    assert main(["cost", "--window", "30d", "--json", "--config", str(path)]) == 0
    document: dict[str, Any] = json.loads(capsys.readouterr().out)
    return document


def test_each_key_pays_its_token_share_and_the_lines_add_up_exactly_in_cost(
    box: tuple[App, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    document = _cost_json(box[1], capsys)
    (model,) = document["models"]
    cost, useful = Decimal(model["cost_usd"]), model["useful_tokens"]
    # The gateway's tokens are not the fleet's: no line for its API model, and the fleet's
    # useful tokens are the engine's alone.
    assert document["fleet"]["useful_tokens"] == useful
    assert cost > 0
    tenants = {t["name"]: t for t in document["tenants"]}
    assert list(tenants) == ["chat-bot", "search-app", "(unattributed)"]
    # 12 ticks of growth (the first scrape is the baseline).
    search, chat = tenants["search-app"], tenants["chat-bot"]
    assert search["useful_tokens"] == pytest.approx(24_000 * GROWTH * 12)
    assert chat["useful_tokens"] == pytest.approx(8_000 * GROWTH * 12)
    assert useful > search["useful_tokens"] + chat["useful_tokens"]
    for t in (search, chat):
        share = Decimal(repr(t["useful_tokens"] / useful))
        assert Decimal(t["cost_usd"]) == pytest.approx(cost * share, abs=Decimal("0.000001"))
        # One model: every tenant pays its price per token, whatever the rounding.
        assert t["cost_per_million_tokens_usd"] == model["cost_per_million_tokens_usd"]
    rest = tenants["(unattributed)"]
    assert rest["useful_tokens"] == useful - search["useful_tokens"] - chat["useful_tokens"]
    assert rest["cost_per_million_tokens_usd"] == model["cost_per_million_tokens_usd"]
    assert Decimal(search["cost_usd"]) > Decimal(chat["cost_usd"]) > Decimal(rest["cost_usd"]) > 0
    assert sum(Decimal(t["cost_usd"]) for t in tenants.values()) == cost  # exactly
    idle = sum(Decimal(t["idle_cost_usd"]) for t in tenants.values())
    assert 0 < idle < cost  # 60 % busy: some of each line's cost is idle time
    assert search["idle_share"] == pytest.approx(rest["idle_share"])  # one model, one ratio
    # The gateway's list price (its spend counter) against the real cost.
    listed = Decimal(search["list_price_usd"])
    assert listed == pytest.approx(Decimal("0.0252") * 12 * Decimal(GROWTH), abs=Decimal("2e-6"))
    assert Decimal(search["list_minus_cost_usd"]) == listed - Decimal(search["cost_usd"])
    assert rest["list_price_usd"] is None  # no gateway priced what went through none
    assert document["tenant_models_not_served"] == ["gpt-4o"]
    _check_the_cost_table(box, capsys)


def _check_the_cost_table(box: tuple[App, Path], capsys: pytest.CaptureFixture[str]) -> None:
    from agent.cli.main import main

    assert main(["cost", "--window", "30d", "--config", str(box[1])]) == 0
    out = capsys.readouterr().out
    (header,) = [line for line in out.splitlines() if line.startswith("by tenant")]
    assert "idle %" in header and "list - cost" in header
    for name in ("search-app", "chat-bot", "(unattributed)"):
        assert any(line.startswith(name + " ") for line in out.splitlines()), name
    assert "gateway models no GPU here served: gpt-4o" in out


def _report(app: App, config: Any = None) -> Any:
    from agent.reporting.build import build_report
    from agent.reporting.period import range_period

    end = START + (TICKS - 1) * STEP
    period = range_period(START.isoformat(), (end + timedelta(seconds=1)).isoformat(), "UTC")
    return build_report(app.engine, config or app.config, period, now=end)


def test_the_report_and_digest_have_the_tenants_adding_up_to_the_model(
    box: tuple[App, Path],
) -> None:
    from agent.reporting.render.dispatch import render

    report = _report(box[0])
    document = json.loads(render(report, "json"))
    (model,) = document["models"]
    tenants = {t["name"]: t for t in document["tenants"]}
    assert list(tenants) == ["chat-bot", "search-app", "(unattributed)"]
    # To the cent, as the report shows money: the lines add up to the model's row exactly.
    assert sum(Decimal(t["cost_usd"]) for t in tenants.values()) == Decimal(model["cost_usd"])
    assert tenants["search-app"]["useful_tokens"] == 24_000 * GROWTH * 12
    assert tenants["search-app"]["models"] == MODEL
    for name in ("search-app", "(unattributed)"):  # from the unrounded shares
        assert tenants[name]["cost_per_million_tokens_usd"] == model["cost_per_million_tokens_usd"]
    assert tenants["(unattributed)"]["list_price_usd"] is None
    for fmt, title in (("table", "TENANTS"), ("markdown", "Tenants"), ("html", "Tenants"),
                       ("csv", "tenants")):  # fmt: skip
        text = render(report, fmt)
        assert title in text and "search-app" in text and "(unattributed)" in text, fmt
    assert max(len(line) for line in render(report, "table").splitlines()) <= 100
    _check_the_digest(box)
    _check_no_gateway_no_section(box)


def _check_no_gateway_no_section(box: tuple[App, Path]) -> None:
    from dataclasses import replace

    from agent.reporting.render.dispatch import render

    report = _report(box[0], replace(box[0].config, gateways=()))
    assert report.tenants == ()
    assert json.loads(render(report, "json"))["tenants"] == []
    assert "TENANTS" not in render(report, "table")
    assert "Tenants" not in render(report, "markdown")


def _check_the_digest(box: tuple[App, Path]) -> None:
    from agent.reporting.digest import block_kit_problems, digest_payload

    payload = digest_payload(_report(box[0]), None)
    assert block_kit_problems(payload) == []
    (section,) = [
        b["text"]["text"]
        for b in payload["blocks"]
        if b.get("text", {}).get("text", "").startswith("*By tenant")
    ]
    lines = section.splitlines()[1:]
    assert [line.split("*")[1] for line in lines] == ["search-app", "chat-bot", "(unattributed)"]
    assert "/1M" in lines[0] and "% idle" in lines[0] and "· list " in lines[0]


def test_a_tenant_over_its_budget_fires_for_that_tenant_only(box: tuple[App, Path]) -> None:
    from dataclasses import replace

    from agent.alerting.budget_rules import budget_conditions
    from agent.config.tenant_budgets import TenantBudget
    from agent.cost.budget import gather_budget
    from alerts.lifecycle import evaluate
    from alerts.model import State
    from alerts.rules import DEFAULT_RULES

    app = box[0]
    budgets = (TenantBudget("search-app", Decimal("0.05")), TenantBudget("chat-bot", Decimal(100)))
    config = replace(app.config, budget=replace(app.config.budget, tenants=budgets))
    threshold = DEFAULT_RULES["BudgetThreshold"]
    rules = {**DEFAULT_RULES,
             "BudgetThreshold": replace(threshold, thresholds={"first_fraction": 0.8})}  # fmt: skip
    now = START + (TICKS + 12) * STEP  # the clock the test drives: the ticks' minutes settled
    app.roll_up(now)
    data = gather_budget(app.engine, config, now, rules)
    search, chat = data.tenants
    assert (search.tenant, chat.tenant) == ("search-app", "chat-bot")
    assert Decimal("0.05") < search.metered_usd < data.metered_usd
    found, evaluated = budget_conditions(rules, data)
    step = evaluate(rules, found, {}, now, evaluated_rules=evaluated)
    firing = [s.key.label_map() for s in step.states.values() if s.state is State.FIRING]
    assert firing == [{"scope": "tenant", "tenant": "search-app", "month": "2026-11",
                       "level": "80%"}]  # fmt: skip
    (condition,) = [c for c in found if c.key.rule == "BudgetThreshold"]
    assert "of the $0.05 budget" in condition.annotations["summary"]


def test_a_gateway_restart_loses_no_tokens_and_counts_none_twice(
    restarted: tuple[App, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    tenants = {t["name"]: t for t in _cost_json(restarted[1], capsys)["tenants"]}
    # Six ticks of growth, the restart (counters back to 0), five more ticks of growth.
    assert tenants["search-app"]["useful_tokens"] == pytest.approx(24_000 * GROWTH * 11)
    assert tenants["chat-bot"]["useful_tokens"] == pytest.approx(8_000 * GROWTH * 11)
