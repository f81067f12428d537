"""A Dynamo frontend's disconnected clients are abandoned work (issue 44): counted as requests
finished with reason "abort", they show as the model's abandoned requests in `cost --json`, every
report format and the digest. Dynamo does not say how many tokens those requests had generated,
so the abandoned tokens stay "not counted", never 0."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.daemon.app import App
from agent.reporting.digest import digest_payload
from agent.reporting.render.dispatch import render
from agent.sim.dynamo import GONE
from agent.sim.server import EngineServer
from agent.sim.traffic import Traffic
from tests.agent.box_helpers import box_toml, cost_json, open_box, report_of, run_ticks
from tests.conftest import FakeNvml
from tests.fakenvml.build import FakeGpu, FakeNvmlConfig

GPU = "GPU-0d0d0d0d-1111-2222-3333-444444444444"
TICKS = 13


@pytest.fixture
def box(db_url: str, tmp_path: Path, fake_nvml: FakeNvml) -> Iterator[tuple[App, Path, int]]:
    fake_nvml.write(FakeNvmlConfig(gpus=(FakeGpu(uuid=GPU, util=60),)))
    traffic = Traffic(models=("llama-8b",))
    gone: list[int] = []

    def serve(_: int) -> None:
        served = traffic.serve(24) + traffic.drop(2, after_tokens=5)
        gone.append(sum(1 for r in served if r.finish_reason in GONE))

    with EngineServer("dynamo", traffic) as server:
        path = tmp_path / "gpuwatch.toml"
        target = f'[[targets]]\nname = "frontend"\nurl = "{server.url}"\nengine = "dynamo"\n'
        app = open_box(db_url, path, box_toml(db_url, target + "gpus = [0]\n"))
        try:
            run_ticks(app, TICKS, serve)
            yield app, path, sum(gone)
        finally:
            app.close()


def test_disconnected_clients_are_the_models_abandoned_requests(
    box: tuple[App, Path, int], capsys: pytest.CaptureFixture[str]
) -> None:
    app, path, gone = box
    assert gone > 0
    (model,) = cost_json(path, capsys)["models"]
    assert model["abandoned_requests"] == gone
    assert model["abandoned_tokens"] is None  # Dynamo does not say: not counted, never 0
    report = report_of(app, TICKS)
    (row,) = json.loads(render(report, "json"))["models"]
    assert row["abandoned_requests"] == gone
    table = render(report, "table").split("ABORTED REQUESTS")[1].split("\n\n")[0]
    assert f"{gone:,}" in table.splitlines()[-1]
    for fmt in ("markdown", "html", "csv"):
        assert f"{gone}" in render(report, fmt).replace(",", ""), fmt
    assert f"abandoned {gone:,} requests" in json.dumps(digest_payload(report, None))
