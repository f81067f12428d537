"""Benchmark: how fast is a month's cost per million tokens from the rollups, next to the same
answer from raw samples, and do the two agree?

    python bench/cost.py [--days 30] [--gpus 64] [--models 8] [--step-seconds 300]
                         [--rounds 5] [--raw-rounds 2] [--database-url URL [--measure-only]]

The fleet of bench/fleet.py: ``--gpus`` GPUs in hosts of 8, ``--models`` models (8 on 8 hosts:
one tensor-parallel-8 target per host, alternately vLLM and SGLang), one engine restart per
target, a rate card with an instance price, a mid-window price change and an owned host. Each
host ticks every ``--step-seconds`` (the daemon's 10 s would be 70 M rows for 64 GPUs over 30
days, too many to generate here: the raw baseline grows with the raw density and the answer
from rollups does not, so a coarser step understates the speed-up). The rows are loaded into
the production schema (SQLite in a temporary folder, or ``--database-url``), then each host's
real rollup job fills the minute, hour and day rollups and the cost ledger (timed: the cost a
daemon pays once, incrementally). ``--measure-only`` skips the load and the fill on a database
an earlier run with the same sizes filled.

Measured: A, ``agent.cost.summarize.summarize`` over the window, per model (median of
``--rounds``). Baseline B, in the same run: the same answer from raw samples only, per host the
window's raw points through the pure functions the rollup uses (``gpu_observations``,
``agent.cost.ledger.meter`` at hour buckets, ``agent.storage.series_math.increase``), writing
nothing. Both must agree within 1e-6 relative per model. Targets: A under 1 s, and at least
50 x faster than B.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sqlalchemy import Connection, Engine, func, select  # noqa: E402

from agent.cost.ledger import meter  # noqa: E402
from agent.cost.metering import ENERGY, GPU_INFO, TARGET_MEMORY, UTIL, gpu_observations  # noqa: E402
from agent.cost.ratecard import RateCard  # noqa: E402
from agent.cost.summarize import OUTPUT, summarize  # noqa: E402
from agent.storage import raw  # noqa: E402
from agent.storage.buckets import HOUR, _birth  # noqa: E402
from agent.storage.db import open_database, upgrade_database  # noqa: E402
from agent.storage.rollup import BASELINE_LOOKBACK, TARGET_UP, Rollup  # noqa: E402
from agent.storage.series_math import Point, increase  # noqa: E402
from bench.common import ms, timed, verdict  # noqa: E402
from bench.fleet import T0, TAIL, Fleet, build_fleet, fill_rollups, load, rate_card  # noqa: E402
from migrations.schema import gpu_usage, rollups, samples, series  # noqa: E402

MILLION = Decimal(1_000_000)
RAW_METRICS = (GPU_INFO, UTIL, ENERGY, TARGET_MEMORY, TARGET_UP, OUTPUT)
REL_TOLERANCE = Decimal("1e-6")
SPEEDUP_TARGET = 50.0
A_TARGET_S = 1.0


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
    """A host's series and their points in (start, end] after the last one at or before
    start, from the head and the packed chunks alike (``agent.storage.raw``)."""
    query = select(series.c.id, series.c.metric, series.c.labels).where(
        series.c.host == host, series.c.metric.in_(RAW_METRICS)
    )
    meta = {sid: (metric, json.loads(lj)) for sid, metric, lj in conn.execute(query)}
    ids = list(meta)
    points: dict[int, list[tuple[datetime, float]]] = defaultdict(list)
    for sid, point in raw.last_at_or_before(conn, ids, start, BASELINE_LOOKBACK).items():
        points[sid].append(point)
    for sid, inside in raw.read(conn, ids, start, end).items():
        points[sid].extend(inside)
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


def table_rows(engine: Engine) -> str:
    with engine.connect() as conn:
        counts = [("samples", None, select(func.count()).select_from(samples))] + [
            (t.name, res, select(func.count()).where(t.c.resolution == res))
            for t in (rollups, gpu_usage)
            for res in (60, 3600, 86400)
        ]
        return ", ".join(
            f"{name}{'' if res is None else f' ({res} s)'} {conn.execute(q).scalar() or 0:,}"
            for name, res, q in counts
        )


def fill(engine: Engine, fleet: Fleet, card: RateCard, now: datetime, days: int) -> None:
    t = time.perf_counter()
    rows = load(engine, fleet)
    load_s = time.perf_counter() - t
    print(f"load: {rows:,} raw sample rows in {load_s:.1f} s")
    fill_s, runs = fill_rollups(engine, fleet, card, now, days)
    per_day = fill_s / (len(fleet.hosts) * days)
    print(f"rollup fill: {runs} rollup runs in {fill_s:.1f} s ({per_day:.2f} s per host-day)")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--gpus", type=int, default=64)
    parser.add_argument("--models", type=int, default=8)
    parser.add_argument("--step-seconds", type=float, default=300.0, help="between raw ticks")
    parser.add_argument("--rounds", type=int, default=5, help="timed summarize calls (A)")
    parser.add_argument("--raw-rounds", type=int, default=2, help="timed raw answers (B)")
    parser.add_argument("--database-url", help="default: SQLite in a temporary folder")
    parser.add_argument(
        "--measure-only", action="store_true", help="skip load and fill (see above)"
    )
    args = parser.parse_args()
    if args.measure_only and not args.database_url:
        parser.error("--measure-only needs --database-url")
    if args.step_seconds > TAIL.total_seconds() / 2:
        parser.error(f"--step-seconds at most {TAIL.total_seconds() / 2:g}: the window's last "
                     "hour is complete only with ticks after it")  # fmt: skip
    fleet = build_fleet(args.days, args.gpus, args.models, args.step_seconds)
    card = rate_card(fleet, args.days)
    start, end = T0, T0 + timedelta(days=args.days)
    with tempfile.TemporaryDirectory() as tmp:
        url = args.database_url or f"sqlite:///{Path(tmp) / 'bench.db'}"
        kind = "SQLite" if url.startswith("sqlite") else "PostgreSQL"
        upgrade_database(url)
        engine = open_database(url)
        print(
            f"fleet: {len(fleet.hosts)} hosts, {len(fleet.gpus)} GPUs, {len(fleet.targets)} "
            f"models; {args.days} days of ticks every {args.step_seconds:g} s; {kind}"
        )
        if not args.measure_only:
            fill(engine, fleet, card, end + TAIL, args.days)
        print(f"rows: {table_rows(engine)}")
        max_gap = Rollup(engine, "", fleet.step).max_gap
        a_answer = from_rollups(engine, start, end)
        a_times = timed(lambda _: summarize(engine, start, end), args.rounds)
        b_times: list[float] = []
        b_answer: dict[str, ModelCost] = {}
        for _ in range(args.raw_rounds):
            t = time.perf_counter()
            b_answer = from_raw(engine, fleet, card, start, end, max_gap)
            b_times.append(time.perf_counter() - t)
        engine.dispose()
    worst = compare(a_answer, b_answer)
    a_median, b_median = statistics.median(a_times), statistics.median(b_times)
    print(f"A: summarize from rollups ({kind})       {ms(a_times)}")
    print(f"baseline B: from raw samples, same functions  "
          f"{', '.join(f'{v:.2f} s' for v in b_times)}")  # fmt: skip
    print(f"check: A and B agree within {REL_TOLERANCE} per model -> {float(worst):.1e}, "
          f"{'OK' if worst <= REL_TOLERANCE else 'MISMATCH'}")  # fmt: skip
    speedup = b_median / a_median
    print(f"target: A < {A_TARGET_S:g} s -> {a_median:.3f} s, {verdict(a_median < A_TARGET_S)}")
    print(f"target: B / A >= {SPEEDUP_TARGET:g} x -> {speedup:.0f} x, "
          f"{'OK' if speedup >= SPEEDUP_TARGET else 'UNDER TARGET'}")  # fmt: skip
    return 0 if worst <= REL_TOLERANCE else 1


if __name__ == "__main__":
    sys.exit(main())
