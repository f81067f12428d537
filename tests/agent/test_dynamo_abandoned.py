"""A Dynamo frontend's disconnected clients are abandoned work (issue 44): counted as requests
finished with reason "abort", they show as the model's abandoned requests in `cost --json`, every
report format and the digest. Dynamo does not say how many tokens those requests had generated,
so the abandoned tokens stay "not counted", never 0."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agent.config.settings import load_config
from agent.daemon.app import App
from agent.reporting.build import build_report
from agent.reporting.period import range_period
from agent.reporting.render.dispatch import render
from agent.sim.dynamo import GONE
from agent.sim.server import EngineServer
from agent.sim.traffic import Traffic
from agent.storage.db import upgrade_database
from tests.conftest import FakeNvml
from tests.fakenvml.build import FakeGpu, FakeNvmlConfig

GPU = "GPU-0d0d0d0d-1111-2222-3333-444444444444"
START = datetime(2026, 11, 30, 16, 0, tzinfo=UTC)
STEP = timedelta(seconds=10)
TICKS = 13


@pytest.fixture
def box(db_url: str, tmp_path: Path, fake_nvml: FakeNvml) -> Iterator[tuple[App, Path, int]]:
    fake_nvml.write(FakeNvmlConfig(gpus=(FakeGpu(uuid=GPU, util=60),)))
    traffic = Traffic(models=("llama-8b",))
    with EngineServer("dynamo", traffic) as server:
        path = tmp_path / "gpuwatch.toml"
        path.write_text(
            f'host = "box"\ndatabase_url = "{db_url}"\n[daemon]\ninterval_seconds = 10\n'
            '[[rates]]\ngpu = "*"\nusd_per_hour = 3.6\n'
            f'[[targets]]\nname = "frontend"\nurl = "{server.url}"\nengine = "dynamo"\n'
            "gpus = [0]\n"
        )
        upgrade_database(db_url)
        app = App.open(load_config(str(path), {}))
        gone = 0
        try:
            for i in range(TICKS):
                if i:  # after the first scrape, which every counter starts from
                    served = traffic.serve(24) + traffic.drop(2, after_tokens=5)
                    gone += sum(1 for r in served if r.finish_reason in GONE)
                now = START + i * STEP
                app.tick(now)
                app.roll_up(now)
            yield app, path, gone
        finally:
            app.close()


def test_disconnected_clients_are_the_models_abandoned_requests(
    box: tuple[App, Path, int], capsys: pytest.CaptureFixture[str]
) -> None:
    app, path, gone = box
    from agent.cli.main import main

    assert gone > 0
    assert main(["cost", "--window", "30d", "--json", "--config", str(path)]) == 0
    (model,) = json.loads(capsys.readouterr().out)["models"]
    assert model["abandoned_requests"] == gone
    assert model["abandoned_tokens"] is None  # Dynamo does not say: not counted, never 0
    end = START + (TICKS - 1) * STEP
    period = range_period(START.isoformat(), (end + timedelta(seconds=1)).isoformat(), "UTC")
    report = build_report(app.engine, app.config, period, now=end)
    (row,) = json.loads(render(report, "json"))["models"]
    assert row["abandoned_requests"] == gone
    table = render(report, "table").split("ABORTED REQUESTS")[1].split("\n\n")[0]
    assert f"{gone:,}" in table.splitlines()[-1]
    for fmt in ("markdown", "html", "csv"):
        assert f"{gone}" in render(report, fmt).replace(",", ""), fmt
    from agent.reporting.digest import digest_payload

    text = json.dumps(digest_payload(report, None))
    assert f"abandoned {gone:,} requests" in text
