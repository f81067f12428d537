"""The ``[cost]`` section: how cost is counted and how advice is sized.

[cost]
useful_tokens = "output"        # or "output+prompt" (computed, not cached, prompt tokens)
shared_gpu_split = "memory"     # a GPU used by several targets: by memory share, or "equal"
mig_split = "slices"            # a MIG instance's share of its GPU: its slices, or "memory"
min_observed = "24h"            # advice states per-day/per-month figures after this much
target_utilization = 0.7        # how busy right-sized pods run, for `breakeven`
mfu_target = 0.4                # model FLOPs utilization deemed good; default: none (no gap $)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from agent.config.reader import Reader


@dataclass(frozen=True, slots=True)
class CostConfig:
    # "output": generation tokens only; "output+prompt": plus computed (not cached) prompt tokens.
    useful_tokens: str = "output"
    # How a GPU used by several targets is split: "memory" (their share of its memory) or "equal".
    shared_gpu_split: str = "memory"
    # A MIG instance's share of its GPU's cost: its GPU instance's slices ("slices") or its
    # memory ("memory") out of the GPU's (agent.cost.mig).
    mig_split: str = "slices"
    # Advice (report and digest recommendations, measured `breakeven`) states per-day and
    # per-month figures only once the GPUs were observed this long (seconds): a few minutes
    # scaled to a month is noise, not a saving.
    min_observed: float = 24 * 3600.0
    # The utilization right-sized pods are planned at (0-1): room for peaks.
    target_utilization: float = 0.7
    # The model FLOPs utilization (0-1) a well-run GPU reaches: the cost of the gap between it
    # and the measured MFU is stated in dollars. None: no target, no gap dollars (a measured
    # MFU alone says nothing about what is attainable for a model and a GPU).
    mfu_target: float | None = None


def parse_cost(r: Reader, top: dict[str, Any]) -> CostConfig:
    t = r.sub(
        top,
        "cost",
        {"useful_tokens", "shared_gpu_split", "mig_split", "min_observed", "target_utilization",
         "mfu_target"},
    )  # fmt: skip
    tokens = r.string(t, "cost.useful_tokens", "output")
    split = r.string(t, "cost.shared_gpu_split", "memory")
    if tokens not in ("output", "output+prompt"):
        r.problem("cost.useful_tokens", f"expected 'output' or 'output+prompt', got {tokens!r}")
    if split not in ("memory", "equal"):
        r.problem("cost.shared_gpu_split", f"expected 'memory' or 'equal', got {split!r}")
    mig_split = r.string(t, "cost.mig_split", "slices")
    if mig_split not in ("slices", "memory"):
        r.problem("cost.mig_split", f"expected 'slices' or 'memory', got {mig_split!r}")
    default = CostConfig()
    minimum = r.duration(t, "cost.min_observed", default.min_observed, allow_zero=True)
    return CostConfig(
        useful_tokens=tokens,
        shared_gpu_split=split,
        mig_split=mig_split,
        min_observed=minimum,
        target_utilization=_or(_ratio(r, t, "cost.target_utilization"), default.target_utilization),
        mfu_target=_ratio(r, t, "cost.mfu_target"),
    )


def _ratio(r: Reader, t: dict[str, Any], key: str) -> float | None:
    """A ratio in (0, 1]; None when absent or wrong. 70 gets "did you mean 0.7?"."""
    value = t.get(key)
    if value is None:
        return None
    if isinstance(value, int | float) and not isinstance(value, bool) and 1 < value <= 100:
        r.problem(key, f"must be greater than 0 and at most 1, got {value:g}; "
                       f"did you mean {value / 100:g}?")  # fmt: skip
        return None
    ratio = r.number(t, key, math.nan, positive=True, maximum=1.0)
    return None if math.isnan(ratio) else ratio


def _or(value: float | None, default: float) -> float:
    return default if value is None else value
