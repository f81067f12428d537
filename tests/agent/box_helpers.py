"""One priced box on the simulated clock, as the end-to-end tests of the objectives, Ollama and
Dynamo drive it: a config with a rate, the App's ticks each followed by the minute rollup,
then what a user asks (`cost --json`, the report)."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from agent.config.settings import load_config
from agent.daemon.app import App
from agent.reporting.build import build_report
from agent.reporting.model import Report
from agent.reporting.period import range_period
from agent.storage.db import upgrade_database
from collectors.base import Sample
from collectors.otlp.inbox import SpanInbox

START = datetime(2026, 11, 30, 16, 0, tzinfo=UTC)
STEP = timedelta(seconds=10)


def box_toml(db_url: str, *tables: str) -> str:
    """The box's config: host "box", 10 s ticks, every GPU at $3.60/h, then ``tables``."""
    return (
        f'host = "box"\ndatabase_url = "{db_url}"\n[daemon]\ninterval_seconds = 10\n'
        '[[rates]]\ngpu = "*"\nusd_per_hour = 3.6\n' + "".join(tables)
    )


def open_box(db_url: str, path: Path, toml: str, inbox: SpanInbox | None = None) -> App:
    path.write_text(toml)
    upgrade_database(db_url)
    return App.open(load_config(str(path), {}), inbox=inbox)


def run_ticks(app: App, ticks: int, before: Callable[[int], None] = lambda _: None) -> None:
    """``ticks`` ticks from START, each rolled up; ``before(i)`` runs ahead of every tick but
    the first (which every counter starts from)."""
    for i in range(ticks):
        if i:
            before(i)
        now = START + i * STEP
        app.tick(now)
        app.roll_up(now)


def report_of(app: App, ticks: int) -> Report:
    """The report over the ticks' span, as of the last tick."""
    end = START + (ticks - 1) * STEP
    period = range_period(START.isoformat(), (end + timedelta(seconds=1)).isoformat(), "UTC")
    return build_report(app.engine, app.config, period, now=end)


def cost_json(path: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    """`gpuwatch cost --window 30d --json` as users run it (in this process)."""
    from agent.cli.main import main

    assert main(["cost", "--window", "30d", "--json", "--config", str(path)]) == 0
    document: dict[str, Any] = json.loads(capsys.readouterr().out)
    return document


def served_attainment(app: App, ticks: int) -> dict[str, Sample]:
    """``gpuwatch_slo_attainment_ratio`` per window once the ticks' minutes are rolled up."""
    from agent.cost.signals import host_samples

    end = START + (ticks + 12) * STEP
    app.roll_up(end)
    return {
        s.labels["window"]: s
        for s in host_samples(app.engine, app.config, end)
        if s.metric == "gpuwatch_slo_attainment_ratio"
    }
