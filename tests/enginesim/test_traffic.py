"""The engine simulator's traffic: the truth every rendering is checked against (totals,
exact observations, filters by model, engine and finish reason, restarts)."""

from __future__ import annotations

import pytest

from agent.sim.traffic import ITL_CYCLE, PROFILES, Traffic, cumulative_counts
from tests.enginesim.sim_helpers import T0, Clock, traffic


def test_one_cycle_has_known_totals() -> None:
    t = traffic()
    t.serve(len(PROFILES))
    totals = t.totals()
    assert totals.requests == 12
    assert totals.prompt_tokens == sum(p.prompt_tokens for p in PROFILES) == 16765
    assert totals.cached_prompt_tokens == 6480
    assert totals.computed_prompt_tokens == 16765 - 6480
    assert totals.generation_tokens == 850
    assert totals.preemptions == 3
    assert dict(totals.finished) == {"stop": 6, "length": 3, "abort": 2, "error": 1}
    assert totals.successful == 9


def test_traffic_is_deterministic_and_exact() -> None:
    a, b = traffic(), traffic()
    assert a.serve(30) == b.serve(30)
    ttft = a.observed("ttft")
    assert ttft[:5] == (0.05, 0.25, 0.0008, 1.0, 12.5)  # exact decimals, bounds included
    assert all(len(repr(v)) <= 10 for v in a.observed("e2e"))
    assert len(a.observed("itl")) == sum(max(r.generation_tokens - 1, 0) for r in a.requests())
    assert set(a.observed("itl")) <= set(ITL_CYCLE)
    assert max(a.observed("e2e")) > 146  # above TGI's top duration bucket
    assert max(a.observed("itl")) > 2.5 and min(a.observed("itl")) < 0.002


def test_truth_filters_by_model_engine_and_reason() -> None:
    t = traffic(models=("a", "b"), engines=2)
    t.serve(12, model="a", engine="1")
    t.serve(5, model="b")
    assert t.totals(model="a").requests == 12
    assert t.totals(model="a", engine="0").requests == 0
    assert t.totals(model="b", engine="0").requests == 5
    ok = t.observed("e2e", model="a", reasons=("stop", "length"))
    assert len(ok) == 9
    with pytest.raises(ValueError):
        t.observed("nonsense")
    with pytest.raises(ValueError):
        t.serve(1, model="c")


def test_cumulative_counts_are_inclusive() -> None:
    assert cumulative_counts([0.1, 0.25, 0.3, 9.0], [0.25, 1.0]) == (2, 3, 4)


def test_restart_resets_engines_and_moves_start_time() -> None:
    clock = Clock()
    t = Traffic(clock=clock)
    t.serve(3)
    t.set_gauges(running=4, kv_usage=0.5)
    t.set_gpu(0, energy_mj=123)
    t.restart()  # same clock reading: still strictly later
    assert t.totals().requests == 0
    assert t.started_at > T0
    assert t.snapshot().gauges_of("llama-8b", "0").running == 0
    assert t.snapshot().gpus[0].energy_mj == 123
