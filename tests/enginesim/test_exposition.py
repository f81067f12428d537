"""The simulator's exposition text is prometheus_client's own (single-process and
multiprocess), and every version's text parses, before and after traffic, with
prometheus_client and with promtool."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Summary
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.utils import floatToGoString

from agent.sim.expo import Buckets, Family, Scalar, go_float, render_text
from agent.sim.expo import Summary as SummarySeries
from agent.sim.render import VERSIONS, render
from agent.sim.traffic import Traffic
from tests.enginesim.sim_helpers import T0, traffic


@pytest.mark.parametrize("x", [0.0, 1.0, 0.1, 2.5, 7680.0, 16384.0, 123456.0, 1234567.0, T0, 1e-7])
def test_go_float_matches_prometheus_client(x: float) -> None:
    assert go_float(x) == floatToGoString(x)


def test_single_process_text_matches_prometheus_client(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(time, "time", lambda: T0)
    registry = CollectorRegistry()
    labels = ["model_name", "engine"]
    c = Counter("vllm:prompt_tokens", "Prompt.", labels, registry=registry)
    c.labels("m", "0").inc(1234567)
    c.labels("m", "1")
    Counter("vllm:never", "Never.", labels, registry=registry)
    g = Gauge("vllm:kv", "KV.", labels, registry=registry)
    g.labels("m", "0").set(0.25)
    h = Histogram("vllm:ttft", "TTFT.", labels, buckets=[0.25, 1, 7680], registry=registry)
    h.labels("m", "0").observe(0.25)
    h.labels("m", "0").observe(9000)
    sm = Summary("http_size", "Size.", ["handler"], registry=registry)
    sm.labels("/x").observe(3)
    ours = [
        Family(
            "vllm:prompt_tokens",
            "counter",
            "Prompt.",
            (
                Scalar((("model_name", "m"), ("engine", "0")), 1234567),
                Scalar((("model_name", "m"), ("engine", "1")), 0),
            ),
            T0,
        ),
        Family("vllm:never", "counter", "Never.", (), T0),
        Family("vllm:kv", "gauge", "KV.", (Scalar((("model_name", "m"), ("engine", "0")), 0.25),)),
        Family(
            "vllm:ttft",
            "histogram",
            "TTFT.",
            (
                Buckets(
                    (("model_name", "m"), ("engine", "0")), (0.25, 1, 7680), (1, 1, 1, 2), 9000.25
                ),
            ),
            T0,
        ),
        Family("http_size", "summary", "Size.", (SummarySeries((("handler", "/x"),), 1, 3.0),), T0),
    ]
    assert render_text(ours) == generate_latest(registry).decode()


_MP_SCRIPT = """
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector
labels = ["model_name", "is_streaming"]
c = Counter("sglang:prompt_tokens_total", "Prompt.", labels)
c.labels("m", "true").inc(3)
Counter("sglang:never_total", "Never.", labels)
h = Histogram("sglang:queue_time_seconds", "Queue.", ["model_name"], buckets=[0.0, 0.001, 1])
h.labels("m").observe(0.0005)
h.labels("m").observe(2.0)
running = Gauge("sglang:running", "Running.", ["model_name"], multiprocess_mode="mostrecent")
running.labels("m").set(5)
Gauge("sglang:retracted", "Retracted.", ["model_name"]).labels("m").set(2)
registry = CollectorRegistry()
MultiProcessCollector(registry)
print(generate_latest(registry).decode(), end="")
"""


def _blocks(text: str) -> list[str]:
    text = re.sub(r'pid="\d+"', 'pid="PID"', text)
    return sorted("# HELP " + b for b in text.split("# HELP ") if b)


def test_multiprocess_text_matches_prometheus_client(tmp_path: Path) -> None:
    env = {"PROMETHEUS_MULTIPROC_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"}
    real = subprocess.run(
        [sys.executable, "-c", _MP_SCRIPT], env=env, capture_output=True, text=True, check=True
    ).stdout
    ours = [
        Family(
            "sglang:prompt_tokens",
            "counter",
            "Prompt.",
            (Scalar((("model_name", "m"), ("is_streaming", "true")), 3),),
        ),
        Family("sglang:never", "counter", "Never.", ()),
        Family(
            "sglang:queue_time_seconds",
            "histogram",
            "Queue.",
            (Buckets((("model_name", "m"),), (0.0, 0.001, 1.0), (0, 1, 1, 2), 2.0005),),
        ),
        Family("sglang:running", "gauge", "Running.", (Scalar((("model_name", "m"),), 5),)),
        Family(
            "sglang:retracted",
            "gauge",
            "Retracted.",
            (Scalar((("model_name", "m"), ("pid", "PID")), 2),),
        ),
    ]
    assert _blocks(render_text(ours, multiprocess=True)) == _blocks(real)


# ----------------------------------------------------------------------------------------
# Every version parses, before and after traffic


@pytest.fixture(params=["idle", "served"])
def served(request: pytest.FixtureRequest) -> Traffic:
    t = traffic()
    if request.param == "served":
        t.serve(24)
        t.set_gauges(running=3, waiting=2, deferred=1, kv_usage=0.4567)
    return t


@pytest.mark.parametrize("version", VERSIONS)
def test_every_version_parses(version: str, served: Traffic) -> None:
    text = render(version, served)
    assert list(text_string_to_metric_families(text))
    assert text.endswith("\n")


@pytest.mark.parametrize("version", VERSIONS)
def test_every_version_passes_prometheus_own_parser(version: str, served: Traffic) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (`make test` installs Debian's prometheus as root)")
    result = subprocess.run(
        [promtool, "check", "metrics"],
        input=render(version, served),
        capture_output=True,
        text=True,
        check=False,
    )
    # Lint complaints (no _total on TGI counters, no HELP...) are the engines' real style.
    assert "error while linting" not in result.stdout + result.stderr
