"""Serving efficiency end to end, through the daemon's own path: the vLLM 0.33 simulator serving
the request cycle (prefix-cache hits in it) with speculative decoding of 3 draft tokens a step,
App.tick and the minute job with an injected clock, then the report. Every ratio is checked
against the arithmetic done here from the requests served.

GPU 0 serves the model at 40 % (NVML's flag) and GPUs 1-3 idle at 5 %: consolidation would
release three of four. At one tick the model's KV cache reaches 97 % while 3 requests wait, so
the model needs a replica, and GPU 0 is not offered for release.
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from agent.config.settings import load_config
from agent.daemon.app import App
from agent.reporting.build import build_report
from agent.reporting.period import range_period
from agent.reporting.render.dispatch import render
from agent.sim.server import EngineServer
from agent.sim.traffic import Request, Traffic
from agent.storage.db import upgrade_database
from tests.conftest import FakeNvml
from tests.fakenvml.build import FakeGpu, FakeNvmlConfig

MODEL = "llama-8b"
START = datetime(2026, 11, 30, 16, 0, 0, tzinfo=UTC)
STEP = timedelta(seconds=10)
TICKS = 13
K = 3  # draft tokens per step
GPUS = tuple(f"GPU-{i}{i}{i}{i}{i}{i}{i}{i}-1111-2222-3333-444444444444" for i in range(4))


def serve_and_report(
    db_url: str, tmp_path: Path, fake_nvml: FakeNvml, *, waiting: int, spec_tokens: int
) -> tuple[dict[str, Any], tuple[Request, ...], str]:
    fake_nvml.write(
        FakeNvmlConfig(
            gpus=tuple(FakeGpu(uuid=u, util=40 if i == 0 else 5) for i, u in enumerate(GPUS))
        )
    )
    traffic = Traffic(models=(MODEL,))
    with EngineServer("vllm-0.33", traffic, spec_tokens=spec_tokens) as server:
        path = tmp_path / "gpuwatch.toml"
        path.write_text(
            f'host = "box"\ndatabase_url = "{db_url}"\n[daemon]\ninterval_seconds = 10\n'
            '[[rates]]\ngpu = "*"\nusd_per_hour = 3.6\n'
            f'[[targets]]\nname = "t1"\nurl = "{server.url}"\ngpus = [0]\n'
        )
        upgrade_database(db_url)
        app = App.open(load_config(str(path), {}))
        try:
            for i in range(TICKS):
                if i:
                    traffic.serve(2 + i % 3)
                # One tick with the cache nearly full (and a queue, if any), then it drains.
                full = i == 5
                traffic.set_gauges(kv_usage=0.97 if full else 0.4, waiting=waiting if full else 0)
                now = START + i * STEP
                app.tick(now)
                app.roll_up(now)
            end = START + (TICKS - 1) * STEP
            period = range_period(START.isoformat(), (end + STEP).isoformat(), "UTC")
            report = build_report(app.engine, app.config, period, now=end)
            return json.loads(render(report, "json")), traffic.requests(), render(report, "table")
        finally:
            app.close()


@pytest.fixture
def queued(
    db_url: str, tmp_path: Path, fake_nvml: FakeNvml
) -> tuple[dict[str, Any], tuple[Request, ...], str]:
    return serve_and_report(db_url, tmp_path, fake_nvml, waiting=3, spec_tokens=K)


def expected_drafts(requests: tuple[Request, ...]) -> tuple[int, int]:
    """(draft, accepted) tokens: request seq accepts seq % (K + 1) of K drafts a step, and each
    step emits what it accepted plus one; the prefill gave the first token."""
    draft = accepted = 0
    for r in requests:
        rest = r.generation_tokens - 1
        if rest <= 0:
            continue
        steps = math.ceil(rest / (r.seq % (K + 1) + 1))
        draft += K * steps
        accepted += rest - steps
    return draft, accepted


def test_cache_hits_their_dollars_and_spec_acceptance_match_what_was_served(
    queued: tuple[dict[str, Any], tuple[Request, ...], str],
) -> None:
    document, served, _ = queued
    (model,) = document["models"]
    prompt = sum(r.prompt_tokens for r in served)
    cached = sum(r.cached_tokens for r in served)
    generated = sum(r.generation_tokens for r in served)
    assert cached > 0
    assert model["cached_prompt_tokens"] == cached
    assert model["prefix_cache_hit_ratio"] == pytest.approx(cached / prompt, abs=1e-4)
    assert model["prefix_cache_basis"].startswith("engine prompt counters")
    # Cached tokens at the model's cost per computed (prompt + generated) token.
    cost = Decimal(model["cost_usd"])
    worked = (prompt - cached) + generated
    saved = Decimal(model["cache_saved_usd"])
    assert saved > 0
    assert saved == pytest.approx(cost * Decimal(cached) / Decimal(worked), abs=Decimal("0.01"))
    draft, accepted = expected_drafts(served)
    assert 0 < accepted < draft
    assert model["spec_decode_acceptance_ratio"] == pytest.approx(accepted / draft, abs=1e-4)
    assert model["spec_decode_basis"] == "vllm spec_decode accepted / draft tokens"
    assert model["kv_cache_peak_ratio"] == 0.97
    assert model["requests_waiting_peak"] == 3


def test_a_full_kv_cache_with_a_queue_needs_a_replica_at_40_percent_utilization(
    queued: tuple[dict[str, Any], tuple[Request, ...], str],
) -> None:
    document, _, table = queued
    assert document["gpus"][0]["utilization_ratio"] == 0.4
    advice = {r["kind"]: r for r in document["recommendations"]}
    replica = advice["replica"]
    assert replica["title"] == f"{MODEL}: add a replica"
    assert "KV cache peaked at 97% while up to 3 request(s) waited" in replica["detail"]
    assert "box/0 40% (utilization flag)" in replica["detail"]
    # Consolidation still releases idle GPUs, but not the one the model needs.
    consolidate = advice["consolidate"]
    assert "box/0" not in consolidate["detail"] and "box/1" in consolidate["detail"]
    assert "SERVING EFFICIENCY" in table


def test_no_queue_no_replica_and_no_spec_decoding_is_unknown(
    db_url: str, tmp_path: Path, fake_nvml: FakeNvml
) -> None:
    document, _, _ = serve_and_report(db_url, tmp_path, fake_nvml, waiting=0, spec_tokens=0)
    (model,) = document["models"]
    assert model["kv_cache_peak_ratio"] == 0.97 and model["requests_waiting_peak"] == 0
    assert model["spec_decode_acceptance_ratio"] is None and model["spec_decode_basis"] is None
    kinds = [r["kind"] for r in document["recommendations"]]
    assert "replica" not in kinds
    (consolidate,) = [r for r in document["recommendations"] if r["kind"] == "consolidate"]
    assert "box/0" in consolidate["detail"]  # nothing waited: its GPU may be consolidated
