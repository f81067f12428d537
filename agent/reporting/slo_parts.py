"""Per model: how many requests met its latency objective (``[[slo]]``), and what the requests
that missed it cost.

Basis "spans" where the window has requests judged from their own OTLP spans (exact, with the
output tokens delivered within the objective and their cost per million), else "histograms"
(agent.cost.slo_measure): exact at a bucket bound, interpolated with its bounds elsewhere,
several thresholds bounded, never multiplied. The cost of missed requests is the model's cost
by request share, where the attainment is a point figure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from decimal import Decimal

from agent.config.slo import SloConfig, objective_for
from agent.cost.slo_math import met
from agent.cost.slo_measure import Buckets, Measured, measure
from agent.cost.slo_spans import Counts
from agent.reporting.model import ModelRow, SloRow

MILLION = Decimal(1_000_000)


def model_slo(
    model: str, cost: Decimal | None, buckets: Buckets, slo: SloConfig, spans: Counts | None = None
) -> SloRow:
    """The model's attainment of ``slo`` over the window's spans or bucket increases."""
    found = measure(model, buckets, slo, spans)
    result, unmeasured = found.result, ", ".join(found.unmeasured) or None
    thresholds = _spell(slo.thresholds())
    if result is None:
        return SloRow(
            objective=slo.objective, thresholds=thresholds, attainment=None, lower=None,
            upper=None, exact=False, met=None, basis=found.basis, requests=0.0,
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
        basis=found.basis,
        requests=found.requests,
        good_requests=None if value is None else value * found.requests,
        missed_cost_usd=None if value is None or cost is None else _share(cost, 1 - value),
        unmeasured=unmeasured,
        good_tokens=found.good_tokens,
        good_token_cost_per_million_usd=_per_million_good(cost, found),
    )


def with_slos(
    rows: Sequence[ModelRow],
    buckets: Buckets,
    slos: Sequence[SloConfig],
    spans: Counts | None = None,
) -> tuple[ModelRow, ...]:
    """The model rows with their objective's figures (None where no objective applies)."""
    out = []
    for row in rows:
        slo = objective_for(slos, row.model)
        cost = None if row.cost_unknown_reason else row.cost_usd
        out.append(
            row
            if slo is None
            else replace(row, slo=model_slo(row.model, cost, buckets, slo, spans))
        )
    return tuple(out)


def _per_million_good(cost: Decimal | None, found: Measured) -> Decimal | None:
    """The model's whole cost over the tokens delivered within the objective: what each
    million good tokens really cost once the late ones are paid for too."""
    if cost is None or not found.good_tokens:
        return None
    return cost * MILLION / Decimal(repr(found.good_tokens))


def _spell(thresholds: Mapping[str, float]) -> str:
    return ", ".join(f"{kind} <= {seconds:g}s" for kind, seconds in thresholds.items())


def _share(cost: Decimal, fraction: float) -> Decimal:
    return cost * Decimal(repr(round(fraction, 12)))
