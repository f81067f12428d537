"""The simulated engines' HTTP server over real sockets: content types, the bearer token,
fault modes (404, 500, malformed, slow, oversized), OpenMetrics negotiation and llama.cpp's
read that resets a gauge."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families

from agent.sim.render import VERSIONS, content_type, render
from agent.sim.server import EngineServer
from tests.enginesim.sim_helpers import traffic


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=5.0) as c:
        yield c


@pytest.mark.parametrize("version", VERSIONS)
def test_server_serves_the_render_with_its_content_type(version: str, client: httpx.Client) -> None:
    t = traffic()
    with EngineServer(version, t) as server:
        assert server.url.startswith("http://127.0.0.1:") and server.url.endswith("/metrics")
        t.serve(12)  # while it runs
        expected = render(version, t)  # before the read: llama.cpp's read resets a gauge
        r = client.get(server.url, headers={"Accept": "text/plain"})
    assert r.status_code == 200
    assert r.headers["content-type"] == content_type(version)
    assert r.text == expected


def test_content_types() -> None:
    assert content_type("vllm-0.10") == "text/plain; version=0.0.4; charset=utf-8"
    assert content_type("vllm-0.33") == "text/plain; version=1.0.0; charset=utf-8"
    assert content_type("sglang-0.5") == "text/plain; version=0.0.4; charset=utf-8"
    for version in ("tgi-3", "llamacpp", "dcgm"):
        assert content_type(version) == "text/plain; version=0.0.4"


def test_server_records_headers_and_requires_the_token(client: httpx.Client) -> None:
    with EngineServer("vllm-0.33", traffic(), token="s3cret") as server:
        assert client.get(server.url).status_code == 401
        assert client.get(server.url, headers={"Authorization": "Bearer wrong"}).status_code == 401
        ok = client.get(
            server.url, headers={"Authorization": "Bearer s3cret", "Accept": "text/plain"}
        )
        recorded = server.requests
    assert ok.status_code == 200
    assert recorded[-1].header("authorization") == "Bearer s3cret"
    assert recorded[-1].header("Accept") == "text/plain"
    assert recorded[0].header("Authorization") is None


def test_server_rejects_bad_options_at_construction() -> None:
    with pytest.raises(ValueError):
        EngineServer("vllm-0.7", traffic())
    with pytest.raises(ValueError):
        EngineServer("vllm-0.6", traffic(engines=2))
    with pytest.raises(ValueError):
        EngineServer("tgi-3", traffic(), multiprocess=True)


def test_server_fault_modes(client: httpx.Client) -> None:
    with EngineServer("vllm-0.10", traffic()) as server:
        assert client.get(server.url.replace("/metrics", "/other")).status_code == 404
        server.mode = "404"
        assert client.get(server.url).status_code == 404
        server.mode = "500"
        assert client.get(server.url).status_code == 500
        server.mode = "malformed"
        r = client.get(server.url)
        assert r.status_code == 200
        with pytest.raises(ValueError):
            list(text_string_to_metric_families(r.text))
        server.mode = "ok"
        assert client.get(server.url).status_code == 200
        with pytest.raises(ValueError):
            server.mode = "sideways"


def test_server_slow_mode(client: httpx.Client) -> None:
    with EngineServer("tgi-3", traffic(), mode="slow", slow_seconds=0.6) as server:
        with pytest.raises(httpx.ReadTimeout):
            client.get(server.url, timeout=0.2)
        started = time.monotonic()
        assert client.get(server.url, timeout=5).status_code == 200
        assert time.monotonic() - started >= 0.6


def test_server_oversized_mode_streams_more_than_the_limit(client: httpx.Client) -> None:
    server = EngineServer("vllm-0.33", traffic(), mode="oversized")
    with server, client.stream("GET", server.url) as r:
        assert "content-length" not in r.headers
        size = sum(len(chunk) for chunk in r.iter_bytes())
    assert size > 11 * 1024 * 1024


def test_server_stops_while_a_client_streams(client: httpx.Client) -> None:
    server = EngineServer("dcgm", traffic(), mode="oversized", oversized_bytes=50 * 1024 * 1024)
    with server, client.stream("GET", server.url) as r:
        next(r.iter_bytes())
    # Leaving both blocks closed the stream and joined the handler: nothing left running.


def test_server_negotiates_openmetrics_where_the_engine_does(client: httpx.Client) -> None:
    om = {"Accept": "application/openmetrics-text; version=1.0.0"}
    t = traffic()
    t.serve(12)
    with EngineServer("vllm-0.6", t) as old, EngineServer("vllm-0.8.5", t) as new:
        r_old = client.get(old.url, headers=om)
        r_new = client.get(new.url, headers=om)
    assert r_old.headers["content-type"].startswith("application/openmetrics-text")
    assert r_old.text.endswith("# EOF\n")
    assert "vllm:prompt_tokens_total{" in r_old.text  # the colon kept, as older clients did
    names = {f.name for f in openmetrics_families(r_old.text)}
    assert {"vllm:prompt_tokens", "vllm:time_to_first_token_seconds"} <= names
    assert r_new.headers["content-type"] == content_type("vllm-0.8.5")
    assert "# EOF" not in r_new.text


def test_llamacpp_read_resets_throughput_and_model_query(client: httpx.Client) -> None:
    t = traffic(models=("a", "b"))
    t.serve(12, model="b")
    with EngineServer("llamacpp", t) as server:
        first = client.get(server.url, params={"model": "b"}).text
        second = client.get(server.url, params={"model": "b"}).text
    assert f"llamacpp:tokens_predicted_total {t.totals(model='b').generation_tokens}\n" in first
    assert "llamacpp:prompt_tokens_seconds 0\n" not in first
    assert "llamacpp:prompt_tokens_seconds 0\n" in second  # the bucket reset on the first read
    assert t.requests(model="b")  # counters are unaffected
