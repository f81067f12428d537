"""Objectives end to end over a loopback engine whose truth is known: 90 % of its requests take
0.6 s end to end and 10 % take 3 s. Against e2e <= 1 s for 95 % of requests (1 s is one of vLLM's
bucket bounds), the histograms give exactly 0.90: not met, in `cost --json` and the report."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from agent.config.settings import load_config
from agent.daemon.app import App
from agent.reporting.build import build_report
from agent.reporting.period import range_period
from agent.reporting.render.dispatch import render
from agent.sim.server import EngineServer
from agent.sim.traffic import Traffic
from agent.storage.db import upgrade_database
from tests.agent.box_helpers import served_attainment
from tests.conftest import FakeNvml
from tests.fakenvml.build import FakeGpu, FakeNvmlConfig

GPU = "GPU-cccccccc-1111-2222-3333-444444444444"
MODEL = "llama-8b"
START = datetime(2026, 11, 30, 16, 0, 0, tzinfo=UTC)
STEP = timedelta(seconds=10)
TICKS = 13


@pytest.fixture
def box(db_url: str, tmp_path: Path, fake_nvml: FakeNvml) -> Iterator[tuple[App, Path]]:
    fake_nvml.write(FakeNvmlConfig(gpus=(FakeGpu(uuid=GPU, util=60),)))
    traffic = Traffic(models=(MODEL,))
    with EngineServer("vllm-0.33", traffic) as server:
        path = tmp_path / "gpuwatch.toml"
        path.write_text(
            f'host = "box"\ndatabase_url = "{db_url}"\n[daemon]\ninterval_seconds = 10\n'
            '[[rates]]\ngpu = "*"\nusd_per_hour = 3.6\n'
            f'[[targets]]\nname = "t1"\nurl = "{server.url}"\ngpus = [0]\n'
            f'[[slo]]\nmodel = "{MODEL}"\ne2e = "1s"\nobjective = 0.95\n'
            '[[slo]]\nmodel = "other"\nttft = "200ms"\nobjective = 0.99\n'
        )
        upgrade_database(db_url)
        app = App.open(load_config(str(path), {}))
        try:
            for i in range(TICKS):
                if i:  # each tick: 9 requests in 0.6 s, 1 in 3 s
                    traffic.serve(9, e2e_latency=0.6)
                    traffic.serve(1, e2e_latency=3.0)
                now = START + i * STEP
                app.tick(now)
                app.roll_up(now)
            yield app, path
        finally:
            app.close()


def test_cost_json_gives_the_histograms_attainment_and_that_it_is_not_met(
    box: tuple[App, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    _, path = box
    from agent.cli.main import main  # the command as users run it, in this process

    assert main(["cost", "--window", "30d", "--json", "--config", str(path)]) == 0
    (model,) = json.loads(capsys.readouterr().out)["models"]
    slo: dict[str, Any] = model["slo"]
    assert slo["attainment"] == 0.9
    assert (slo["attainment_lower"], slo["attainment_upper"]) == (0.9, 0.9)
    assert slo["exact"] is True and slo["basis"] == "histograms"
    assert slo["objective"] == 0.95 and slo["met"] is False
    assert slo["requests"] == 10 * (TICKS - 1)
    assert slo["good_requests"] == 9 * (TICKS - 1)
    assert slo["good_tokens"] is None  # histograms count requests, not their tokens
    missed = Decimal(slo["missed_cost_usd"])
    assert missed == pytest.approx(Decimal(model["cost_usd"]) * Decimal("0.1"), abs=Decimal("1e-6"))


def test_the_report_says_it_in_every_format(box: tuple[App, Path]) -> None:
    app, _ = box
    end = START + (TICKS - 1) * STEP
    period = range_period(START.isoformat(), (end + timedelta(seconds=1)).isoformat(), "UTC")
    report = build_report(app.engine, app.config, period, now=end)
    (model,) = json.loads(render(report, "json"))["models"]
    assert model["slo_attainment_ratio"] == 0.9 and model["slo_met"] == "missed"
    assert model["slo_thresholds"] == "e2e <= 1s" and model["slo_basis"] == "histograms"
    table = render(report, "table")
    assert "OBJECTIVES" in table and "missed" in table.split("OBJECTIVES")[1]
    spelled = {"markdown": "e2e \\<= 1s", "html": "e2e &lt;= 1s", "csv": "e2e <= 1s"}
    for fmt, text in spelled.items():
        assert text in render(report, fmt), fmt


def test_the_digest_says_whether_the_objective_was_met(box: tuple[App, Path]) -> None:
    from agent.reporting.digest import block_kit_problems, digest_payload

    app, _ = box
    end = START + (TICKS - 1) * STEP
    period = range_period(START.isoformat(), (end + timedelta(seconds=1)).isoformat(), "UTC")
    payload = digest_payload(build_report(app.engine, app.config, period, now=end), None)
    assert block_kit_problems(payload) == []
    (section,) = [
        b["text"]["text"]
        for b in payload["blocks"]
        if b.get("text", {}).get("text", "").startswith("*Objectives")
    ]
    (line,) = section.splitlines()[1:]
    assert line.startswith(f"*{MODEL}*: 90.0% within e2e <= 1s (objective 95.0%: missed) · $")


def test_metrics_serve_the_attainment_per_window(box: tuple[App, Path]) -> None:
    got = served_attainment(box[0], TICKS)
    assert set(got) == {"1h", "24h", "7d", "30d"}
    for sample in got.values():
        assert sample.value == 0.9
        assert sample.labels == {"host": "box", "model": MODEL, "window": sample.labels["window"],
                                 "basis": "histograms", "estimate": "exact"}  # fmt: skip
