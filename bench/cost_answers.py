"""bench/cost.py's two answers to a month's cost per million tokens: A from the rollups
(``summarize``), B from the raw samples through the pure functions the rollup uses; their
comparison, and the table sizes and minute rows the diagnostics need."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from sqlalchemy import Connection, Engine, and_, delete, func, select

from agent.cost.ledger import meter
from agent.cost.metering import ENERGY, GPU_INFO, TARGET_MEMORY, UTIL, gpu_observations
from agent.cost.ratecard import RateCard
from agent.cost.summarize import OUTPUT, summarize
from agent.storage.rollup import BASELINE_LOOKBACK, HOUR, TARGET_UP, _birth
from agent.storage.series_math import Point, increase
from bench.cost_fleet import Fleet
from migrations.schema import gpu_allocations, gpu_usage, rollups, samples, series

MILLION = Decimal(1_000_000)
RAW_METRICS = (GPU_INFO, UTIL, ENERGY, TARGET_MEMORY, TARGET_UP, OUTPUT)


# -- the answers ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ModelCost:
    cost_usd: Decimal
    tokens: float
    observed_seconds: float = 0.0

    @property
    def per_million(self) -> Decimal | None:
        # As agent.cost.summarize.Line.usd_per_million_tokens.
        if self.tokens <= 0:
            return None
        return self.cost_usd / Decimal(repr(self.tokens)) * MILLION


def from_rollups(engine: Engine, start: datetime, end: datetime) -> dict[str, ModelCost]:
    summary = summarize(engine, start, end)
    out = {m.name: ModelCost(m.cost_usd, m.useful_tokens) for m in summary.models}
    out["(fleet)"] = ModelCost(summary.fleet.cost_usd, summary.fleet.useful_tokens,
                               summary.gpu_seconds)  # fmt: skip
    return out


def from_raw(
    engine: Engine, fleet: Fleet, card: RateCard, start: datetime, end: datetime, max_gap: float
) -> dict[str, ModelCost]:
    """What summarize would have to do without rollups: raw samples through the pure functions."""
    aligned = all(t.timestamp() % HOUR == 0 for t in (start, end))
    assert aligned, "hour buckets need a window on whole hours"
    target_cost: dict[tuple[str, str], Decimal] = defaultdict(Decimal)
    tokens: dict[tuple[str, str, str], float] = defaultdict(float)
    fleet_cost, observed = Decimal(0), 0.0
    with engine.connect() as conn:
        for host in fleet.hosts:
            meta, points = raw_points(conn, host, start, end + timedelta(seconds=max_gap))
            gpus = gpu_observations(meta, points)
            count = len(gpus)
            for (uuid, index), observations in gpus.items():

                def price_at(
                    at: datetime,
                    host: str = host,
                    uuid: str = uuid,
                    index: str = index,
                    n: int = count,
                ) -> Any:
                    return card.price(host, uuid, index, n, at)

                for bucket, usage in meter(observations, HOUR, max_gap, price_at).items():
                    if not start <= bucket < end:
                        continue
                    fleet_cost += usage.cost_usd or Decimal(0)
                    observed += usage.observed_seconds
                    for target, a in usage.allocations.items():
                        target_cost[(host, target)] += a.cost_usd or Decimal(0)
            scrapes = {
                labels.get("target", ""): [ts for ts, up in points.get(sid, []) if up]
                for sid, (metric, labels) in meta.items()
                if metric == TARGET_UP
            }
            for sid, (metric, labels) in meta.items():
                history = points.get(sid)
                if metric != OUTPUT or not history:
                    continue
                born = None
                if history[0][0] > start:  # the rollup's rule for a counter's first point
                    born = _birth(history[0][0], scrapes.get(labels["target"], []), max_gap)
                if born is not None:
                    history = [born, *history]
                inc = increase([Point(ts, v) for ts, v in history], start, end)
                tokens[(host, labels["target"], labels["model"])] += inc or 0.0
    return model_costs(target_cost, tokens, fleet_cost, observed)


def raw_points(
    conn: Connection, host: str, start: datetime, end: datetime
) -> tuple[dict[int, tuple[str, dict[str, str]]], dict[int, list[tuple[datetime, float]]]]:
    """A host's series and their points in (start, end] after the last one at or before start."""
    query = select(series.c.id, series.c.metric, series.c.labels).where(
        series.c.host == host, series.c.metric.in_(RAW_METRICS)
    )
    meta = {sid: (metric, json.loads(lj)) for sid, metric, lj in conn.execute(query)}
    ids = list(meta)
    last = (
        select(samples.c.series_id, func.max(samples.c.ts).label("ts"))
        .where(
            samples.c.series_id.in_(ids),
            samples.c.ts <= start,
            samples.c.ts > start - BASELINE_LOOKBACK,
        )
        .group_by(samples.c.series_id)
        .subquery()
    )
    baseline = select(samples.c.series_id, samples.c.ts, samples.c.value).join(
        last, and_(samples.c.series_id == last.c.series_id, samples.c.ts == last.c.ts)
    )
    inside = (
        select(samples.c.series_id, samples.c.ts, samples.c.value)
        .where(samples.c.series_id.in_(ids), samples.c.ts > start, samples.c.ts <= end)
        .order_by(samples.c.ts)
    )
    points: dict[int, list[tuple[datetime, float]]] = defaultdict(list)
    for q in (baseline, inside):
        for sid, ts, value in conn.execute(q):
            points[sid].append((ts, value))
    return meta, points


