"""Per model: how many requests met its latency objective (``[[slo]]``), from the engine's
histograms, and what the requests that missed it cost.

Basis "histograms" (agent.cost.slo_measure): exact at a bucket bound, interpolated with its
bounds elsewhere, several thresholds bounded, never multiplied. The cost of missed requests is
the model's cost by request share, where the attainment is a point figure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from decimal import Decimal

from agent.config.slo import SloConfig, objective_for
from agent.cost.slo_math import met
from agent.cost.slo_measure import Buckets, measure
from agent.reporting.model import ModelRow, SloRow


def model_slo(model: str, cost: Decimal | None, buckets: Buckets, slo: SloConfig) -> SloRow:
    """The model's attainment of ``slo`` over the window's bucket increases."""
    found = measure(model, buckets, slo)
    result, unmeasured = found.result, ", ".join(found.unmeasured) or None
    thresholds = _spell(slo.thresholds())
    if result is None:
        return SloRow(
            objective=slo.objective, thresholds=thresholds, attainment=None, lower=None,
            upper=None, exact=False, met=None, basis="histograms", requests=0.0,
            good_requests=None, missed_cost_usd=None, unmeasured=unmeasured,
        )  # fmt: skip
    value = result.value
    return SloRow(
        objective=slo.objective,
        thresholds=thresholds,
        attainment=value,
        lower=result.lower,
        upper=result.upper,
        exact=result.exact,
        met=met(result, slo.objective),
        basis="histograms",
        requests=found.requests,
        good_requests=None if value is None else value * found.requests,
        missed_cost_usd=None if value is None or cost is None else _share(cost, 1 - value),
        unmeasured=unmeasured,
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


def _spell(thresholds: Mapping[str, float]) -> str:
    return ", ".join(f"{kind} <= {seconds:g}s" for kind, seconds in thresholds.items())


def _share(cost: Decimal, fraction: float) -> Decimal:
    return cost * Decimal(repr(round(fraction, 12)))
