"""Hostile /metrics bodies never blind a host: an impossible value costs that one
sample, a target over its limits is a failed scrape with the limit named, and the GPU and the
healthy targets are stored every tick, on SQLite and PostgreSQL. Real pynvml over the fake
libnvidia-ml, real HTTP engines (the simulator, its answers rewritten)."""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agent.cli.main import main
from agent.collect.runner import Round
from agent.config.settings import load_config
from agent.daemon.app import App
from agent.sim.server import EngineServer
from agent.sim.traffic import Traffic
from agent.storage.db import upgrade_database
from tests.cli_peak import run_with_peak
from tests.conftest import FakeNvml
from tests.fakenvml.build import FakeGpu, FakeNvmlConfig, FakeProcess, GiB

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
GPU = "GPU-00000000-0000-0000-0000-0000000000aa"
UTIL = "gpuwatch_gpu_utilization_ratio"
PROMPT = "gpuwatch_engine_prompt_tokens_total"
RUNNING = "gpuwatch_engine_requests_running"


def engine(model: str) -> Iterator[EngineServer]:
    traffic = Traffic(models=(model,))
    traffic.serve(3)
    with EngineServer("vllm-0.33", traffic) as server:
        yield server


@pytest.fixture
def good() -> Iterator[EngineServer]:
    yield from engine("good-model")


@pytest.fixture
def hostile() -> Iterator[EngineServer]:
    yield from engine("bad-model")


@pytest.fixture
def config_file(
    tmp_path: Path, db_url: str, fake_nvml: FakeNvml, good: EngineServer, hostile: EngineServer
) -> Path:
    fake_nvml.write(
        FakeNvmlConfig(
            gpus=(FakeGpu(uuid=GPU, util=70, used=40 * GiB),),
            processes=(FakeProcess(gpu=0, pid=100, mem=40 * GiB),),
        )
    )
    path = tmp_path / "gpuwatch.toml"
    path.write_text(
        f'host = "box"\ndatabase_url = "{db_url}"\n'
        f'[[rates]]\ngpu = "{GPU}"\nusd_per_hour = 2.00\n'
        f'[[targets]]\nname = "good"\nurl = "{good.url}"\ngpus = ["0"]\n'
        f'[[targets]]\nname = "hostile"\nurl = "{hostile.url}"\ngpus = ["0"]\nengine = "vllm"\n'
    )
    upgrade_database(db_url)
    return path


def replacing(pattern: str, repl: str) -> Callable[[str], str]:
    return lambda body: re.sub(pattern, repl, body, flags=re.M)


def tick(app: App, n: int) -> None:
    for i in range(n):
        app.tick(T0 + timedelta(seconds=10 * i))


def stored_instants(app: App, metric: str, **labels: str) -> set[datetime]:
    return {
        s.ts
        for s in app.store.samples(metric)
        if all(s.labels.get(k) == v for k, v in labels.items())
    }


def test_a_nan_costs_one_sample_not_the_round(
    config_file: Path, hostile: EngineServer, capsys: pytest.CaptureFixture[str]
) -> None:
    hostile.rewrite = replacing(
        r"^(vllm:num_requests_running\{[^}]*\}) \S+$", r"\1 NaN"
    )  # and a counter that went below zero, and an infinite bucket count
    rewrite_nan = hostile.rewrite
    hostile.rewrite = lambda body: replacing(
        r'^(vllm:prompt_tokens_total\{[^}]*\}) \S+$', r"\1 -5"
    )(replacing(r'^(vllm:e2e_request_latency_seconds_bucket\{[^}]*le="1.0"[^}]*\}) \S+$',
                r"\1 +Inf")(rewrite_nan(body)))  # fmt: skip
    app = App.open(load_config(str(config_file)))
    try:
        tick(app, 6)
        every = {T0 + timedelta(seconds=10 * i) for i in range(6)}
        assert stored_instants(app, UTIL) == every  # the GPU, every tick
        assert stored_instants(app, PROMPT, target="good") == every
        assert stored_instants(app, RUNNING, target="hostile") == set()  # the NaN: unknown
        assert stored_instants(app, PROMPT, target="hostile") == set()  # the negative count
        # ... and the rest of the hostile target's round is kept
        assert stored_instants(app, "gpuwatch_engine_generation_tokens_total",
                               target="hostile") == every  # fmt: skip
        dropped = {
            (s.labels["collector"], s.labels["reason"]): s.value
            for s in app.store.samples("gpuwatch_samples_dropped_total")
            if s.ts == T0 + timedelta(seconds=50)
        }
        assert dropped[("target/hostile", "non_finite")] >= 12  # 2 a tick at least, 6 ticks
        assert dropped[("target/hostile", "negative_count")] == 6
        app.roll_up(T0 + timedelta(minutes=5))
    finally:
        app.close()

    assert main(["cost", "--json", "--config", str(config_file), "--window", "1h"]) == 0
    out = capsys.readouterr().out
    document = json.loads(out, parse_constant=_refuse)  # strict JSON: no NaN, no Infinity
    assert document


