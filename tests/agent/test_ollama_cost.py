"""An Ollama target (issue 44): its GPU time is priced, its tokens are "not counted" (Ollama
has no token counters; /api/ps says which models are loaded and their VRAM), never 0 tokens and
never a cost per token, in `cost` (table and JSON) and the report."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.daemon.app import App
from agent.reporting.render.dispatch import render
from agent.sim.server import EngineServer
from agent.sim.traffic import Traffic
from tests.agent.box_helpers import box_toml, cost_json, open_box, report_of, run_ticks
from tests.conftest import FakeNvml
from tests.fakenvml.build import FakeGpu, FakeNvmlConfig

GPU = "GPU-0e0e0e0e-1111-2222-3333-444444444444"
TICKS = 13


@pytest.fixture
def box(db_url: str, tmp_path: Path, fake_nvml: FakeNvml) -> Iterator[tuple[App, Path]]:
    fake_nvml.write(FakeNvmlConfig(gpus=(FakeGpu(uuid=GPU, util=40),)))
    with EngineServer("ollama", Traffic(models=("llama3.2",))) as server:
        path = tmp_path / "gpuwatch.toml"
        target = f'[[targets]]\nname = "ollama"\nurl = "{server.url}"\nengine = "ollama"\n'
        app = open_box(db_url, path, box_toml(db_url, target + "gpus = [0]\n"))
        try:
            run_ticks(app, TICKS)
            yield app, path
        finally:
            app.close()


def test_cost_prices_the_gpu_time_and_says_tokens_are_not_counted(
    box: tuple[App, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    _, path = box
    from agent.cli.main import main

    (model,) = cost_json(path, capsys)["models"]
    assert float(model["cost_usd"]) > 0
    assert model["useful_tokens"] is None and model["useful_tokens_source"] is None
    assert model["cost_per_million_tokens_usd"] is None
    assert main(["cost", "--window", "30d", "--config", str(path)]) == 0
    (row,) = [line for line in capsys.readouterr().out.splitlines() if "model " in line]
    assert "not counted" in row


def test_the_report_says_not_counted(box: tuple[App, Path]) -> None:
    report = report_of(box[0], TICKS)
    (model,) = json.loads(render(report, "json"))["models"]
    assert model["useful_tokens"] is None and float(model["cost_usd"]) > 0
    assert "not counted" in render(report, "table").split("MODELS")[1].split("\n\n")[0]
