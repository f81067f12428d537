"""An objective's attainment over a model's histograms (agent.cost.slo_measure): every kind the
rollups keep is measured; a threshold whose histogram the model's engine does not export widens
the bounds to what the others allow, never a guess."""

from __future__ import annotations

from agent.config.slo import SloConfig
from agent.cost.latency import KINDS
from agent.cost.slo_measure import measure
from agent.storage.rolled_up import HISTOGRAM_ROLLUPS

INF = float("inf")
# 100 requests: 90 with every latency under its threshold's bucket bound, 10 over it.
GOOD = {0.05: 90.0, 0.1: 90.0, 1.0: 90.0, INF: 100.0}


def slo(**thresholds: float) -> SloConfig:
    return SloConfig(
        model="m", ttft_seconds=thresholds.get("ttft"), itl_seconds=thresholds.get("itl"),
        e2e_seconds=thresholds.get("e2e"), queue_seconds=thresholds.get("queue"), objective=0.9,
    )  # fmt: skip


def test_the_rollups_keep_every_histogram_an_objective_names() -> None:
    assert set(KINDS) <= HISTOGRAM_ROLLUPS
    assert set(KINDS.values()) == {"ttft", "e2e", "itl", "queue"}


def test_inter_token_and_queue_objectives_are_measured() -> None:
    for kind in ("itl", "queue"):
        found = measure("m", {("m", kind): GOOD}, slo(**{kind: 0.1}))
        assert found.result is not None and found.result.value == 0.9, kind
        assert found.unmeasured == ()


def test_a_histogram_the_engine_does_not_export_widens_the_bounds() -> None:
    # llama.cpp exports no queue histogram: e2e is measured, the queue threshold is [0, 1].
    found = measure("m", {("m", "e2e"): GOOD}, slo(e2e=1.0, queue=0.1))
    assert found.unmeasured == ("queue",)
    assert found.result is not None
    assert (found.result.lower, found.result.upper, found.result.value) == (0.0, 0.9, None)


def test_no_observation_in_a_measured_histogram_is_unknown() -> None:
    empty = {1.0: 0.0, INF: 0.0}
    assert measure("m", {("m", "e2e"): empty}, slo(e2e=1.0)).result is None
