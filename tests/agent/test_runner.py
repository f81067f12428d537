"""The collection round: isolation, timing, health samples, and logging only on change."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta

import pytest

from agent.collect.runner import CollectorRunner
from collectors.base import CollectError, NoData, Sample

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


class Source:
    """A collector whose next outcome the test sets (the outside world, scripted)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.outcome: Exception | None = None

    def collect(self, now: datetime) -> Iterable[Sample]:
        if self.outcome is not None:
            raise self.outcome
        return [Sample(metric="gpuwatch_gpu_utilization_ratio", value=0.5, ts=now,
                       labels={"host": "h", "gpu_index": "0"})]  # fmt: skip


def health(round_samples: Iterable[Sample], collector: str) -> dict[str, float]:
    return {s.metric: s.value for s in round_samples if s.labels["collector"] == collector}


def test_a_failing_collector_spares_the_others_and_is_timed() -> None:
    broken, good = Source("broken"), Source("good")
    broken.outcome = RuntimeError("bug")
    ticks = iter([10.0, 10.25, 10.25, 10.5])
    runner = CollectorRunner("h", [broken, good], timer=lambda: next(ticks))
    round_ = runner.run(T0)
    assert [(r.collector, r.success, len(r.samples)) for r in round_.runs] == [
        ("broken", False, 0),
        ("good", True, 1),
    ]
    assert round_.runs[0].error == "RuntimeError: bug"
    assert health(round_.derived, "broken") == {
        "gpuwatch_collector_success": 0.0,
        "gpuwatch_collector_duration_seconds": 0.25,
    }
    assert health(round_.derived, "good")["gpuwatch_collector_last_success_timestamp_seconds"] == (
        T0.timestamp()
    )


def test_failure_is_logged_once_and_recovery_once(caplog: pytest.LogCaptureFixture) -> None:
    source = Source("nvml")
    runner = CollectorRunner("h", [source])
    runner.run(T0)
    source.outcome = CollectError("NVIDIA driver not loaded")
    with caplog.at_level(logging.INFO, logger="agent.collect.runner"):
        for i in range(1, 4):
            round_ = runner.run(T0 + timedelta(seconds=10 * i))
        # Blind, but the last success is still reported: alerts can tell how long.
        assert health(round_.derived, "nvml")[
            "gpuwatch_collector_last_success_timestamp_seconds"
        ] == (T0.timestamp())
        source.outcome = None
        runner.run(T0 + timedelta(seconds=40))
        runner.run(T0 + timedelta(seconds=50))
    assert [r.getMessage() for r in caplog.records] == [
        "collector nvml failed: NVIDIA driver not loaded",
        "collector nvml recovered",
    ]


def test_no_data_is_not_a_failure(caplog: pytest.LogCaptureFixture) -> None:
    source = Source("idle")
    source.outcome = NoData("no processes")
    with caplog.at_level(logging.INFO):
        (run,) = CollectorRunner("h", [source]).run(T0).runs
    assert run.success and run.samples == () and caplog.records == []
