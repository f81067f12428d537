"""A box's MIG instance rows are trimmed by retention and reach the fleet's central PostgreSQL
as its other ledger rows do, and the central report shows the same instances as the box's
own. The box is tests/agent/mig_cost_helpers.py's host, run for real on SQLite."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, select

from agent.config.settings import Config
from agent.reporting.build import build_report
from agent.reporting.period import range_period
from agent.reporting.render.dispatch import render
from agent.storage.buckets import HOUR, MINUTE
from agent.storage.db import open_database, upgrade_database
from agent.storage.forward.job import Forwarder, central_engine
from agent.storage.retention import trim_rollups
from migrations.schema import gpu_mig_usage
from tests.agent.mig_cost_helpers import END, HOST, NOW, T0, mig_run
from tests.conftest import FakeNvml


def test_mig_rows_are_forwarded_and_the_central_report_shows_the_instances(
    pg_url: str, fake_nvml: FakeNvml, tmp_path: Path
) -> None:
    upgrade_database(pg_url)
    local_url = f"sqlite:///{tmp_path / 'state' / 'gpuwatch.db'}"
    with mig_run(local_url, fake_nvml, tmp_path) as config:
        local = open_database(local_url)
        center = central_engine(pg_url, 10)
        try:
            assert Forwarder(local, center, HOST).run(NOW).ok
            assert _rows(center) == _rows(local) and len(_rows(local)) > 0
            assert _instances(center, config) == _instances(local, config)
        finally:
            local.dispose()
            center.dispose()


def _rows(engine: Engine) -> list[tuple[Any, ...]]:
    c = gpu_mig_usage.c
    query = select(c.host, c.gpu_uuid, c.mig_instance, c.resolution, c.start, c.cost_usd,
                   c.idle_cost_usd, c.share_seconds, c.targets).order_by(
        c.resolution, c.start, c.gpu_uuid, c.mig_instance)  # fmt: skip
    with engine.connect() as conn:
        return [tuple(row) for row in conn.execute(query)]


def _instances(engine: Engine, config: Config) -> list[dict[str, Any]]:
    period = range_period(T0.isoformat(), END.isoformat(), "UTC")
    doc = json.loads(render(build_report(engine, config, period, now=NOW), "json"))
    assert len(doc["mig_instances"]) == 3
    return list(doc["mig_instances"])


def test_retention_trims_the_mig_rows_with_the_other_ledger_rows(
    fake_nvml: FakeNvml, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'state' / 'gpuwatch.db'}"
    with mig_run(url, fake_nvml, tmp_path):
        engine = open_database(url)
        try:
            # Minutes kept an hour past the run's end: its first hour's minute rows go, its
            # hour rows stay (kept 30 days).
            with engine.begin() as conn:
                trim_rollups(conn, HOST, END + timedelta(hours=1), timedelta(hours=2),
                             timedelta(days=30))  # fmt: skip
            kept = {(r[3], r[4]) for r in _rows(engine)}
        finally:
            engine.dispose()
    minutes = sorted(start for resolution, start in kept if resolution == MINUTE)
    assert minutes[0] == END - timedelta(hours=1)
    assert {start for resolution, start in kept if resolution == HOUR} == {
        T0,
        T0 + timedelta(hours=1),
    }
