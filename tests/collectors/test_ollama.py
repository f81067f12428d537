"""Ollama's /api/ps: the docs' own example answer (tests/fixtures/engines-real/ollama) mapped by
hand, and a simulated Ollama scraped over real HTTP under the same limits and timeouts as a
/metrics scrape: loaded models and their VRAM, and nothing about tokens (unknown, not 0)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from agent.sim.ollama import MODEL_BYTES
from agent.sim.server import EngineServer
from agent.sim.traffic import Traffic
from collectors.base import CollectError
from collectors.engines import ollama
from collectors.engines.exposition import ExpositionError
from collectors.engines.rules import Context
from collectors.limits import LimitExceeded, ScrapeLimits
from collectors.scrape import ScrapeCollector, TargetSpec

DOCS = Path(__file__).resolve().parents[1] / "fixtures" / "engines-real" / "ollama"
NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
MEMORY = "gpuwatch_engine_model_memory_bytes"


def scrape(url: str, engine: str = "auto", **limits: int) -> ScrapeCollector:
    spec = TargetSpec("ollama-box", url, engine=engine, timeout_seconds=0.5,
                      limits=ScrapeLimits(**limits))  # fmt: skip
    return ScrapeCollector(spec, host="box")


def test_the_docs_answer_maps_to_one_loaded_model_and_its_vram() -> None:
    body = (DOCS / "api-ps-docs.json").read_text()
    assert ollama.wanted("auto", body)
    models = ollama.parse(body, ScrapeLimits())
    samples = ollama.map_models(models, Context("box", "t", "ollama", "cfg", NOW))
    # "name": "mistral:latest", "size_vram": 5137025024 (all of "size": 5137025024 on the GPU)
    assert [(s.metric, s.labels["model"], s.value) for s in samples] == [
        (MEMORY, "mistral:latest", 5137025024.0)
    ]
    assert samples[0].labels["engine"] == "ollama"


def test_a_live_ollama_is_recognised_and_gives_no_token_figures() -> None:
    traffic = Traffic(models=("mistral:latest", "llama3.2:3b"))
    traffic.serve(12)  # served, but Ollama reports no requests or tokens
    with EngineServer("ollama", traffic) as server:
        assert server.url.endswith("/api/ps")
        collector = scrape(server.url)
        samples = collector.collect(NOW)
        collector.close()
    assert {(s.labels["model"], s.value) for s in samples} == {
        ("mistral:latest", float(MODEL_BYTES)),
        ("llama3.2:3b", float(MODEL_BYTES)),
    }
    assert {s.metric for s in samples} == {MEMORY}  # no tokens, requests or latencies: unknown


def test_the_limits_and_the_timeout_of_a_scrape_apply() -> None:
    traffic = Traffic(models=("mistral:latest", "llama3.2:3b"))
    with EngineServer("ollama", traffic) as server:
        with pytest.raises(CollectError, match=r"sample_limit exceeded \(samples: 2, limit: 1\)"):
            scrape(server.url, sample_limit=1).collect(NOW)
        with pytest.raises(CollectError, match="label_value_length_limit exceeded"):
            scrape(server.url, label_value_length_limit=10).collect(NOW)
        server.mode, server.slow_seconds = "slow", 5.0
        with pytest.raises(CollectError, match="no answer within 0.5s"):
            scrape(server.url).collect(NOW)
        server.mode = "ok"
        server.rewrite = lambda body: body.replace('"size_vram":', '"size_vram":-')
        with pytest.raises(CollectError, match=r'models\[0\] \(mistral:latest\): "size_vram" is'):
            scrape(server.url, engine="ollama").collect(NOW)


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ("{not json", "not Ollama /api/ps JSON"),
        ('{"version": "0.5.1"}', 'no "models" in the answer'),
        ('{"models": {}}', '"models" is not a list'),
        ('{"models": [{"size_vram": 1}]}', r'models\[0\] has no "name"'),
        ('{"models": [{"name": "a"}, {"name": "a"}]}', "listed twice"),
    ],
)
def test_a_body_that_is_not_api_ps_is_refused_with_what_is_wrong(body: str, problem: str) -> None:
    with pytest.raises(ExpositionError, match=problem):
        ollama.parse(body, ScrapeLimits())


def test_none_loaded_is_no_sample_and_a_model_without_size_vram_is_unknown() -> None:
    context = Context("box", "t", "ollama", "cfg", NOW)
    assert ollama.map_models(ollama.parse('{"models":null}', ScrapeLimits()), context) == []
    no_vram = ollama.parse('{"models":[{"name":"m","size":5}]}', ScrapeLimits())
    assert ollama.map_models(no_vram, context) == []  # not 0: Ollama did not say
    with pytest.raises(LimitExceeded):
        ollama.parse('{"models":[{"name":"a"},{"name":"b"}]}', ScrapeLimits(sample_limit=1))


def test_auto_sends_only_an_api_ps_answer_to_the_json_reader() -> None:
    assert ollama.wanted("auto", '  {\n  "models": []}')
    assert ollama.wanted("ollama", "anything: the configured engine decides")
    assert not ollama.wanted("auto", '{"metric.name"} 1\n')  # Prometheus 3 quoted names
    assert not ollama.wanted("vllm", '{"models": []}')
