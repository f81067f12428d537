"""A model's attainment of its objective (``[[slo]]``) over a window: from its requests' own
OTLP spans where they were received (exact, with the output tokens of the requests within it),
else from its latency histograms' increases: one threshold's share exact at a bucket bound,
interpolated (with bounds) elsewhere; several thresholds bounded, never multiplied
(agent.cost.slo_math).

The rollups keep the TTFT, end-to-end, inter-token and queue-time histograms; a threshold whose
histogram an engine does not export counts as unknown ([0, 1]) where another threshold was
measured, which widens the bounds rather than being left out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from agent.config.slo import SloConfig
from agent.cost.slo_math import Attainment, JointAttainment, attainment, joint
from agent.cost.slo_spans import Counts, SpanCounts

MEASURED = ("ttft", "e2e", "itl", "queue")  # the histograms the rollups keep
Buckets = Mapping[tuple[str, str], Mapping[float, float]]
SPANS, HISTOGRAMS = "spans", "histograms"


@dataclass(frozen=True, slots=True)
class Measured:
    """``result`` None: a measured threshold's histogram had no observations (unknown).
    ``basis`` "spans": every request judged on its own; the token counts are known only there."""

    result: JointAttainment | None
    requests: float
    unmeasured: tuple[str, ...]  # thresholds no histogram of the model's measures
    basis: str = HISTOGRAMS
    good_tokens: float | None = None
    missed_tokens: float | None = None


def measure(model: str, buckets: Buckets, slo: SloConfig, spans: Counts | None = None) -> Measured:
    """Spans win where the window has any request of ``model`` judged by this very objective."""
    counted = (spans or {}).get((model, slo.key))
    if counted is not None and counted.requests > 0:
        return _from_spans(counted)
    return _from_histograms(model, buckets, slo)


def _from_spans(counted: SpanCounts) -> Measured:
    part = Attainment.counted(counted.met, counted.requests)
    assert part is not None  # requests > 0
    return Measured(
        joint([part]), counted.requests, (), SPANS, counted.met_tokens, counted.missed_tokens
    )


def _from_histograms(model: str, buckets: Buckets, slo: SloConfig) -> Measured:
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
