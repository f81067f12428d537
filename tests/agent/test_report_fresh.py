"""A report shows everything stored: right after a run, and exactly over windows that start or
end inside a minute (agent.cost.provisional), on SQLite and PostgreSQL.

The daemon's own path runs: the engine simulator serves /metrics, the fake NVML answers for one
GPU, App.tick stores each round at an injected instant and the minute job runs as the daemon
runs it (so nothing of the last two minutes has settled into rollups), then build_report reads.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import func, select

from agent.config.settings import load_config
from agent.daemon.app import App
from agent.reporting.build import build_report
from agent.reporting.model import Report
from agent.reporting.period import range_period
from agent.sim.server import EngineServer
from agent.sim.traffic import Request, Traffic
from agent.storage.db import upgrade_database
from agent.storage.windows import counter_increase
from migrations.schema import gpu_usage, rollup_state, rollups
from tests.conftest import FakeNvml
from tests.fakenvml.build import FakeGpu, FakeNvmlConfig

GPU = "GPU-11111111-2222-3333-4444-555555555555"
MODEL = "llama-8b"
START = datetime(2026, 11, 30, 16, 39, 16, tzinfo=UTC)  # the daemon starts inside a minute
STEP = timedelta(seconds=10)
USD_PER_HOUR = 3.6  # a cent a 10 s tick


@pytest.fixture
def box(db_url: str, tmp_path: Path, fake_nvml: FakeNvml) -> Iterator[tuple[App, Traffic]]:
    fake_nvml.write(FakeNvmlConfig(gpus=(FakeGpu(uuid=GPU, util=60),)))
    traffic = Traffic(models=(MODEL,))
    with EngineServer("vllm-0.33", traffic) as server:
        path = tmp_path / "gpuwatch.toml"
        path.write_text(
            f'host = "box"\ndatabase_url = "{db_url}"\n[daemon]\ninterval_seconds = 10\n'
            f'[[rates]]\ngpu = "{GPU}"\nusd_per_hour = {USD_PER_HOUR}\n'
            f'[[targets]]\nname = "t1"\nurl = "{server.url}"\n'
        )
        upgrade_database(db_url)
        app = App.open(load_config(str(path), {}))
        try:
            yield app, traffic
        finally:
            app.close()


def run(app: App, traffic: Traffic, ticks: int, first: datetime) -> list[tuple[datetime, int]]:
    """``ticks`` ticks from ``first`` with the minute job after each, as the daemon runs them;
    each tick's instant and the output tokens served just before it."""
    served: list[tuple[datetime, int]] = []
    for i in range(ticks):
        now = first + i * STEP
        done: list[Request] = traffic.serve(1 + i % 3) if i else []
        served.append((now, sum(r.generation_tokens for r in done)))
        app.tick(now)
        app.roll_up(now)
    return served


def report(app: App, start: datetime, end: datetime, now: datetime) -> Report:
    period = range_period(start.isoformat(), end.isoformat(), "UTC")
    return build_report(app.engine, app.config, period, now=now)


def stored_state(app: App) -> tuple[object, ...]:
    """What the rollup job has written: a report must leave it as it was."""
    with app.engine.connect() as conn:
        marks = sorted(conn.execute(select(rollup_state)).all())
        rows = conn.execute(select(func.count()).select_from(rollups)).scalar()
        ledger = conn.execute(select(func.count()).select_from(gpu_usage)).scalar()
    return tuple(marks), rows, ledger


def test_a_report_right_after_a_run_shows_the_run(box: tuple[App, Traffic]) -> None:
    app, traffic = box
    served = run(app, traffic, 13, START)  # two minutes, none of it settled into rollups
    end = START + 12 * STEP
    before = stored_state(app)

    got = report(app, START, end + timedelta(seconds=1), end)

    tokens = sum(n for _, n in served)
    assert tokens > 0
    assert got.totals.output_tokens == tokens
    assert got.totals.gpu_hours == pytest.approx(120 / 3600)
    assert float(got.totals.metered_usd) == pytest.approx(0.12)
    (row,) = got.models
    assert row.model == MODEL and row.output_tokens == tokens
    assert got.data.first == START and got.data.last == end
    assert stored_state(app) == before  # read in a transaction rolled back: nothing written


def test_a_window_inside_minutes_counts_exactly_its_part(box: tuple[App, Traffic]) -> None:
    app, traffic = box
    first = START.replace(second=0)  # 16:39:00, ticks every 10 s to 16:43:50
    served = run(app, traffic, 30, first)
    app.roll_up(first + 40 * STEP)  # and everything settled: the edges are rollup rows now
    low, high = START, first + timedelta(minutes=4, seconds=25)  # 16:39:16 .. 16:43:25
    expected = sum(n for at, n in served if low < at <= high)
    metric = "gpuwatch_engine_generation_tokens_total"
    assert expected == counter_increase(app.store, metric, low, high, {"model": MODEL})

    got = report(app, low, high, first + 40 * STEP)

    assert got.totals.output_tokens == expected
    # GPU time: the 10 s intervals that end inside the window, as the tokens
    ends = [at for at, _ in served if low < at <= high]
    assert got.totals.gpu_hours == pytest.approx(len(ends) * 10 / 3600)


def test_a_window_with_no_data_says_so(box: tuple[App, Traffic]) -> None:
    app, traffic = box
    run(app, traffic, 7, START)
    got = report(app, START + timedelta(hours=2), START + timedelta(hours=3), START)
    assert got.data.empty and got.data.first is None
    assert got.totals.output_tokens == 0


def test_cost_right_after_a_run_shows_the_run(
    box: tuple[App, Traffic], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    app, traffic = box
    served = run(app, traffic, 13, START)
    from agent.cli.main import main  # the command as users run it, in this process

    assert (
        main(["cost", "--window", "30d", "--json", "--config", str(tmp_path / "gpuwatch.toml")])
        == 0
    )
    fleet = json.loads(capsys.readouterr().out)["fleet"]
    assert fleet["output_tokens"] == sum(n for _, n in served)
    assert float(fleet["cost_usd"]) == pytest.approx(0.12)
