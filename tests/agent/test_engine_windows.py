"""Across engine restarts, increases and quantiles over a window stay exactly right.

The daemon's own path runs: the engine simulator serves /metrics, App.tick scrapes and stores
raw values at injected instants, and agent.storage.windows answers from the database.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agent.config.settings import load_config
from agent.daemon.app import App
from agent.sim.server import EngineServer
from agent.sim.traffic import Request, Traffic, cumulative_counts
from agent.storage.db import upgrade_database
from agent.storage.series_math import histogram_quantile
from agent.storage.windows import counter_increase, histogram_window

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
MODEL = "llama-8b"
MATCH = {"model": MODEL, "target": "t1"}


def at(minutes: int) -> datetime:
    return T0 + timedelta(minutes=minutes)


@pytest.fixture
def open_app(db_url: str, tmp_path: Path) -> Iterator[object]:
    apps: list[App] = []

    def make(url: str) -> App:
        config = tmp_path / "gpuwatch.toml"
        config.write_text(
            f'host = "box"\ndatabase_url = "{db_url}"\n[collectors.nvml]\nenabled = false\n'
            f'[[targets]]\nname = "t1"\nurl = "{url}"\n'
        )
        upgrade_database(db_url)
        app = App.open(load_config(str(config), {}))
        apps.append(app)
        return app

    yield make
    for app in apps:
        app.close()


def tokens(requests: list[Request]) -> int:
    return sum(r.generation_tokens for r in requests)


def true_p99(observed: list[float], bounds: list[float]) -> float | None:
    counts = cumulative_counts(observed, bounds)
    return histogram_quantile(0.99, list(zip([*bounds, float("inf")], counts, strict=True)))


@pytest.mark.parametrize("version", ["vllm-0.33", "sglang-0.5", "vllm-0.6"])
def test_token_increase_and_p99_are_exact_across_a_restart(version: str, open_app: object) -> None:
    traffic = Traffic(models=(MODEL,))
    counted: list[Request] = []
    with EngineServer(version, traffic) as server:
        app = open_app(server.url)  # type: ignore[operator]
        traffic.serve(3)  # before the window: not counted
        app.tick(at(0))
        counted += traffic.serve(12)
        app.tick(at(1))
        counted += traffic.serve(5)
        app.tick(at(2))
        traffic.restart()  # counters back to 0
        counted += traffic.serve(4)  # lower than before: a visible decrease
        app.tick(at(3))
        counted += traffic.serve(30)  # now far above the old value
        app.tick(at(4))
    metric = "gpuwatch_engine_generation_tokens_total"
    assert counter_increase(app.store, metric, at(0), at(4), MATCH) == tokens(counted)
    assert counter_increase(app.store, metric, at(2), at(4), MATCH) == tokens(counted[17:])
    assert counter_increase(app.store, metric, at(5), at(9), MATCH) is None  # no data: unknown

    window = histogram_window(app.store, "gpuwatch_engine_ttft_seconds", at(0), at(4), MATCH)
    (segment,) = window.segments  # same buckets before and after: one segment
    bounds = list(segment.les[:-1])
    observed = [r.ttft for r in counted]
    assert segment.increases == cumulative_counts(observed, bounds)
    assert window.count == len(counted)
    assert window.quantiles[0.99] == true_p99(observed, bounds)


def test_a_restart_hidden_from_the_decrease_test_is_caught_by_created(open_app: object) -> None:
    # The engine's clock is the scrapes' clock, as on one box: its `_created` times lie before
    # the scrapes that read them (a start after its own sample is not one; series_math).
    engine_clock = [at(-5).timestamp()]
    traffic = Traffic(models=(MODEL,), clock=lambda: engine_clock[0])
    with EngineServer("vllm-0.33", traffic) as server:
        app = open_app(server.url)  # type: ignore[operator]
        traffic.serve(2)
        app.tick(at(0))
        engine_clock[0] = (at(0) + timedelta(seconds=30)).timestamp()
        traffic.restart()
        after = list(traffic.serve(24))  # climbs past the old value before the next scrape
        app.tick(at(1))
    metric = "gpuwatch_engine_generation_tokens_total"
    assert counter_increase(app.store, metric, at(0), at(1), MATCH) == tokens(after)


def test_an_engine_upgrade_with_other_buckets_is_never_merged(open_app: object) -> None:
    traffic = Traffic(models=(MODEL,))
    with EngineServer("vllm-0.6", traffic) as server:
        app = open_app(server.url)  # type: ignore[operator]
        app.tick(at(0))
        before = list(traffic.serve(12))
        app.tick(at(1))
        server.version = "vllm-0.8.5"  # upgraded and restarted: TTFT top bucket 10 s -> 2560 s
        traffic.restart()
        after = list(traffic.serve(12))
        app.tick(at(2))
    window = histogram_window(
        app.store, "gpuwatch_engine_ttft_seconds", at(0), at(2), MATCH, quantiles=(0.5, 0.99)
    )
    old, new = window.segments
    assert old.les != new.les
    assert old.increases == cumulative_counts([r.ttft for r in before], list(old.les[:-1]))
    assert new.increases == cumulative_counts([r.ttft for r in after], list(new.les[:-1]))
    shared = sorted(set(old.les) & set(new.les) - {float("inf")})
    observed = [r.ttft for r in before + after]
    assert window.quantiles[0.99] == true_p99(observed, shared)
    assert window.count == 24
