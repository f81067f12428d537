"""The vLLM simulator exports the --enable-mfu-metrics estimates (0.32+): zero before any
request, moving with the work served, and mapped into an MFU below 1 on the demo's GPUs."""

from __future__ import annotations

from datetime import UTC, datetime

from agent.cost.efficiency import WorkWindow, mbu, mfu
from agent.cost.gpu_peaks import peak_for
from agent.sim.render import render
from agent.sim.vllm_spec import EST_PARAMS
from collectors.base import Sample
from collectors.engines.exposition import Exposition
from collectors.engines.registry import detect, read_by_a_mapper
from collectors.engines.rules import Context
from tests.enginesim.sim_helpers import families, traffic


def mapped(text: str) -> dict[str, float]:
    exposition = Exposition.parse(text, keep=read_by_a_mapper)
    engine = detect(exposition)
    assert engine is not None
    context = Context("box", "t", "vllm", "m", datetime.now(UTC))
    samples: list[Sample] = engine.map_samples(exposition, context)
    return {s.metric: s.value for s in samples if not s.labels.get("le")}


def test_only_versions_with_the_flag_have_the_families() -> None:
    t = traffic()
    assert "vllm:estimated_flops_per_gpu_total" in families(render("vllm-0.33", t))
    assert "vllm:estimated_flops_per_gpu_total" not in families(render("vllm-0.10", t))


def test_estimates_start_at_zero_and_follow_the_work() -> None:
    t = traffic()
    before = mapped(render("vllm-0.33", t))
    assert before["gpuwatch_engine_estimated_flops_total"] == 0
    served = t.serve(20)
    after = mapped(render("vllm-0.33", t))
    computed = sum(r.computed_prompt_tokens + r.generation_tokens for r in served)
    assert after["gpuwatch_engine_estimated_flops_total"] == 2 * EST_PARAMS * computed
    assert after["gpuwatch_engine_estimated_read_bytes_total"] > 0
    assert after["gpuwatch_engine_estimated_write_bytes_total"] > 0

    # Twenty requests in a minute on one H100: well under its peak, not nothing.
    work = WorkWindow(
        seconds=60,
        flops_per_gpu=after["gpuwatch_engine_estimated_flops_total"],
        read_bytes_per_gpu=after["gpuwatch_engine_estimated_read_bytes_total"],
        write_bytes_per_gpu=after["gpuwatch_engine_estimated_write_bytes_total"],
        tokens=after["gpuwatch_engine_generation_tokens_total"],
    )
    h100 = peak_for("NVIDIA H100 80GB HBM3")
    ratio, bandwidth = mfu(work, h100), mbu(work, h100)
    assert ratio is not None and 0 < ratio < 1
    assert bandwidth is not None and 0 < bandwidth < 1
