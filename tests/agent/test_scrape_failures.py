"""A broken target is reported on its own, stores nothing, and spares every other collector."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from agent.config.settings import load_config
from agent.daemon.app import App
from agent.sim.server import EngineServer
from agent.sim.traffic import Traffic

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


@pytest.fixture
def good() -> Iterator[EngineServer]:
    traffic = Traffic(models=("good-model",))
    traffic.serve(3)
    with EngineServer("vllm-0.33", traffic) as server:
        yield server


@pytest.fixture
def bad() -> Iterator[EngineServer]:
    traffic = Traffic(models=("bad-model",))
    traffic.serve(3)
    with EngineServer("vllm-0.33", traffic, slow_seconds=3.0) as server:
        yield server


def app_for(tmp_path: Path, good: EngineServer, bad: EngineServer, env: dict[str, str]) -> App:
    config = tmp_path / "gpuwatch.toml"
    config.write_text(
        f'host = "box"\ndatabase_url = "sqlite:///{tmp_path / "gw.db"}"\n'
        "[collectors.nvml]\nenabled = false\n"
        f'[[targets]]\nname = "good"\nurl = "{good.url}"\n'
        f'[[targets]]\nname = "bad"\nurl = "{bad.url}"\ntimeout = "1s"\n'
        'bearer_token_env = "BAD_TOKEN"\n'
    )
    return App.open(load_config(str(config), env))


@pytest.mark.parametrize(
    ("mode", "problem"),
    [
        ("malformed", "not Prometheus text format"),
        ("oversized", "response exceeds the 10 MiB cap"),
        ("slow", "no answer within 1s"),
        ("404", "HTTP 404 Not Found"),
        ("500", "HTTP 500 Internal Server Error"),
    ],
)
def test_a_broken_target_is_down_stores_nothing_and_spares_the_others(
    mode: str,
    problem: str,
    good: EngineServer,
    bad: EngineServer,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    bad.mode = mode
    app = app_for(tmp_path, good, bad, {"BAD_TOKEN": "s3cret-token"})
    started = time.monotonic()
    with caplog.at_level(logging.ERROR, logger="agent.collect.runner"):
        round_ = app.tick(NOW)
    took = time.monotonic() - started
    (line,) = [r.getMessage() for r in caplog.records]
    assert line.startswith(f"collector target/bad failed: target bad ({bad.url}): ")
    assert problem in line
    assert "s3cret-token" not in line
    up = {s.labels["target"]: s.value for s in round_.derived if s.metric == "gpuwatch_target_up"}
    assert up == {"good": 1.0, "bad": 0.0}
    stored = {
        s.labels.get("model") for s in app.store.samples("gpuwatch_engine_prompt_tokens_total")
    }
    assert stored == {"good-model"}  # nothing at all from the broken scrape
    assert took < 1 + 1.5  # its timeout plus the grace: the tick is not held up by it
    app.close()


def test_the_bearer_token_is_sent_and_a_refusal_is_explained(
    good: EngineServer, bad: EngineServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    bad.token = "s3cret-token"
    app = app_for(tmp_path, good, bad, {"BAD_TOKEN": "s3cret-token"})
    round_ = app.tick(NOW)
    assert all(run.success for run in round_.runs)
    (request,) = bad.requests
    assert request.header("Authorization") == "Bearer s3cret-token"
    assert (request.header("Accept") or "").startswith("text/plain")
    app.close()

    app = app_for(tmp_path, good, bad, {"BAD_TOKEN": "wrong-token"})
    with caplog.at_level(logging.ERROR, logger="agent.collect.runner"):
        app.tick(NOW.replace(minute=1))
    (line,) = [r.getMessage() for r in caplog.records]
    assert "HTTP 401" in line and "wrong-token" not in line
    app.close()


def test_a_target_of_another_engine_than_configured_is_refused(tmp_path: Path) -> None:
    traffic = Traffic()
    with EngineServer("vllm-0.33", traffic) as server, EngineServer("vllm-0.33", traffic) as other:
        config = tmp_path / "gpuwatch.toml"
        config.write_text(
            f'database_url = "sqlite:///{tmp_path / "gw.db"}"\n[collectors.nvml]\nenabled = false\n'
            f'[[targets]]\nname = "x"\nurl = "{server.url}"\nengine = "tgi"\n'
            f'[[targets]]\nname = "y"\nurl = "{other.url}"\nengine = "vllm"\n'
        )
        app = App.open(load_config(str(config), {}))
        round_ = app.tick(NOW)
        app.close()
    errors = {run.collector: run.error for run in round_.runs}
    assert errors["target/y"] is None
    assert "configured engine tgi but no tgi metrics in the response" in (errors["target/x"] or "")
