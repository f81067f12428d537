"""Per model: model FLOPs and memory-bandwidth utilization from the engine's own estimates,
and the dollars of the gap to ``cost.mfu_target`` (agent.cost.efficiency).

A target's estimate counters say what each of its GPUs did; the time is what those GPUs were
observed in the window (the GPU time the cost ledger metered, which is what was paid for), and
the peak is each GPU's by its NVML product name. Which GPUs a target ran on is what the ledger
allocated to it. A model served by several targets (or GPU models) combines them weighted by
GPU-seconds. Unknown stays unknown: a target with no GPU, a GPU whose peak is not in the
table, or an estimate that did not move while tokens did makes the model's figure None.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import replace
from decimal import Decimal

from agent.cost.efficiency import WorkWindow, combined_mbu, combined_mfu, mfu_gap_usd
from agent.cost.gpu_peaks import GpuPeak, peak_for
from agent.cost.summarize import TokenKey, Tokens
from agent.reporting.figures import Figures
from agent.reporting.model import Efficiency, ModelRow
from agent.reporting.queries import GpuKey
from agent.reporting.serving_reads import ESTIMATES

FLOPS, READ, WRITE = ESTIMATES
Part = tuple[WorkWindow, GpuPeak | None]


def model_efficiency(
    f: Figures,
    estimates: Mapping[TokenKey, Mapping[str, float]],
    names: Mapping[GpuKey, str],
    costs: Mapping[str, Decimal],
    target: float | None,
) -> dict[str, Efficiency]:
    """Each model with work estimates: its MFU, MBU and MFU gap in dollars."""
    parts: dict[str, list[Part]] = defaultdict(list)
    gpu_names: dict[str, set[str]] = defaultdict(set)
    for (host, tgt, model), moved in estimates.items():
        gpus = _target_gpus(f, host, tgt)
        if not gpus:  # no GPU known for the target: nothing to divide by
            parts[model].append((WorkWindow(0.0, moved.get(FLOPS)), None))
            continue
        for name, group in _by_name(gpus, names).items():
            gpu_names[model].add(name)
            window = _window(f, group, moved, f.tokens.get((host, tgt, model)))
            parts[model].append((window, peak_for(name)))
    out: dict[str, Efficiency] = {}
    for model, model_parts in parts.items():
        ratio = combined_mfu(model_parts)
        out[model] = Efficiency(
            mfu_ratio=ratio,
            mbu_ratio=combined_mbu(model_parts),
            mfu_target_ratio=target,
            mfu_gap_usd=mfu_gap_usd(costs[model], ratio, target) if model in costs else None,
            basis=_basis(model_parts, sorted(gpu_names[model])),
        )
    return out


def _target_gpus(f: Figures, host: str, target: str) -> list[GpuKey]:
    return sorted(
        (h, g)
        for (h, g, t), days in f.window.allocations.items()
        if h == host and t == target and sum(a.seconds for a in days.values()) > 0
    )


def _by_name(gpus: Sequence[GpuKey], names: Mapping[GpuKey, str]) -> dict[str, list[GpuKey]]:
    out: dict[str, list[GpuKey]] = defaultdict(list)
    for key in gpus:
        out[names.get(key, "")].append(key)
    return out


def _window(
    f: Figures, gpus: Sequence[GpuKey], moved: Mapping[str, float], tokens: Tokens | None
) -> WorkWindow:
    """The GPUs' mean observed seconds: the per-GPU estimate is over that wall time."""
    seconds = [sum(u.observed for u in f.window.usage.get(key, {}).values()) for key in gpus]
    return WorkWindow(
        seconds=sum(seconds) / len(seconds),
        flops_per_gpu=moved.get(FLOPS),
        read_bytes_per_gpu=moved.get(READ),
        write_bytes_per_gpu=moved.get(WRITE),
        tokens=None if tokens is None else tokens.generated + tokens.prompt,
        gpus=len(gpus),
    )


def _basis(parts: Sequence[Part], names: Sequence[str]) -> str | None:
    """What the figure rests on, or why it is unknown."""
    if all(w.flops_per_gpu is None for w, _ in parts):
        return None  # no estimate exported: the renderers say "no FLOPs estimate"
    if any(peak is None for _, peak in parts):
        unknown = [n or "a GPU of unknown model" for n in names if peak_for(n) is None]
        if not unknown:
            return "unknown: no GPU known for a target serving it"
        return "unknown: no peak FLOPs known for " + ", ".join(unknown)
    return "vllm estimated FLOPs vs dense BF16 peak of " + ", ".join(names)


def with_efficiency(
    rows: Sequence[ModelRow],
    f: Figures,
    estimates: Mapping[TokenKey, Mapping[str, float]],
    names: Mapping[GpuKey, str],
    target: float | None,
) -> tuple[ModelRow, ...]:
    """The model rows with their efficiency figures (rows without estimates keep none)."""
    costs = {r.model: r.cost_usd for r in rows if r.cost_unknown_reason is None}
    found = model_efficiency(f, estimates, names, costs, target)
    return tuple(replace(r, efficiency=found[r.model]) if r.model in found else r for r in rows)
