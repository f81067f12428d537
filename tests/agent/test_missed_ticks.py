"""Ticks the scheduler skips (the previous tick still running): counted on /metrics, logged when
they begin, at most once a minute while they go on, and when ticks are on time again
(APScheduler on its own writes a warning per skipped tick)."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from agent.config.settings import load_config
from agent.daemon.exposition import make_registry
from agent.daemon.missed import MissedTicks
from agent.daemon.service import Daemon


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "agent.daemon.missed"]


def test_a_stretch_of_skipped_ticks_is_a_few_lines_and_a_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    missed = MissedTicks(clock)
    with caplog.at_level(logging.WARNING):
        for second in range(150):  # a tick that takes 2 s at 1 s ticks: every other one skipped
            clock.now = float(second)
            missed.ran() if second % 2 == 0 else missed.missed()
        assert missed.total == 75
        assert lines(caplog) == [
            "1 tick(s) skipped: the previous tick was still running (1 in this stretch)",
            "30 tick(s) skipped: the previous tick was still running (31 in this stretch)",
            "30 tick(s) skipped: the previous tick was still running (61 in this stretch)",
        ]
        missed.ran()
        missed.ran()  # two starts with nothing skipped between them
        missed.ran()
    assert lines(caplog)[3:] == ["ticks start on time again; 75 skipped in that stretch"]
    sample = missed.sample("box-1", datetime(2026, 12, 1, tzinfo=UTC))
    assert (sample.metric, sample.value, sample.labels) == (
        "gpuwatch_ticks_missed_total", 75.0, {"host": "box-1"},
    )  # fmt: skip


def test_the_daemon_counts_skipped_ticks_on_metrics_and_silences_apscheduler(
    tmp_path: Path,
) -> None:
    path = tmp_path / "gpuwatch.toml"
    path.write_text(
        f'host = "box-1"\ndatabase_url = "sqlite:///{tmp_path / "gw.db"}"\n'
        '[daemon]\nmetrics_listen = ""\n[collectors.nvml]\nenabled = false\n'
    )
    daemon = Daemon(str(path), load_config(str(path)))
    try:
        text = generate_latest(make_registry(daemon.latest)).decode()
        assert 'gpuwatch_ticks_missed_total{host="box-1"} 0.0' in text  # from the start
        daemon.skipped(1)  # as the ticker does when a tick ran over the next slots
        daemon.skipped(2)
        text = generate_latest(make_registry(daemon.latest)).decode()
        assert 'gpuwatch_ticks_missed_total{host="box-1"} 3.0' in text
        assert "# TYPE gpuwatch_ticks_missed_total counter" in text
        assert logging.getLogger("apscheduler.scheduler").getEffectiveLevel() >= logging.ERROR
    finally:
        daemon.app.close()
