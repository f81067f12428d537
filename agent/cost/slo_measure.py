"""A model's attainment of its objective (``[[slo]]``) from its latency histograms' increases
over a window: one threshold's share exact at a bucket bound, interpolated (with bounds)
elsewhere; several thresholds bounded, never multiplied (agent.cost.slo_math).

The rollups keep the TTFT, end-to-end, inter-token and queue-time histograms; a threshold whose
histogram an engine does not export counts as unknown ([0, 1]) where another threshold was
measured, which widens the bounds rather than being left out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from agent.config.slo import SloConfig
from agent.cost.slo_math import Attainment, JointAttainment, attainment, joint

MEASURED = ("ttft", "e2e", "itl", "queue")  # the histograms the rollups keep
Buckets = Mapping[tuple[str, str], Mapping[float, float]]


@dataclass(frozen=True, slots=True)
class Measured:
    """``result`` None: a measured threshold's histogram had no observations (unknown)."""

    result: JointAttainment | None
    requests: float
    unmeasured: tuple[str, ...]  # thresholds no histogram of the model's measures


def measure(model: str, buckets: Buckets, slo: SloConfig) -> Measured:
    thresholds = slo.thresholds()
    # Not kept, or not exported by this model's engine (llama.cpp has no queue histogram).
    unmeasured = tuple(k for k in thresholds if k not in MEASURED or not buckets.get((model, k)))
    parts: list[Attainment] = []
    for kind in (k for k in thresholds if k not in unmeasured):
        found = attainment(buckets[(model, kind)], thresholds[kind])
        if found is None:
            return Measured(None, 0.0, unmeasured)
        parts.append(found)
    if not parts:
        return Measured(None, 0.0, unmeasured)
    count = max(p.count for p in parts)
    parts += [_anywhere(count) for _ in unmeasured]
    return Measured(joint(parts), count, unmeasured)


def _anywhere(count: float) -> Attainment:
    """A threshold no histogram measures: anywhere in [0, 1]."""
    return Attainment(value=0.0, lower=0.0, upper=1.0, exact=False, count=count, good=0.0)
