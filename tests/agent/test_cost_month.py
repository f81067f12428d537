"""A simulated month with known truth: cost per million useful tokens per model within 0.1 %.

Real parts all the way: pynvml over the fake libnvidia-ml (two GPUs, one shared by two
targets), three engine simulators over HTTP (vLLM 0.33, SGLang 0.5, vLLM 0.8.5) with restarts,
a rate card with a mid-month price change, the daemon's tick and rollup at an injected hourly
clock, and the cost engine reading the rollups.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest

from agent.cli.cost import measured_workload
from agent.config.settings import BudgetConfig, load_config
from agent.cost.metering import rollup_for
from agent.cost.signals import cost_samples
from agent.cost.summarize import summarize
from agent.daemon.app import App, target_spec
from agent.sim.server import EngineServer
from agent.sim.traffic import Traffic
from agent.storage.db import upgrade_database
from collectors.nvml import NvmlCollector
from collectors.scrape import ScrapeCollector
from tests.conftest import FakeNvml
from tests.fakenvml.build import FakeGpu, FakeNvmlConfig, FakeProcess, GiB

T0 = datetime(2026, 11, 1, tzinfo=UTC)
HOURS = 30 * 24
STEP = 6  # hours between ticks: a month in 120 ticks keeps the test fast
GPU0 = "GPU-00000000-0000-0000-0000-00000000aaaa"
GPU1 = "GPU-00000000-0000-0000-0000-00000000bbbb"
PRICE_CHANGE = T0 + timedelta(days=12)


@dataclass
class Engine:
    name: str
    version: str
    model: str
    unit: str
    traffic: Traffic = field(init=False)
    counted_tokens: int = 0  # generation tokens produced after the first tick: the truth
    counted_requests: int = 0

    def __post_init__(self) -> None:
        self.traffic = Traffic(models=(self.model,))


@pytest.fixture
def engines() -> tuple[Engine, ...]:
    """Fresh engines (and their truth) for each test."""
    return (
        Engine("a", "vllm-0.33", "llama-8b", "vllm-a.service"),
        Engine("b", "sglang-0.5", "qwen-7b", "sglang-b.service"),
        Engine("c", "vllm-0.8.5", "mistral-7b", "vllm-c.service"),
    )


def hardware() -> FakeNvmlConfig:
    return FakeNvmlConfig(
        gpus=(FakeGpu(uuid=GPU0, util=50), FakeGpu(uuid=GPU1, util=90)),
        processes=(
            FakeProcess(gpu=0, pid=100, mem=30 * GiB),  # a: 3/4 of the shared GPU's memory
            FakeProcess(gpu=0, pid=200, mem=10 * GiB),  # b: 1/4
            FakeProcess(gpu=1, pid=300, mem=60 * GiB),  # c: alone on GPU 1
        ),
    )


def proc_root(tmp_path: Path) -> Path:
    root = tmp_path / "proc"
    for pid, unit in ((100, "vllm-a.service"), (200, "sglang-b.service"), (300, "vllm-c.service")):
        (root / str(pid)).mkdir(parents=True)
        (root / str(pid) / "cgroup").write_text(f"0::/system.slice/{unit}\n")
    return root


@pytest.fixture
def servers(engines: tuple[Engine, ...]) -> Iterator[dict[str, EngineServer]]:
    started = {e.name: EngineServer(e.version, e.traffic).start() for e in engines}
    yield started
    for server in started.values():
        server.stop()


def write_config(
    tmp_path: Path, db_url: str, servers: dict[str, EngineServer], engines: tuple[Engine, ...]
) -> Path:
    targets = "".join(
        f'[[targets]]\nname = "{e.name}"\nurl = "{servers[e.name].url}"\nunit = "{e.unit}"\n'
        for e in engines
    )
    path = tmp_path / "gpuwatch.toml"
    path.write_text(
        f'host = "box"\ndatabase_url = "{db_url}"\n[daemon]\ninterval_seconds = {STEP * 3600}\n'
        f'[[rates]]\ngpu = "{GPU0}"\nusd_per_hour = 2.72\n'
        f'[[rates]]\ngpu = "1"\nusd_per_minute = 0.0265\nvalid_to = {PRICE_CHANGE.isoformat()}\n'
        f'[[rates]]\ngpu = "1"\nusd_per_second = 0.0005\nvalid_from = {PRICE_CHANGE.isoformat()}\n'
        + targets
    )
    return path


def test_a_month_of_cost_per_million_tokens_matches_the_truth(
    db_url: str,
    tmp_path: Path,
    fake_nvml: FakeNvml,
    engines: tuple[Engine, ...],
    servers: dict[str, EngineServer],
) -> None:
    fake_nvml.write(hardware())
    upgrade_database(db_url)
    config = load_config(str(write_config(tmp_path, db_url, servers, engines)), {})
    scrapes = [ScrapeCollector(target_spec(t), host="box") for t in config.targets]
    app = App.open(config, [NvmlCollector(host="box", proc_root=proc_root(tmp_path)), *scrapes])
    rollup = rollup_for(app.engine, config)
    by_name = {e.name: e for e in engines}
    for hour in range(0, HOURS + 1, STEP):
        now = T0 + timedelta(hours=hour)
        if hour == 240:
            by_name["a"].traffic.restart()  # vLLM restarted: counters back to 0
        if hour == 504:
            by_name["b"].traffic.restart()
        if hour > 0:
            for i, e in enumerate(engines):
                served = e.traffic.serve(1 + (hour * (i + 2)) % 7)
                e.counted_tokens += sum(r.generation_tokens for r in served)
                e.counted_requests += len(served)
        app.tick(now)
        rollup.run(now)
    end = T0 + timedelta(hours=HOURS)
    rollup.run(end + timedelta(minutes=5))
    summary = summarize(app.engine, T0, end)
    exposed = app.roll_up(end + timedelta(minutes=5))  # what /metrics shows after the rollup
    budget = cost_samples(app.engine, replace(config, budget=BudgetConfig(Decimal(5000))),
                          end - timedelta(minutes=1))  # fmt: skip
    workload = measured_workload(config, "30d", now=end + timedelta(minutes=5))
    app.close()

    # Truth: every hour between the first and the last tick is metered.
    hours = Decimal(HOURS)
    gpu0 = Decimal("2.72") * hours
    before, after = Decimal(12 * 24), hours - Decimal(12 * 24)
    gpu1 = Decimal("0.0265") * 60 * before + Decimal("0.0005") * 3600 * after
    truth_cost = {"llama-8b": gpu0 * Decimal("0.75"), "qwen-7b": gpu0 * Decimal("0.25"),
                  "mistral-7b": gpu1}  # fmt: skip
    by_model = {m.name: m for m in summary.models}
    for e in engines:
        line = by_model[e.model]
        assert line.useful_tokens == e.counted_tokens, e.model  # exact, across restarts
        truth = truth_cost[e.model] / e.counted_tokens * 1_000_000
        got = line.usd_per_million_tokens
        assert got is not None and abs(got - truth) / truth < Decimal("0.001"), (
            e.model,
            got,
            truth,
        )
    assert abs(summary.fleet.cost_usd - (gpu0 + gpu1)) < Decimal("0.01")
    # Busy at 50 % and 90 %: idle is the other half and tenth of each GPU's cost.
    idle = gpu0 * Decimal("0.5") + gpu1 * Decimal("0.1")
    assert abs(summary.idle_cost_usd - idle) < Decimal("0.01")
    assert summary.unallocated_seconds == pytest.approx(0, abs=1)
    assert summary.gpu_seconds == pytest.approx(2 * HOURS * 3600)

    # /metrics: cost per million tokens over the 30 days, per model, within 0.1 %.
    per_million = {s.labels["model"]: s.value for s in exposed
                   if s.metric == "gpuwatch_cost_per_million_tokens_usd"
                   and s.labels["window"] == "30d"}  # fmt: skip
    for e in engines:
        truth = float(truth_cost[e.model] / e.counted_tokens * 1_000_000)
        assert per_million[e.model] == pytest.approx(truth, rel=1e-3), e.model
    (ratio,) = [s.value for s in budget if s.metric == "gpuwatch_budget_used_ratio"]
    assert ratio == pytest.approx(float((gpu0 + gpu1) / 5000), rel=1e-3)

    # `gpuwatch breakeven` without figures: the measured month.
    requests = sum(e.counted_requests for e in engines)
    assert float(workload.requests_per_day) == pytest.approx(requests / 30, rel=1e-3)
    busy = 0.5 * HOURS * 3600 + 0.9 * HOURS * 3600  # GPU 0 at 50 %, GPU 1 at 90 %
    assert float(workload.gpu_seconds_per_request) == pytest.approx(busy / requests, rel=1e-3)
