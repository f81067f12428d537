"""The weekly digest's serving-efficiency lines, as Slack shows them: a model with every figure
(and the report's replica advice), a model whose engines report none (n/a, never 0), a week with
no serving figure at all (no section), and end to end from the vLLM 0.33 simulator through the
daemon's own path to the digest's text."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from agent.config.settings import load_config
from agent.daemon.app import App
from agent.reporting.build import build_report
from agent.reporting.digest import block_kit_problems, digest_payload
from agent.reporting.model import Recommendation, Serving
from agent.reporting.period import range_period
from agent.sim.server import EngineServer
from agent.sim.traffic import Traffic
from agent.storage.db import upgrade_database
from tests.agent.digest_helpers import make_report, model
from tests.conftest import FakeNvml
from tests.fakenvml.build import FakeGpu, FakeNvmlConfig

TITLE = "*Serving efficiency (prefix cache · KV cache and queue peaks)*"


def serving_section(payload: dict[str, Any]) -> list[str] | None:
    """The section's lines under its title; None when the digest has no such section."""
    found = [
        b["text"]["text"]
        for b in payload["blocks"]
        if b.get("text", {}).get("text", "").startswith(TITLE)
    ]
    assert len(found) <= 1
    return found[0].splitlines()[1:] if found else None


FULL = Serving(
    prefix_cache_hit_ratio=0.4213,
    cached_prompt_tokens=4.2e8,
    cache_saved_usd=Decimal("123.455"),
    prefix_cache_basis="engine prompt counters: all minus computed prompt tokens",
    spec_decode_acceptance_ratio=0.712,
    spec_decode_basis="vllm spec_decode accepted / draft tokens",
    kv_cache_peak_ratio=0.97,
    requests_waiting_peak=1234.0,
    kv_cache_basis="highest engine KV-cache usage and queue gauges (rollup max)",
)
REPLICA = Recommendation("replica", "llama-8b: add a replica", "KV cache peaked at 97% ...")


def test_a_model_with_every_figure_and_one_with_none() -> None:
    report = make_report(
        models=(
            model("llama-8b", serving=FULL),
            model("qwen-32b", cost="400", per_m="0.55"),  # its engines report none of them
        ),
        recommendations=(REPLICA,),
    )
    payload = digest_payload(report, None)
    assert block_kit_problems(payload) == []
    # The costliest model first; the saving rounded to the cent and stated as a ceiling.
    assert serving_section(payload) == [
        "*llama-8b*: prefix cache 42.1% of prompt tokens, saved at most $123.46 · spec decode"
        " 71.2% accepted · KV cache peak 97.0%, queue peak 1,234 · *add a replica* (KV cache"
        " full while requests waited)",
        "*qwen-32b*: prefix cache n/a · KV cache peak n/a, queue peak n/a",
    ]


def test_unknown_dollars_and_an_empty_queue_are_told_apart() -> None:
    # Cost unknown: the hit rate stands, its dollars do not. A queue that never formed is 0.
    partial = replace(FULL, cache_saved_usd=None, spec_decode_acceptance_ratio=None,
                      kv_cache_peak_ratio=0.4, requests_waiting_peak=0.0)  # fmt: skip
    report = make_report(models=(model("llama-8b", serving=partial),), recommendations=())
    assert serving_section(digest_payload(report, None)) == [
        "*llama-8b*: prefix cache 42.1% of prompt tokens, saved n/a · KV cache peak 40.0%,"
        " queue peak 0",
    ]


def test_a_week_without_any_serving_figure_has_no_section() -> None:
    payload = digest_payload(make_report(), None)
    assert serving_section(payload) is None
    assert block_kit_problems(payload) == []


def test_hostile_model_names_are_escaped_in_the_serving_lines() -> None:
    report = make_report(models=(model("<!channel> & co", serving=FULL),), recommendations=())
    (line,) = serving_section(digest_payload(report, None)) or []
    assert line.startswith("*&lt;!channel&gt; &amp; co*: prefix cache 42.1%")


# -- end to end ------------------------------------------------------------------------------

START = datetime(2026, 11, 30, 16, 0, 0, tzinfo=UTC)
STEP = timedelta(seconds=10)
TICKS = 8


def test_the_simulated_engine_s_figures_reach_the_digest(
    db_url: str, tmp_path: Path, fake_nvml: FakeNvml
) -> None:
    """vLLM 0.33 with prefix-cache hits and 3 draft tokens a step; at one tick the KV cache is at
    97 % while 3 requests wait, so the report advises a replica and the digest says so."""
    fake_nvml.write(FakeNvmlConfig(gpus=(FakeGpu(uuid="GPU-d1d1d1d1-0000-0000-0000-0", util=40),)))
    traffic = Traffic(models=("llama-8b",))
    with EngineServer("vllm-0.33", traffic, spec_tokens=3) as server:
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
                    traffic.serve(3)
                traffic.set_gauges(kv_usage=0.97 if i == 4 else 0.4, waiting=3 if i == 4 else 0)
                app.tick(START + i * STEP)
                app.roll_up(START + i * STEP)
            end = START + (TICKS - 1) * STEP
            period = range_period(START.isoformat(), (end + STEP).isoformat(), "UTC")
            report = build_report(app.engine, app.config, period, now=end)
        finally:
            app.close()
    (row,) = report.models
    s = row.serving
    assert s.prefix_cache_hit_ratio and s.cache_saved_usd and s.spec_decode_acceptance_ratio
    payload = digest_payload(report, None)
    assert block_kit_problems(payload) == []
    (line,) = serving_section(payload) or []
    assert line == (
        f"*llama-8b*: prefix cache {s.prefix_cache_hit_ratio * 100:.1f}% of prompt tokens, saved"
        f" at most ${s.cache_saved_usd.quantize(Decimal('0.01')):,} · spec decode"
        f" {s.spec_decode_acceptance_ratio * 100:.1f}% accepted · KV cache peak 97.0%, queue"
        " peak 3 · *add a replica* (KV cache full while requests waited)"
    )