def model_costs(
    target_cost: Mapping[tuple[str, str], Decimal],
    tokens: Mapping[tuple[str, str, str], float],
    fleet_cost: Decimal,
    observed: float,
) -> dict[str, ModelCost]:
    """A target's cost shared among its models by useful tokens, as agent.cost.summarize does."""
    cost: dict[str, Decimal] = defaultdict(Decimal)
    produced: dict[str, float] = defaultdict(float)
    by_target: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)
    for (host, target, model), n in tokens.items():
        by_target[(host, target)][model] = n
        produced[model] += n
    for key, amount in target_cost.items():
        models = by_target.get(key) or {key[1]: 0.0}
        total = sum(models.values())
        for model, n in models.items():
            share = Decimal(repr(n / total)) if total else Decimal(1) / len(models)
            cost[model] += amount * share
    out = {m: ModelCost(cost[m], produced[m]) for m in sorted(set(cost) | set(produced))}
    out["(fleet)"] = ModelCost(fleet_cost, sum(produced.values()), observed)
    return out


def compare(a: Mapping[str, ModelCost], b: Mapping[str, ModelCost]) -> Decimal:
    """Prints both answers side by side; returns the largest relative difference."""
    worst = Decimal(0)
    print(f"{'model':44} {'from rollups':>14} {'from raw':>14}  rel. diff   (USD / M tokens)")
    for name in sorted(set(a) | set(b), key=lambda n: (n.startswith("("), n)):
        pa, pb = a[name].per_million if name in a else None, b[name].per_million
        if pa is None or pb is None:
            diff = Decimal(0) if pa == pb else Decimal(1)
        else:
            diff = abs(pa - pb) / abs(pb)
        worst = max(worst, diff)
        print(f"{name:44} {_usd(pa):>14} {_usd(pb):>14}  {float(diff):.2e}")
    fa, fb = a["(fleet)"], b["(fleet)"]
    print(f"  fleet cost ${fa.cost_usd:,.2f} vs ${fb.cost_usd:,.2f}; tokens {fa.tokens:,.0f} vs "
          f"{fb.tokens:,.0f}; metered GPU-seconds {fa.observed_seconds:,.0f} vs "
          f"{fb.observed_seconds:,.0f}")  # fmt: skip
    return worst


def _usd(value: Decimal | None) -> str:
    return "-" if value is None else f"{value:.6f}"


def table_rows(engine: Engine) -> dict[str, int]:
    with engine.connect() as conn:
        return {
            f"{t.name}{'' if r is None else f' ({r} s)'}": conn.execute(q).scalar() or 0
            for t, r, q in (
                (samples, None, select(func.count()).select_from(samples)),
                *(
                    (t, res, select(func.count()).where(t.c.resolution == res))
                    for t in (rollups, gpu_usage, gpu_allocations)
                    for res in (60, 3600)
                ),
            )
        }


def drop_minute_rows(engine: Engine) -> None:
    """Every minute row: the window is whole hours, so summarize must answer the same."""
    with engine.begin() as conn:
        for table in (rollups, gpu_usage, gpu_allocations):
            conn.execute(delete(table).where(table.c.resolution == 60))
