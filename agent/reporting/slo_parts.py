"""Per model: how many requests met its latency objective (``[[slo]]``), from the engine's
histograms, and what the requests that missed it cost.

Basis "histograms": each threshold's attainment is the histogram's share of requests at or
under it, exact where the threshold is a bucket bound and interpolated (with the bounds the
truth lies in) elsewhere (agent.cost.slo_math). Several thresholds are separate histograms, so
the share meeting all of them is only bounded (Fréchet), never a product. TTFT and end-to-end
latency are the histograms the rollups keep; an objective on inter-token latency or queue time
is not measured from histograms yet: that threshold counts as unknown ([0, 1]), which widens
the bounds rather than being left out. The cost of missed requests is the model's cost by
request share, where the attainment is a point figure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from decimal import Decimal

from agent.config.slo import SloConfig, objective_for
from agent.cost.slo_math import Attainment, attainment, joint, met
from agent.reporting.model import ModelRow, SloRow

MEASURED = ("ttft", "e2e")  # the histograms the rollups keep (agent.storage.rolled_up)
Buckets = Mapping[tuple[str, str], Mapping[float, float]]


def model_slo(model: str, cost: Decimal | None, buckets: Buckets, slo: SloConfig) -> SloRow:
    """The model's attainment of ``slo`` over the window's bucket increases."""
    thresholds = slo.thresholds()
    parts: list[Attainment] = []
    unmeasured = []
    for kind, seconds in thresholds.items():
        found = attainment(buckets.get((model, kind), {}), seconds) if kind in MEASURED else None
        if kind not in MEASURED:
            unmeasured.append(kind)
        if found is not None:
            parts.append(found)
    measured = [k for k in thresholds if k in MEASURED]
    if len(parts) < len(measured) or not parts:  # no observations for a measured threshold
        return _unknown(slo, thresholds, unmeasured)
    parts += [_unknown_part(parts[0].count) for _ in unmeasured]
    result = joint(parts)
    count = max(p.count for p in parts)
    value = result.value
    return SloRow(
        objective=slo.objective,
        thresholds=_spell(thresholds),
        attainment=value,
        lower=result.lower,
        upper=result.upper,
        exact=result.exact,
        met=met(result, slo.objective),
        basis="histograms",
        requests=count,
        good_requests=None if value is None else value * count,
        missed_cost_usd=None if value is None or cost is None else _share(cost, 1 - value),
        unmeasured=", ".join(unmeasured) or None,
    )


def with_slos(
    rows: Sequence[ModelRow], buckets: Buckets, slos: Sequence[SloConfig]
) -> tuple[ModelRow, ...]:
    """The model rows with their objective's figures (None where no objective applies)."""
    out = []
    for row in rows:
        slo = objective_for(slos, row.model)
        cost = None if row.cost_unknown_reason else row.cost_usd
        out.append(
            row if slo is None else replace(row, slo=model_slo(row.model, cost, buckets, slo))
        )
    return tuple(out)


def _unknown(slo: SloConfig, thresholds: Mapping[str, float], unmeasured: list[str]) -> SloRow:
    return SloRow(
        objective=slo.objective, thresholds=_spell(thresholds), attainment=None, lower=None,
        upper=None, exact=False, met=None, basis="histograms", requests=0.0,
        good_requests=None, missed_cost_usd=None, unmeasured=", ".join(unmeasured) or None,
    )  # fmt: skip


def _unknown_part(count: float) -> Attainment:
    """A threshold no histogram measures: anywhere in [0, 1]."""
    return Attainment(value=0.0, lower=0.0, upper=1.0, exact=False, count=count, good=0.0)


def _spell(thresholds: Mapping[str, float]) -> str:
    return ", ".join(f"{kind} <= {seconds:g}s" for kind, seconds in thresholds.items())


def _share(cost: Decimal, fraction: float) -> Decimal:
    return cost * Decimal(repr(round(fraction, 12)))