def _refuse(name: str) -> None:
    raise AssertionError(f"{name} in JSON output")


def test_a_nan_logs_once_when_it_starts_and_once_when_it_ends(
    config_file: Path, hostile: EngineServer, caplog: pytest.LogCaptureFixture
) -> None:
    app = App.open(load_config(str(config_file)))
    try:
        with caplog.at_level(logging.INFO, logger="agent.collect.runner"):
            hostile.rewrite = replacing(r"^(vllm:num_requests_running\{[^}]*\}) \S+$", r"\1 NaN")
            tick(app, 4)
            hostile.rewrite = None
            app.tick(T0 + timedelta(minutes=1))
        lines = [r.getMessage() for r in caplog.records if "target/hostile" in r.getMessage()]
        assert lines == [
            "collector target/hostile: dropped 1 non-finite sample value(s); the rest is kept",
            "collector target/hostile: sample values valid again",
        ]
    finally:
        app.close()


MANY_MODELS = 100_000


def many_models(body: str) -> str:
    lines = [
        f'vllm:num_requests_running{{engine="0",model_name="m{i}"}} 1.0' for i in range(MANY_MODELS)
    ]
    return body + "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    ("rewrite", "named"),
    [
        (many_models, "sample_limit exceeded (samples: 10"),
        (
            replacing(r'model_name="bad-model"', 'model_name="' + "x" * 5000 + '"'),
            "label_value_length_limit exceeded (metric: vllm:",
        ),
        (
            replacing(
                r'model_name="bad-model"',
                ",".join(f'l{i}="v"' for i in range(70)) + ',model_name="bad-model"',
            ),
            "label_limit exceeded (metric: vllm:",
        ),  # fmt: skip
        (
            replacing(r'model_name="bad-model"', "l" * 300 + '="v",model_name="bad-model"'),
            "label_name_length_limit exceeded (metric: vllm:",
        ),
        (
            replacing(r"^(vllm:num_requests_running\{[^}]*\} \S+)$", r"\1\n\1"),
            "duplicate sample vllm:num_requests_running{",
        ),
        (
            lambda body: (
                body + "# TYPE vllm:num_requests_running counter\n"
                'vllm:num_requests_running_total{engine="9",model_name="bad-model"} 3\n'
            ),
            "family vllm:num_requests_running appears twice with different types",
        ),
        (lambda body: "", "configured engine vllm but no vllm metrics"),
        (lambda body: "# HELP x\n" * 200_000, "configured engine vllm but no vllm metrics"),
        (lambda body: body.replace("vllm:", "sglang:"), "configured engine vllm but no vllm"),
    ],
    ids=[
        "sample_limit",
        "label_value_length",
        "label_limit",
        "label_name_length",
        "duplicate_series",
        "family_of_two_types",
        "empty_body",
        "comments_only",
        "another_engine",
    ],  # fmt: skip
)
def test_a_target_over_a_limit_fails_alone_with_the_limit_named(
    rewrite: Callable[[str], str],
    named: str,
    config_file: Path,
    hostile: EngineServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    hostile.rewrite = rewrite
    app = App.open(load_config(str(config_file)))
    try:
        with caplog.at_level(logging.ERROR, logger="agent.collect.runner"):
            round_ = app.tick(T0)
        up = {s.labels["target"]: s.value for s in round_.derived
              if s.metric == "gpuwatch_target_up"}  # fmt: skip
        assert up == {"good": 1.0, "hostile": 0.0}
        (line,) = [r.getMessage() for r in caplog.records]
        assert line.startswith("collector target/hostile failed: target hostile (")
        assert named in line
        assert stored_instants(app, UTIL) == {T0}
        assert stored_instants(app, PROMPT, target="good") == {T0}
        assert not [s for s in app.store.samples() if s.labels.get("target") == "hostile"
                    and s.metric.startswith("gpuwatch_engine_")]  # fmt: skip
    finally:
        app.close()


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_a_hundred_thousand_label_values_cost_one_fast_small_failed_tick(
    config_file: Path, hostile: EngineServer, fake_nvml_dir: Path, tmp_path: Path
) -> None:
    hostile.rewrite = many_models
    env = {**os.environ, "LD_LIBRARY_PATH": str(fake_nvml_dir),
           "FAKE_NVML_CONFIG": str(tmp_path / "fake-nvml.txt")}  # fmt: skip
    started = datetime.now(UTC)
    done, peak_mb = run_with_peak(["collect", "--once", "--config", str(config_file)], env)
    took = (datetime.now(UTC) - started).total_seconds()
    out, err = done.stdout, done.stderr
    assert done.returncode == 1, err  # a collector failed: exit 1, said
    print(f"peak {peak_mb:.1f} MB, {took:.2f} s")
    assert peak_mb < 150, peak_mb
    assert took < 10, took  # within the default interval, process start included
    assert "sample_limit exceeded (samples: 100" in err + out


def test_a_target_churning_series_is_stopped_by_its_daily_series_limit(
    tmp_path: Path, good: EngineServer, hostile: EngineServer, caplog: pytest.LogCaptureFixture
) -> None:
    config = tmp_path / "gpuwatch.toml"
    config.write_text(
        f'host = "box"\ndatabase_url = "sqlite:///{tmp_path / "gw.db"}"\n'
        "[collectors.nvml]\nenabled = false\n"
        f'[[targets]]\nname = "good"\nurl = "{good.url}"\n'
        f'[[targets]]\nname = "hostile"\nurl = "{hostile.url}"\nseries_per_day_limit = 400\n'
    )
    app = App.open(load_config(str(config)))
    ticks = iter(range(10**6))
    # Each scrape, a new request id in the model's label: every series is new every time.
    hostile.rewrite = lambda body: body.replace('model_name="bad-model"',
                                                f'model_name="req-{next(ticks)}"')  # fmt: skip
    try:
        with caplog.at_level(logging.ERROR, logger="agent.collect.runner"):
            ups = []
            for i in range(8):
                round_ = app.tick(T0 + timedelta(seconds=10 * i))
                ups += [s.value for s in round_.derived if s.metric == "gpuwatch_target_up"
                        and s.labels["target"] == "hostile"]  # fmt: skip
        assert ups[0] == 1.0 and ups[-1] == 0.0
        assert any("series_per_day_limit exceeded" in r.getMessage() for r in caplog.records)
        app.tick(T0 + timedelta(days=1))  # a new day: the count starts again
    finally:
        app.close()


def test_a_family_repeated_further_down_is_merged(
    tmp_path: Path, hostile: EngineServer, good: EngineServer
) -> None:
    # The good model's prompt tokens appear again in a second block, for another engine.
    again = (
        "# HELP vllm:prompt_tokens_total Number of prefill tokens processed.\n"
        "# TYPE vllm:prompt_tokens_total counter\n"
        'vllm:prompt_tokens_total{engine="7",model_name="bad-model"} 1000.0\n'
    )
    config = tmp_path / "gpuwatch.toml"
    config.write_text(
        f'host = "box"\ndatabase_url = "sqlite:///{tmp_path / "gw.db"}"\n'
        "[collectors.nvml]\nenabled = false\n"
        f'[[targets]]\nname = "hostile"\nurl = "{hostile.url}"\n'
    )
    app = App.open(load_config(str(config)))
    try:
        before = prompt_tokens(app.tick(T0))
        hostile.rewrite = lambda body: body + again
        after = prompt_tokens(app.tick(T0 + timedelta(seconds=10)))
        assert after - before == 1000.0  # both blocks read, neither dropped
    finally:
        app.close()


def prompt_tokens(round_: Round) -> float:
    return sum(s.value for _, s in round_.tagged_samples() if s.metric == PROMPT)
