"""``kind = "litellm_db"``: LiteLLM's spend logs in a real PostgreSQL (the table as LiteLLM's
schema.prisma declares it) read per tenant and model for a window, and end to end through the
App beside a vLLM engine: the keys' shares of the model's cost, exact, in `cost --json`."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from agent.config.gateways import GatewayConfig
from agent.config.settings import load_config
from agent.cost.spendlog_reads import spendlog_use
from agent.cost.tenant_reads import TenantUse
from agent.daemon.app import App
from agent.sim.server import EngineServer
from agent.sim.traffic import Traffic
from agent.storage.db import upgrade_database
from tests.conftest import FakeNvml
from tests.fakenvml.build import FakeGpu, FakeNvmlConfig

START = datetime(2026, 11, 30, 16, 0, 0, tzinfo=UTC)
LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
# "LiteLLM_SpendLogs" as Prisma creates it from schema.prisma (the columns read, and the
# required ones): Json is JSONB, DateTime is TIMESTAMP(3) without a zone.
TABLE = """
CREATE TABLE "LiteLLM_SpendLogs" (
    "request_id" TEXT NOT NULL PRIMARY KEY,
    "call_type" TEXT NOT NULL,
    "api_key" TEXT NOT NULL DEFAULT '',
    "spend" DOUBLE PRECISION NOT NULL DEFAULT 0.0,
    "total_tokens" INTEGER NOT NULL DEFAULT 0,
    "prompt_tokens" INTEGER NOT NULL DEFAULT 0,
    "completion_tokens" INTEGER NOT NULL DEFAULT 0,
    "startTime" TIMESTAMP(3) NOT NULL,
    "endTime" TIMESTAMP(3) NOT NULL,
    "model" TEXT NOT NULL DEFAULT '',
    "model_group" TEXT DEFAULT '',
    "user" TEXT DEFAULT '',
    "metadata" JSONB DEFAULT '{}',
    "team_id" TEXT,
    "end_user" TEXT
)
"""
HASH_A, HASH_B = "88dc28d0f030c55e", "5d41402abc4b2a76"
# (request, key hash, alias, team alias, model group, prompt, completion, spend, seconds, status)
ROWS = [
    ("r1", HASH_A, "search-app", "search", "llama-8b", 300, 200, 0.0005, 15, "success"),
    ("r2", HASH_A, "search-app", "search", "llama-8b", 600, 400, 0.0010, 45, "success"),
    ("r3", HASH_B, "chat-bot", None, "llama-8b", 200, 200, 0.0004, 30, "success"),
    ("r4", HASH_B, "chat-bot", None, "llama-8b", 900, 0, 0.0, 50, "failure"),  # not counted
    ("r5", "e3b0c442", None, None, "llama-8b", 100, 100, 0.0002, 55, "success"),  # no alias
    ("r6", HASH_A, "search-app", "search", "gpt-4o", 50, 50, 0.003, 20, "success"),
    ("r7", HASH_A, "search-app", "search", "llama-8b", 999, 999, 1.0, -86400 * 40, "success"),
]


def _litellm_db(url: str) -> str:
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text(TABLE))
        for rid, key, alias, team, group, prompt, completion, spend, at, status in ROWS:
            meta = {"user_api_key_alias": alias, "user_api_key_team_alias": team,
                    "status": status}  # fmt: skip
            start = (START + timedelta(seconds=at)).replace(tzinfo=None)
            conn.execute(
                text('INSERT INTO "LiteLLM_SpendLogs" (request_id, call_type, api_key, spend, '
                     'total_tokens, prompt_tokens, completion_tokens, "startTime", "endTime", '
                     'model, model_group, metadata) VALUES (:r, :ct, :k, :s, :t, '
                     ':p, :c, :st, :st, :m, :g, CAST(:meta AS JSONB))'),
                {"r": rid, "ct": "acompletion", "k": key, "s": spend, "t": prompt + completion,
                 "p": prompt, "c": completion, "st": start, "m": f"hosted_vllm/{group}", "g": group,
                 "meta": json.dumps(meta)},
            )  # fmt: skip
    engine.dispose()
    return url


def _gateway(tmp_path: Path, url: str, tenant: str = "key") -> GatewayConfig:
    path = tmp_path / "g.toml"
    path.write_text(f'[[gateways]]\nname = "litellm"\nkind = "litellm_db"\ntenant = "{tenant}"\n'
                    'database_url_env = "LITELLM_DB"\n')  # fmt: skip
    (gateway,) = load_config(str(path), {"LITELLM_DB": url}).gateways
    return gateway


def test_the_window_s_requests_per_key_failures_left_out(pg_url: str, tmp_path: Path) -> None:
    gateway = _gateway(tmp_path, _litellm_db(pg_url))
    got = spendlog_use(gateway, START, START + timedelta(hours=1))
    assert got == {
        ("llama-8b", "search-app"): TenantUse(900.0, 600.0, 0.0005 + 0.0010),
        ("llama-8b", "chat-bot"): TenantUse(200.0, 200.0, 0.0004),
        ("llama-8b", "e3b0c442"): TenantUse(100.0, 100.0, 0.0002),  # a key without an alias
        ("gpt-4o", "search-app"): TenantUse(50.0, 50.0, 0.003),
    }
    teams = spendlog_use(_gateway(tmp_path, pg_url, "team"), START, START + timedelta(hours=1))
    assert set(teams) == {("llama-8b", "search"), ("gpt-4o", "search")}  # the rest: no team


def test_an_unreachable_database_gives_no_tenants_and_says_why(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    gateway = _gateway(tmp_path, "postgresql+psycopg://nobody@127.0.0.1:1/litellm")
    assert spendlog_use(gateway, START, START + timedelta(hours=1)) == {}
    assert "gateway litellm: LiteLLM's spend logs not read" in caplog.text


def test_cost_splits_the_model_by_the_spend_logs(
    pg_url: str,
    tmp_path: Path,
    fake_nvml: FakeNvml,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from agent.cli.main import main

    monkeypatch.setenv("LITELLM_DB", _litellm_db(pg_url))
    db_url = f"sqlite:///{tmp_path / 'state' / 'gpuwatch.db'}"
    fake_nvml.write(FakeNvmlConfig(gpus=(FakeGpu(uuid="GPU-eeee", util=60),)))
    traffic = Traffic(models=("llama-8b",))
    with EngineServer("vllm-0.33", traffic) as engine:
        path = tmp_path / "gpuwatch.toml"
        path.write_text(
            f'host = "box"\ndatabase_url = "{db_url}"\n[daemon]\ninterval_seconds = 10\n'
            '[[rates]]\ngpu = "*"\nusd_per_hour = 3.6\n'
            f'[[targets]]\nname = "t1"\nurl = "{engine.url}"\ngpus = [0]\n'
            '[[gateways]]\nname = "litellm"\nkind = "litellm_db"\n'
            'database_url_env = "LITELLM_DB"\n'
        )
        upgrade_database(db_url)
        app = App.open(load_config(str(path)))
        try:
            for i in range(7):
                if i:
                    traffic.serve(10)
                app.tick(START + i * timedelta(seconds=10))
                app.roll_up(START + i * timedelta(seconds=10))
        finally:
            app.close()
    assert main(["cost", "--window", "30d", "--json", "--config", str(path)]) == 0
    document = json.loads(capsys.readouterr().out)
    (model,) = document["models"]
    tenants = {t["name"]: t for t in document["tenants"]}
    assert tenants["search-app"]["useful_tokens"] == 600.0
    assert tenants["chat-bot"]["useful_tokens"] == 200.0
    assert sum(Decimal(t["cost_usd"]) for t in tenants.values()) == Decimal(model["cost_usd"])
    assert Decimal(tenants["search-app"]["list_price_usd"]) == Decimal("0.001500")
    assert document["tenant_models_not_served"] == ["gpt-4o"]
