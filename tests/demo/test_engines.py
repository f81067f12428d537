"""The history's fast-forwarded scrapes are the real collector's samples, not a lookalike.

agent/demo/engines.py computes a round's samples from the real path's samples at 0, 1 and 2
request cycles. Here the real path (the simulator's body through the real ScrapeCollector) runs
at other cycle counts and load levels, and the two must agree sample for sample.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from agent.demo.engines import (
    FastForwardScrape,
    scrape_through_sim,
    serve_cycles,
    set_level,
    sim_traffic,
)
from agent.demo.scenario import LLAMA, MISTRAL, DemoTarget
from collectors.base import CollectError, Sample

STARTED = datetime(2026, 11, 3, 7, 0, tzinfo=UTC)
NOW = datetime(2026, 11, 5, 14, 0, tzinfo=UTC)


def by_key(samples: list[Sample]) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.metric, s.label_key()): s.value for s in samples}


def real(target: DemoTarget, cycles: int, level: str) -> list[Sample]:
    traffic = sim_traffic(target, STARTED.timestamp())
    serve_cycles(traffic, target.model, cycles)  # whole cycles, each with its abandoned stream
    set_level(traffic, level)
    return scrape_through_sim(target, "demo-host", traffic, NOW)


@pytest.mark.parametrize("target", [LLAMA, MISTRAL], ids=lambda t: t.engine)
@pytest.mark.parametrize(("cycles", "level"), [(0, "idle"), (3, "mid"), (7, "peak")])
def test_a_fast_forwarded_round_is_the_real_scrape(
    target: DemoTarget, cycles: int, level: str
) -> None:
    fast = FastForwardScrape(target, "demo-host", STARTED)
    fast.serve(cycles)
    fast.level = level
    got, want = by_key(fast.collect(NOW)), by_key(real(target, cycles, level))
    assert got.keys() == want.keys()
    assert {k: v for k, v in got.items() if v != pytest.approx(want[k], rel=1e-12)} == {}
    assert all(s.ts == NOW for s in fast.collect(NOW))
    # The round really moves: tokens are there once something was served, and on vLLM more
    # were generated than completed requests account for (the abandoned streams).
    tokens = [v for (m, _), v in got.items() if m == "gpuwatch_engine_generation_tokens_total"]
    assert (sum(tokens) > 0) == (cycles > 0)
    done = "gpuwatch_engine_completed_generation_tokens_total"
    if target.engine == "vllm" and cycles:
        assert sum(tokens) > sum(v for (m, _), v in got.items() if m == done)


def test_a_restart_starts_the_counters_over_and_a_restarting_engine_fails_its_scrape() -> None:
    fast = FastForwardScrape(LLAMA, "demo-host", STARTED)
    fast.serve(5)
    fast.down = True
    with pytest.raises(CollectError, match="llama-70b.*Connection refused"):
        fast.collect(NOW)
    fast.down = False
    fast.restart(NOW)
    assert fast.cycles == 0
    tokens = [s.value for s in fast.collect(NOW) if s.metric.endswith("generation_tokens_total")]
    assert tokens and sum(tokens) == 0
