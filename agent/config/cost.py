"""The ``[cost]`` section: how cost is counted and how advice is sized.

[cost]
useful_tokens = "output"        # or "output+prompt" (computed, not cached, prompt tokens)
shared_gpu_split = "memory"     # a GPU used by several targets: by memory share, or "equal"
min_observed = "24h"            # advice states per-day/per-month figures after this much
target_utilization = 0.7        # how busy right-sized pods run, for `breakeven`
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agent.config.reader import Reader


@dataclass(frozen=True, slots=True)
class CostConfig:
    # "output": generation tokens only; "output+prompt": plus computed (not cached) prompt tokens.
    useful_tokens: str = "output"
    # How a GPU used by several targets is split: "memory" (their share of its memory) or "equal".
    shared_gpu_split: str = "memory"
    # Advice (report and digest recommendations, measured `breakeven`) states per-day and
    # per-month figures only once the GPUs were observed this long (seconds): a few minutes
    # scaled to a month is noise, not a saving.
    min_observed: float = 24 * 3600.0
    # The utilization right-sized pods are planned at (0-1): room for peaks.
    target_utilization: float = 0.7


def parse_cost(r: Reader, top: dict[str, Any]) -> CostConfig:
    t = r.sub(
        top,
        "cost",
        {"useful_tokens", "shared_gpu_split", "min_observed", "target_utilization"},
    )
    tokens = r.string(t, "cost.useful_tokens", "output")
    split = r.string(t, "cost.shared_gpu_split", "memory")
    if tokens not in ("output", "output+prompt"):
        r.problem("cost.useful_tokens", f"expected 'output' or 'output+prompt', got {tokens!r}")
    if split not in ("memory", "equal"):
        r.problem("cost.shared_gpu_split", f"expected 'memory' or 'equal', got {split!r}")
    default = CostConfig()
    minimum = r.duration(t, "cost.min_observed", default.min_observed, allow_zero=True)
    return CostConfig(
        useful_tokens=tokens,
        shared_gpu_split=split,
        min_observed=minimum,
        target_utilization=_target_utilization(r, t, default.target_utilization),
    )


def _target_utilization(r: Reader, t: dict[str, Any], default: float) -> float:
    """A ratio in (0, 1]; 70 gets "did you mean 0.7?"."""
    key = "cost.target_utilization"
    value = t.get(key)
    if isinstance(value, int | float) and not isinstance(value, bool) and 1 < value <= 100:
        r.problem(key, f"must be greater than 0 and at most 1, got {value:g}; "
                       f"did you mean {value / 100:g}?")  # fmt: skip
        return default
    return r.number(t, key, default, positive=True, maximum=1.0)
