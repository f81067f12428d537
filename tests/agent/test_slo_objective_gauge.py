"""``gpuwatch_slo_objective_ratio{model}`` on /metrics: the [[slo]] objective of each model served
here that has one (its own entry, else "*"), none for a model without, and none when no window
has a histogram for the model; exposed as a declared gauge with its help text."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from agent.config.settings import load_config
from agent.cost.signals import host_samples
from agent.daemon.app import App
from agent.daemon.exposition import LatestRoundCollector, make_registry
from agent.sim.server import EngineServer
from agent.sim.traffic import Traffic
from agent.storage.db import upgrade_database
from tests.conftest import FakeNvml
from tests.fakenvml.build import FakeGpu, FakeNvmlConfig

START = datetime(2026, 11, 30, 16, 0, 0, tzinfo=UTC)
STEP = timedelta(seconds=10)
TICKS = 7
SLOS = (
    '[[slo]]\nmodel = "llama-8b"\ne2e = "1s"\nobjective = 0.95\n'
    '[[slo]]\nmodel = "absent-model"\nttft = "200ms"\nobjective = 0.9\n'
)


@pytest.fixture
def app(db_url: str, tmp_path: Path, fake_nvml: FakeNvml) -> Iterator[App]:
    """Two models served on loopback, an objective for one of them (and one for a model that is
    not served); ticks and rollups on the simulated clock."""
    fake_nvml.write(FakeNvmlConfig(gpus=(FakeGpu(uuid="GPU-0b0b0b0b-0000-0000-0000-0", util=60),)))
    traffic = Traffic(models=("llama-8b", "qwen-32b"))
    with EngineServer("vllm-0.33", traffic) as server:
        path = tmp_path / "gpuwatch.toml"
        path.write_text(
            f'host = "box"\ndatabase_url = "{db_url}"\n[daemon]\ninterval_seconds = 10\n'
            '[[rates]]\ngpu = "*"\nusd_per_hour = 3.6\n'
            f'[[targets]]\nname = "t1"\nurl = "{server.url}"\ngpus = [0]\n' + SLOS
        )
        upgrade_database(db_url)
        daemon = App.open(load_config(str(path), {}))
        try:
            for i in range(TICKS):
                if i:
                    traffic.serve(4, e2e_latency=0.6, model="llama-8b")
                    traffic.serve(4, e2e_latency=0.6, model="qwen-32b")
                daemon.tick(START + i * STEP)
                daemon.roll_up(START + i * STEP)
            yield daemon
        finally:
            daemon.close()


def test_the_objective_of_each_served_model_with_one(app: App) -> None:
    end = START + (TICKS + 12) * STEP  # the ticks' minutes rolled up
    app.roll_up(end)
    samples = host_samples(app.engine, app.config, end)
    objectives = [s for s in samples if s.metric == "gpuwatch_slo_objective_ratio"]
    # qwen-32b has no objective; absent-model has one but served nothing here.
    assert [(s.labels, s.value) for s in objectives] == [
        ({"host": "box", "model": "llama-8b"}, 0.95)
    ]
    latest = LatestRoundCollector()
    latest.update_cost(samples)
    text = generate_latest(make_registry(latest)).decode()
    assert "# TYPE gpuwatch_slo_objective_ratio gauge" in text
    assert "# HELP gpuwatch_slo_objective_ratio The fraction of a model's requests" in text
    assert 'gpuwatch_slo_objective_ratio{host="box",model="llama-8b"} 0.95' in text
