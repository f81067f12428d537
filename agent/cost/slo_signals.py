"""``gpuwatch_slo_attainment_ratio{model, window, basis, estimate}`` for /metrics: per model
with an objective (``[[slo]]``), the share of this host's requests within it over 1h, 24h, 7d
and 30d, from its requests' own OTLP spans where they were received (basis "spans", exact),
else from the latency histograms' rollups (basis "histograms"; agent.cost.slo_measure).

``estimate`` says what the number is: ``exact`` (every threshold a bucket bound),
``interpolated`` (inside a bucket), or ``lower_bound`` (several thresholds, or one no histogram
measures: the share meeting all of them is only bounded, and the gauge shows the worst case).
A model with no observations in a window has no sample there: unknown, not 0.

``gpuwatch_slo_objective_ratio{model}``: the objective itself (``[[slo]]``'s ``objective``) for
each model the attainment was read for, so a dashboard can draw it beside the attainment and
divide a bad fraction by the error budget (1 - objective) as the burn-rate alerts do. It is
configuration, known whether or not a window had observations.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import Engine

from agent.config.settings import Config
from agent.config.slo import objective_for
from agent.cost.latency import latency_buckets
from agent.cost.slo_measure import measure
from agent.cost.slo_spans import span_counts
from agent.cost.split import Split
from collectors.base import Sample

METRIC = "gpuwatch_slo_attainment_ratio"
OBJECTIVE = "gpuwatch_slo_objective_ratio"
WINDOWS = {"1h": timedelta(hours=1), "24h": timedelta(days=1), "7d": timedelta(days=7),
           "30d": timedelta(days=30)}  # fmt: skip


def attainment_samples(engine: Engine, config: Config, now: datetime) -> list[Sample]:
    if not config.slos:
        return []
    end = now.replace(second=0, microsecond=0)
    out: list[Sample] = []
    objectives: dict[str, float] = {}
    with engine.connect() as conn:
        for name, length in WINDOWS.items():
            split = Split.read(conn, end - length, end)
            buckets = latency_buckets(conn, split, (config.host,))
            spans = span_counts(conn, split, (config.host,))
            for model in sorted({m for m, _ in buckets} | {m for m, _ in spans}):
                slo = objective_for(config.slos, model)
                if slo is not None:
                    objectives[model] = slo.objective
                found = None if slo is None else measure(model, buckets, slo, spans)
                result = None if found is None else found.result
                if found is None or result is None:
                    continue
                value = result.value if result.value is not None else result.lower
                estimate = _estimate(result.value, result.exact)
                labels = {"host": config.host, "model": model, "window": name,
                          "basis": found.basis, "estimate": estimate}  # fmt: skip
                out.append(Sample(metric=METRIC, value=value, labels=labels, ts=now))
    for model, objective in sorted(objectives.items()):
        labels = {"host": config.host, "model": model}
        out.append(Sample(metric=OBJECTIVE, value=objective, labels=labels, ts=now))
    return out


def _estimate(value: float | None, exact: bool) -> str:
    if value is None:
        return "lower_bound"
    return "exact" if exact else "interpolated"
