"""Useful tokens exact to the request, abandoned work, and unknown cost, on SQLite
and PostgreSQL.

The daemon's own path runs: the vLLM 0.33 simulator serves /metrics (its per-request
histograms observe each finished request; streams a client dropped count in its token counters
only, as a real vLLM 0.32 showed), the fake NVML answers for one GPU, App.tick stores each round
and the minute job rolls up. Then the report, `gpuwatch cost --json` and the digest read.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest

from agent.cli.main import main
from agent.config.settings import load_config
from agent.daemon.app import App
from agent.reporting.build import build_report
from agent.reporting.digest import digest_payload
from agent.reporting.period import range_period
from agent.reporting.render.dispatch import render
from agent.sim.server import EngineServer
from agent.sim.traffic import Request, Traffic
from agent.storage.db import upgrade_database
from tests.conftest import FakeNvml
from tests.fakenvml.build import FakeGpu, FakeNvmlConfig

GPU = "GPU-11111111-2222-3333-4444-555555555555"
MODEL = "llama-8b"
STEP = timedelta(seconds=10)
# Inside `gpuwatch cost`'s default 30-day window, which ends at the real clock's now.
START = (datetime.now(UTC) - timedelta(hours=2)).replace(minute=0, second=0, microsecond=0)


def _config(tmp_path: Path, db_url: str, server_url: str, rates: bool, nvml: bool) -> Path:
    path = tmp_path / "gpuwatch.toml"
    text = f'host = "box"\ndatabase_url = "{db_url}"\n[daemon]\ninterval_seconds = 10\n'
    text += "" if nvml else "[collectors.nvml]\nenabled = false\n"
    text += f'[[rates]]\ngpu = "{GPU}"\nusd_per_hour = 3.6\n' if rates else ""
    text += f'[[targets]]\nname = "t1"\nurl = "{server_url}"\ngpus = [0]\n'
    path.write_text(text)
    return path


@pytest.fixture
def traffic() -> Traffic:
    return Traffic(models=(MODEL,))


@contextmanager
def _box(
    db_url: str, tmp_path: Path, fake_nvml: FakeNvml, traffic: Traffic, **kind: bool
) -> Iterator[tuple[App, Path]]:
    fake_nvml.write(FakeNvmlConfig(gpus=(FakeGpu(uuid=GPU, util=60),)))
    with EngineServer("vllm-0.33", traffic) as server:
        path = _config(tmp_path, db_url, server.url, **kind)
        upgrade_database(db_url)
        app = App.open(load_config(str(path), {}))
        try:
            yield app, path
        finally:
            app.close()


@pytest.fixture
def priced(
    db_url: str, tmp_path: Path, fake_nvml: FakeNvml, traffic: Traffic
) -> Iterator[tuple[App, Path]]:
    with _box(db_url, tmp_path, fake_nvml, traffic, rates=True, nvml=True) as box:
        yield box


def _run(app: App, traffic: Traffic, rounds: int, first: datetime) -> tuple[list[Request], int]:
    """Ticks from ``first`` (the first one a baseline), serving requests and dropping streams
    before each, the engine restarted half way: the completed requests and the output tokens
    generated for dropped streams."""
    completed: list[Request] = []
    dropped = 0
    for i in range(rounds):
        if i == rounds // 2:
            traffic.restart()  # a redeploy: counters and histograms start over
        if i:
            completed += traffic.serve(3)
            dropped += sum(r.generation_tokens for r in traffic.drop(1, after_tokens=5))
        now = first + i * STEP
        app.tick(now)
        app.roll_up(now)
    return completed, dropped


def test_useful_output_is_what_completed_requests_generated_and_dropped_streams_are_abandoned(
    priced: tuple[App, Path], traffic: Traffic
) -> None:
    app, _ = priced
    completed, dropped = _run(app, traffic, 30, START)
    end = START + 30 * STEP
    report = build_report(
        app.engine, app.config, range_period(START.isoformat(), end.isoformat(), "UTC"), now=end
    )

    (row,) = report.models
    useful = sum(r.generation_tokens for r in completed)
    assert dropped == 29 * 5  # every dropped stream had more than 5 tokens to go
    assert row.useful_tokens == useful  # exact to the request, across the restart
    assert row.generated_tokens == useful + dropped  # vllm:generation_tokens_total
    assert row.abandoned_tokens == dropped
    assert row.requests == len(completed)
    assert row.useful_tokens_source == "completed_requests"
    assert row.cost_unknown_reason is None
    assert row.abandoned_cost_usd == row.cost_usd * Decimal(dropped) / Decimal(useful + dropped)
    assert row.cost_per_million_tokens_usd == row.cost_usd / Decimal(useful) * Decimal(10**6)
    assert report.totals.abandoned_tokens == dropped
    # Idle dollars per target and per model: the GPU was 60 % busy, all of it the target's.
    (target,) = report.targets
    assert (target.host, target.target, target.cost_usd) == ("box", "t1", row.cost_usd)
    assert round(target.idle_cost_usd, 9) == round(row.cost_usd * Decimal("0.4"), 9)
    assert row.idle_cost_usd == target.idle_cost_usd

    as_json = json.loads(render(report, "json"))
    model = as_json["models"][0]
    assert (model["abandoned_tokens"], model["useful_tokens_source"]) == (
        dropped,
        "completed_requests",
    )
    assert Decimal(model["abandoned_cost_usd"]) == round(row.abandoned_cost_usd, 2)
    assert as_json["targets"][0]["idle_cost_usd"] == str(round(target.idle_cost_usd, 2))
    text = render(report, "table")
    assert "USEFUL AND ABANDONED WORK" in text and "completed_requests" in text
    assert "TARGETS" in text
    digest = json.dumps(digest_payload(report, None))
    assert f"abandoned {dropped:,} tokens" in digest


def test_cost_json_gives_abandoned_work_per_model(
    priced: tuple[App, Path], traffic: Traffic, capsys: pytest.CaptureFixture[str]
) -> None:
    app, path = priced
    completed, dropped = _run(app, traffic, 12, START)
    capsys.readouterr()
    assert main(["cost", "--json", "--window", "30d", "--config", str(path)]) == 0
    document = json.loads(capsys.readouterr().out)
    (model,) = document["models"]
    assert model["useful_tokens"] == sum(r.generation_tokens for r in completed)
    # The serving target's idle dollars: its GPU was busy 60 % of the time it held it.
    (target,) = document["targets"]
    assert target["name"] == "box/t1"
    cost, idle = Decimal(target["cost_usd"]), Decimal(target["idle_cost_usd"])
    assert cost > 0 and abs(idle - cost * Decimal("0.4")) < Decimal("0.000002")
    assert model["abandoned_tokens"] == dropped
    assert model["useful_tokens_source"] == "completed_requests"
    assert model["requests_completed"] == len(completed)
    assert Decimal(model["abandoned_cost_usd"]) > 0

    assert main(["cost", "--window", "30d", "--config", str(path)]) == 0
    table = capsys.readouterr().out
    assert f"{dropped:,}" in table and f"{MODEL} completed_requests" in table


@pytest.mark.parametrize(
    ("rates", "nvml", "reason"),
    [
        (False, True, f"no rate for GPU {GPU} on box"),
        (True, False, "no GPU time observed"),
    ],
    ids=["no-rate-card", "no-gpu-seen"],
)
def test_unknown_cost_is_null_with_its_reason_never_zero(
    db_url: str,
    tmp_path: Path,
    fake_nvml: FakeNvml,
    traffic: Traffic,
    capsys: pytest.CaptureFixture[str],
    rates: bool,
    nvml: bool,
    reason: str,
) -> None:
    with _box(db_url, tmp_path, fake_nvml, traffic, rates=rates, nvml=nvml) as (app, path):
        _run(app, traffic, 12, START)
        end = START + 12 * STEP
        period = range_period(START.isoformat(), end.isoformat(), "UTC")
        report = build_report(app.engine, app.config, period, now=end)
    capsys.readouterr()
    assert main(["cost", "--json", "--window", "30d", "--config", str(path)]) == 0
    out = json.loads(capsys.readouterr().out)
    (model,) = out["models"]
    assert model["useful_tokens"] > 0
    assert model["cost_per_million_tokens_usd"] is None
    assert out["fleet"]["cost_per_million_tokens_usd"] is None
    assert reason in out["fleet"]["cost_unknown_reason"]
    assert model["cost_usd"] is None and model["cost_unknown_reason"]

    assert main(["cost", "--window", "30d", "--config", str(path)]) == 0
    table = capsys.readouterr().out
    assert "0.0000" not in table and reason in table

    as_json = json.loads(render(report, "json"))
    assert as_json["totals"]["cost_per_million_tokens_usd"] is None
    assert reason in as_json["totals"]["cost_unknown_reason"]
    assert as_json["models"][0]["cost_per_million_tokens_usd"] is None
    assert as_json["models"][0]["cost_usd"] is None
    words = " ".join(render(report, "table").split())  # the note may wrap
    assert "cost per million tokens unknown: " in words  # the reason as in JSON, above
