"""Benchmark: a month's cost per million tokens for a fleet, from the rollups and from raw samples.

    python bench/cost.py [--days 30] [--gpus 64] [--models 8] [--step-seconds 60]
                         [--rounds 5] [--raw-rounds 2] [--database-url URL]

The fleet: 8 GPUs per host (64 GPUs: 8 hosts). The models' serving targets go round-robin over
the hosts and a host's GPUs are split among its targets; 8 models on 8 hosts is one
tensor-parallel-8 target per host, alternately vLLM and SGLang. Each host's daemon ticks every
``--step-seconds`` (default 60 s, not the daemon's 10 s: 30 days of 10 s ticks would be 70 M
rows, too many to generate on the 2-core development machine), at its own offset into the minute
plus up to 0.25 s of jitter. Each tick stores its collector runs (nvml, one per target) and,
with the labels production writes: per GPU gpuwatch_gpu_info, gpuwatch_gpu_utilization_ratio (a
daily wave plus noise), the cumulative gpuwatch_gpu_energy_joules_total and
gpuwatch_target_gpu_memory_bytes of its target; per target gpuwatch_target_up and
gpuwatch_engine_generation_tokens_total, with one engine restart per target (a failed scrape, no
process on its GPUs for that tick, then the counter back from 0). No ``_created`` series: resets
are found by the counter's decrease. A real host also stores about ten other rows per GPU and
tick (power, clocks, memory, ...): the rollup fill measured here rolls up only these series.
Rate card: $2.49 per GPU-hour, with one host at an instance price, one with a mid-month price
change and one owned (purchase amortised over 36 months plus energy at $0.12/kWh).

Rows are bulk-inserted (executemany of ``insert(samples)``, series rows as production writes
them) into the production schema; then each host's real ``Rollup`` job fills the minute and hour
rollups and the cost ledger, a day per run, as a daemon catching up would (settle time as
configured by the daemon; raw retention set beyond the window so that the raw samples stay for
the baseline). That fill is timed: it is the cost a daemon pays once, incrementally.

Measured: A, ``agent.cost.summarize`` over the window, per model; against the baseline B, the
same answer from raw samples only, measured in the same run: per host, load the window's raw
points and run the pure functions the rollup uses (``_gpu_observations``, ``agent.ledger.meter``
at hour buckets, ``agent.series_math.increase``), writing nothing. Both must agree within 1e-6
relative per model. Targets: A at least 50 x faster than B, and A under 1 s.

Diagnostics, printed after the verdicts: what the daemon's minute job spends on its cost signals
(``agent.cost_metrics.cost_samples``: summarize over 1h, 24h, 7d, 30d and the month), and A and
that job again once every minute row is deleted (the window is whole hours, so the answer must
not change): what they would cost if summarize did not read minute rows its hour rows cover.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sqlalchemy import Connection, Engine, and_, delete, func, insert, select  # noqa: E402

from agent.config import Config  # noqa: E402
from agent.cost import OUTPUT, summarize  # noqa: E402
from agent.cost_metrics import cost_samples  # noqa: E402
from agent.db import open_database, upgrade_database  # noqa: E402
from agent.ledger import meter  # noqa: E402
from agent.ratecard import Rate, RateCard  # noqa: E402
from agent.rollup import (  # noqa: E402
    BASELINE_LOOKBACK,
    ENERGY,
    GPU_INFO,
    HOUR,
    SETTLE_SECONDS,
    TARGET_MEMORY,
    TARGET_UP,
    UTIL,
    Rollup,
    _birth,
    _gpu_observations,
)
from agent.series_math import Point, increase  # noqa: E402
from agent.store import labels_json  # noqa: E402
from bench.timing import ms, timed  # noqa: E402
from migrations.schema import (  # noqa: E402
    collector_runs,
    gpu_allocations,
    gpu_usage,
    rollups,
    samples,
    series,
)

T0 = datetime(2026, 10, 31, tzinfo=UTC)  # 30 days from here end on 2026-11-30
GPUS_PER_HOST = 8
TAIL = timedelta(minutes=10)  # ticks past the window's end, so its last hour is complete
MILLION = Decimal(1_000_000)
GIB = 1 << 30
MODELS = (
    "meta-llama/Llama-3.1-70B-Instruct",
    "Qwen/Qwen2.5-72B-Instruct",
    "mistralai/Mixtral-8x22B-Instruct-v0.1",
    "deepseek-ai/DeepSeek-R1-Distill-Llama-70B",
    "meta-llama/Llama-3.3-70B-Instruct",
    "Qwen/Qwen2.5-Coder-32B-Instruct",
    "google/gemma-2-27b-it",
    "mistralai/Mistral-Large-Instruct-2411",
)
RAW_METRICS = (GPU_INFO, UTIL, ENERGY, TARGET_MEMORY, TARGET_UP, OUTPUT)
REL_TOLERANCE = Decimal("1e-6")
SPEEDUP_TARGET = 50.0
A_TARGET_S = 1.0


# -- the fleet ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Gpu:
    host: str
    index: int
    uuid: str
    target: str | None  # the target serving on it, None: idle (billed, unallocated)
    phase: float  # of its daily utilisation wave


@dataclass(frozen=True, slots=True)
class Target:
    name: str
    host: str
    engine: str
    model: str
    gpus: tuple[int, ...]  # indices on its host
    tokens_per_busy_second: float  # per GPU
    restart_tick: int  # a failed scrape at this tick, then the counter from 0


@dataclass(frozen=True, slots=True)
class Fleet:
    hosts: tuple[str, ...]
    gpus: tuple[Gpu, ...]
    targets: tuple[Target, ...]
    ticks: int
    step: float
    histograms: bool = False  # also latency histograms and GPU memory (what a report reads)

    def host_gpus(self, host: str) -> list[Gpu]:
        return [g for g in self.gpus if g.host == host]

    def host_targets(self, host: str) -> list[Target]:
        return [t for t in self.targets if t.host == host]

    def offset(self, host_number: int) -> float:
        """Seconds into the minute at which this host's daemon ticks."""
        return (3.0 + 7.3 * host_number) % max(self.step - 1.0, 1.0)


def build_fleet(
    days: int, gpus: int, models: int, step: float, *, histograms: bool = False
) -> Fleet:
    rng = random.Random(20261130)
    host_count = math.ceil(gpus / GPUS_PER_HOST)
    hosts = tuple(f"gpu-node-{h + 1:02d}" for h in range(host_count))
    ticks = int((days * 86400 + TAIL.total_seconds()) // step)
    placed: dict[str, list[int]] = defaultdict(list)  # host -> model numbers
    for m in range(models):
        placed[hosts[m % host_count]].append(m)
    gpu_list: list[Gpu] = []
    targets: list[Target] = []
    for h, host in enumerate(hosts):
        count = min(GPUS_PER_HOST, gpus - h * GPUS_PER_HOST)
        names = [f"{'vllm' if m % 2 == 0 else 'sglang'}-{m}" for m in placed[host]]
        for i in range(count):
            target = names[i % len(names)] if names else None
            uuid = f"GPU-{h:04x}{i:04x}-5a1e-4c0d-8e3b-{rng.getrandbits(48):012x}"
            gpu_list.append(Gpu(host, i, uuid, target, rng.uniform(0, 2 * math.pi)))
        for j, m in enumerate(placed[host]):
            own = tuple(i for i in range(count) if i % len(names) == j)
            targets.append(
                Target(
                    names[j], host, "vllm" if m % 2 == 0 else "sglang",
                    MODELS[m] if m < len(MODELS) else f"org/model-{m}", own,
                    rng.uniform(300.0, 900.0), rng.randrange(ticks // 4, 3 * ticks // 4),
                )
            )  # fmt: skip
    return Fleet(hosts, tuple(gpu_list), tuple(targets), ticks, step, histograms)


def rate_card(fleet: Fleet, days: int) -> RateCard:
    hosts = fleet.hosts
    rates = [Rate(usd_per_hour=Decimal("2.49"))]
    if len(hosts) > 1:  # Lambda-style: the whole 8-GPU instance per hour
        rates.append(Rate(host=hosts[1], usd_per_hour_instance=Decimal("23.92")))
    if len(hosts) > 2:  # a price change mid-window
        change = T0 + timedelta(days=days / 2, hours=5)
        rates.append(Rate(host=hosts[2], usd_per_hour=Decimal("2.99"), valid_to=change))
        rates.append(Rate(host=hosts[2], usd_per_hour=Decimal("2.19"), valid_from=change))
    if len(hosts) > 3:  # owned: amortised purchase plus energy
        rates.append(
            Rate(host=hosts[3], purchase_usd=Decimal("30000"), amortize_months=36,
                 usd_per_kwh=Decimal("0.12"))
        )  # fmt: skip
    return RateCard(tuple(rates))


# -- the raw samples --------------------------------------------------------------------------


@dataclass
class HostState:
    """One host's series ids and the running values of its counters."""

    gpus: list[Gpu]
    targets: list[Target]
    info: dict[int, int] = field(default_factory=dict)  # gpu index -> series id
    util: dict[int, int] = field(default_factory=dict)
    energy: dict[int, int] = field(default_factory=dict)
    memory: dict[int, int] = field(default_factory=dict)
    up: dict[str, int] = field(default_factory=dict)  # target -> series id
    tokens: dict[str, int] = field(default_factory=dict)
    joules: dict[int, float] = field(default_factory=dict)
    counted: dict[str, float] = field(default_factory=dict)
    memory_bytes: dict[int, float] = field(default_factory=dict)
    # --histograms: per target and metric, the bucket series ids (by le) and their counts
    buckets: dict[tuple[str, str], list[tuple[int, float]]] = field(default_factory=dict)
    bucket_counts: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    vram: dict[int, tuple[int, int]] = field(default_factory=dict)  # used, total series ids
    rng: random.Random = field(default_factory=random.Random)
    previous_ts: datetime | None = None


def create_series(conn: Connection, fleet: Fleet) -> dict[str, HostState]:
    """The series rows every daemon would create, with production's labels and collectors."""
    rows: list[dict[str, str]] = []
    for host in fleet.hosts:
        for g in fleet.host_gpus(host):
            gpu = {"host": host, "gpu_uuid": g.uuid, "gpu_index": str(g.index)}
            info = {"gpu_name": "NVIDIA H100 80GB HBM3", "driver_version": "550.90.07",
                    "mig_mode": "disabled"}  # fmt: skip
            rows.append(_series_row("nvml", GPU_INFO, {**gpu, **info}))
            rows.append(_series_row("nvml", UTIL, gpu))
            rows.append(_series_row("nvml", ENERGY, gpu))
            if g.target is not None:
                rows.append(_series_row("gpuwatch", TARGET_MEMORY, {**gpu, "target": g.target}))
        for t in fleet.host_targets(host):
            rows.append(_series_row("gpuwatch", TARGET_UP, {"host": host, "target": t.name}))
            engine = {"host": host, "target": t.name, "engine": t.engine, "model": t.model}
            rows.append(_series_row(f"target/{t.name}", OUTPUT, engine))
            if fleet.histograms:
                rows += _histogram_series(t.name, engine)
        if fleet.histograms:
            for g in fleet.host_gpus(host):
                gpu = {"host": host, "gpu_uuid": g.uuid, "gpu_index": str(g.index)}
                rows += [_series_row("nvml", m, gpu) for m in (VRAM_USED, VRAM_TOTAL)]
    conn.execute(insert(series), rows)
    by_labels: dict[tuple[str, str | None, str | None, str | None], int] = {}
    les: dict[tuple[str, str, str], list[tuple[int, float]]] = defaultdict(list)
    for sid, metric, lj in conn.execute(select(series.c.id, series.c.metric, series.c.labels)):
        labels = json.loads(lj)
        if "le" in labels:
            les[(labels["host"], labels["target"], metric)].append((sid, float(labels["le"])))
            continue
        key = (metric, labels.get("host"), labels.get("gpu_index"), labels.get("target"))
        by_labels[key] = sid
    states: dict[str, HostState] = {}
    for h, host in enumerate(fleet.hosts):
        s = states[host] = HostState(fleet.host_gpus(host), fleet.host_targets(host))
        s.rng = random.Random(h)
        for g in s.gpus:
            i = str(g.index)
            s.info[g.index] = by_labels[(GPU_INFO, host, i, None)]
            s.util[g.index] = by_labels[(UTIL, host, i, None)]
            s.energy[g.index] = by_labels[(ENERGY, host, i, None)]
            if g.target is not None:
                s.memory[g.index] = by_labels[(TARGET_MEMORY, host, i, g.target)]
            s.joules[g.index] = s.rng.uniform(1e9, 5e9)  # the counter since the driver loaded
            s.memory_bytes[g.index] = 72 * GIB + s.rng.randrange(0, 512) * (1 << 20)
        for t in s.targets:
            s.up[t.name] = by_labels[(TARGET_UP, host, None, t.name)]
            s.tokens[t.name] = by_labels[(OUTPUT, host, None, t.name)]
            s.counted[t.name] = float(s.rng.randrange(10**6, 10**9))  # served before the window
            for metric in HISTOGRAMS:
                ordered = sorted(les[(host, t.name, metric)], key=lambda pair: pair[1])
                s.buckets[(t.name, metric)] = ordered
                s.bucket_counts[(t.name, metric)] = [0.0] * len(ordered)
        if fleet.histograms:
            for g in s.gpus:
                i = str(g.index)
                s.vram[g.index] = (by_labels[(VRAM_USED, host, i, None)],
                                   by_labels[(VRAM_TOTAL, host, i, None)])  # fmt: skip
    return states


# --histograms: vLLM-like bucket bounds, and where a minute's requests fall (cumulative shares)
HISTOGRAMS = {
    "gpuwatch_engine_ttft_seconds_bucket": (
        (0.05, 0.02), (0.1, 0.1), (0.25, 0.45), (0.5, 0.75), (1.0, 0.9), (2.5, 0.97),
        (5.0, 0.99), (10.0, 0.998), (math.inf, 1.0),
    ),
    "gpuwatch_engine_e2e_latency_seconds_bucket": (
        (1.0, 0.05), (2.5, 0.2), (5.0, 0.5), (10.0, 0.8), (20.0, 0.93), (30.0, 0.98),
        (60.0, 0.995), (120.0, 0.999), (math.inf, 1.0),
    ),
}  # fmt: skip
VRAM_USED = "gpuwatch_gpu_memory_used_bytes"
VRAM_TOTAL = "gpuwatch_gpu_memory_total_bytes"
TOKENS_PER_REQUEST = 400.0


def _histogram_series(target: str, engine: Mapping[str, str]) -> list[dict[str, str]]:
    rows = []
    for metric, bounds in HISTOGRAMS.items():
        for le, _ in bounds:
            labels = {**engine, "le": "+Inf" if le == math.inf else f"{le:g}"}
            rows.append(_series_row(f"target/{target}", metric, labels))
    return rows


def _histogram_rows(
    state: HostState, t: Target, ts: datetime, tokens: float
) -> Iterator[dict[str, Any]]:
    """The target's histogram buckets after serving ``tokens`` more (cumulative counts)."""
    requests = float(int(tokens / TOKENS_PER_REQUEST))
    for metric, bounds in HISTOGRAMS.items():
        counts = state.bucket_counts[(t.name, metric)]
        for j, ((sid, _), (_, share)) in enumerate(
            zip(state.buckets[(t.name, metric)], bounds, strict=True)
        ):
            counts[j] += float(int(requests * share))
            yield {"series_id": sid, "ts": ts, "value": counts[j]}


def _series_row(collector: str, metric: str, labels: Mapping[str, str]) -> dict[str, str]:
    host = labels["host"]
    return {"host": host, "collector": collector, "metric": metric, "labels": labels_json(labels)}


def sample_rows(
    fleet: Fleet, h: int, state: HostState, first: int, last: int, runs: list[dict[str, Any]]
) -> Iterator[dict[str, Any]]:
    """One host's rows for ticks first..last-1, as its daemon would have stored them; the
    collector runs of those ticks go to ``runs``."""
    offset = fleet.offset(h)
    rng = state.rng
    host = fleet.hosts[h]
    for k in range(first, last):
        ts = T0 + timedelta(seconds=offset + k * fleet.step + rng.randrange(250_000) / 1e6)
        dt = fleet.step if state.previous_ts is None else (ts - state.previous_ts).total_seconds()
        state.previous_ts = ts
        day = (ts - T0).total_seconds() / 86400 * 2 * math.pi
        util: dict[int, float] = {}
        for g in state.gpus:
            if g.target is None:
                u = 0.0
            else:
                wave = 0.55 + 0.3 * math.sin(day + g.phase) + rng.uniform(-0.08, 0.08)
                u = round(min(1.0, max(0.0, wave)), 2)  # NVML reports whole percent
            util[g.index] = u
            state.joules[g.index] += (70.0 + 630.0 * u) * dt
            yield {"series_id": state.info[g.index], "ts": ts, "value": 1.0}
            yield {"series_id": state.util[g.index], "ts": ts, "value": u}
            yield {"series_id": state.energy[g.index], "ts": ts,
                   "value": round(state.joules[g.index], 3)}  # fmt: skip
            if fleet.histograms:
                used, total = state.vram[g.index]
                in_use = state.memory_bytes[g.index] if g.target else 0.5 * GIB
                yield {"series_id": used, "ts": ts, "value": in_use}
                yield {"series_id": total, "ts": ts, "value": 80.0 * GIB}
        runs.append(_run_row(host, "nvml", ts, None, 13 * len(state.gpus)))
        for t in state.targets:
            restarting = k == t.restart_tick
            error = "connection refused" if restarting else None
            runs.append(_run_row(host, f"target/{t.name}", ts, error, 0 if restarting else 120))
            yield {"series_id": state.up[t.name], "ts": ts, "value": 0.0 if restarting else 1.0}
            busy = sum(util[i] for i in t.gpus) * dt
            if restarting:
                state.counted[t.name] = 0.0  # the engine is down; it comes back from 0
                for key in state.bucket_counts:
                    if key[0] == t.name:
                        state.bucket_counts[key] = [0.0] * len(state.bucket_counts[key])
                continue
            produced = float(int(busy * t.tokens_per_busy_second))
            state.counted[t.name] += produced
            yield {"series_id": state.tokens[t.name], "ts": ts, "value": state.counted[t.name]}
            if fleet.histograms:
                yield from _histogram_rows(state, t, ts, produced)
            for i in t.gpus:
                yield {"series_id": state.memory[i], "ts": ts, "value": state.memory_bytes[i]}


def _run_row(host: str, collector: str, ts: datetime, error: str | None, n: int) -> dict[str, Any]:
    return {"host": host, "collector": collector, "ts": ts, "success": int(error is None),
            "duration_seconds": 0.004, "samples": n, "error": error}  # fmt: skip


def load(engine: Engine, fleet: Fleet) -> int:
    """Every host's samples, a day of ticks per transaction, in time order; returns rows."""
    with engine.begin() as conn:
        states = create_series(conn, fleet)
    per_day = int(86400 // fleet.step)
    rows = 0
    for first in range(0, fleet.ticks, per_day):
        last = min(first + per_day, fleet.ticks)
        with engine.begin() as conn:
            for h, host in enumerate(fleet.hosts):
                runs: list[dict[str, Any]] = []
                batch = list(sample_rows(fleet, h, states[host], first, last, runs))
                conn.execute(insert(samples), batch)
                conn.execute(insert(collector_runs), runs)
                rows += len(batch)
    return rows


# -- rollups --------------------------------------------------------------------------------


def fill_rollups(
    engine: Engine, fleet: Fleet, card: RateCard, now: datetime, days: int
) -> tuple[float, int]:
    """Each host's Rollup job until caught up; (seconds, runs)."""
    runs = 0
    start = time.perf_counter()
    for host in fleet.hosts:
        job = Rollup(
            engine, host, card, fleet.step, raw_retention=timedelta(days=days + 2),
            settle=timedelta(seconds=SETTLE_SECONDS),
        )  # fmt: skip
        while job.run(now).minutes:
            runs += 1
    return time.perf_counter() - start, runs


# -- the answers ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ModelCost:
    cost_usd: Decimal
    tokens: float
    observed_seconds: float = 0.0

    @property
    def per_million(self) -> Decimal | None:
        # As agent.cost.Line.usd_per_million_tokens.
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
            gpus = _gpu_observations(meta, points)
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
    """A target's cost shared among its models by useful tokens, as agent.cost does."""
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


# -- main -----------------------------------------------------------------------------------


def seconds(values: Sequence[float]) -> str:
    return ", ".join(f"{v:.2f} s" for v in values)


def once(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def fill(engine: Engine, fleet: Fleet, card: RateCard, now: datetime, days: int) -> None:
    t = time.perf_counter()
    rows = load(engine, fleet)
    load_s = time.perf_counter() - t
    print(f"load: {rows:,} raw sample rows in {load_s:.1f} s ({rows / load_s:,.0f} rows/s)")
    fill_s, runs = fill_rollups(engine, fleet, card, now, days)
    host_days = len(fleet.hosts) * days
    print(
        f"rollup fill: {runs} Rollup.run calls in {fill_s:.1f} s "
        f"({fill_s / host_days:.2f} s per host-day; a daemon pays it incrementally)"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--gpus", type=int, default=64)
    parser.add_argument("--models", type=int, default=8)
    parser.add_argument("--step-seconds", type=float, default=60.0)
    parser.add_argument("--rounds", type=int, default=5, help="timed summarize calls")
    parser.add_argument("--raw-rounds", type=int, default=2, help="timed raw baselines")
    parser.add_argument("--database-url", help="default: SQLite in a temporary folder")
    parser.add_argument(
        "--histograms",
        action="store_true",
        help="also store latency histograms and GPU memory, as bench/report.py needs",
    )
    parser.add_argument(
        "--measure-only",
        action="store_true",
        help="the database at --database-url holds an earlier run's fleet (same arguments, run"
        " with --no-diagnostics): skip the load and the rollup fill",
    )
    parser.add_argument(
        "--no-diagnostics", action="store_true", help="keep the minute rows (for --measure-only)"
    )
    args = parser.parse_args()
    if args.measure_only and not args.database_url:
        parser.error("--measure-only needs --database-url")
    fleet = build_fleet(
        args.days, args.gpus, args.models, args.step_seconds, histograms=args.histograms
    )
    card = rate_card(fleet, args.days)
    start, end = T0, T0 + timedelta(days=args.days)
    with tempfile.TemporaryDirectory() as tmp:
        url = args.database_url or f"sqlite:///{Path(tmp) / 'bench.db'}"
        kind = "SQLite" if url.startswith("sqlite") else "PostgreSQL"
        upgrade_database(url)
        engine = open_database(url)
        print(
            f"fleet: {len(fleet.hosts)} hosts, {len(fleet.gpus)} GPUs, {len(fleet.targets)} "
            f"targets/models; {args.days} days of ticks every {args.step_seconds:g} s; {kind}"
        )

        now = end + TAIL
        if not args.measure_only:
            fill(engine, fleet, card, now, args.days)
        print("table rows: " + ", ".join(f"{k} {v:,}" for k, v in table_rows(engine).items()))

        max_gap = Rollup(engine, "", card, fleet.step).max_gap
        a_answer = from_rollups(engine, start, end)
        a_times = timed(lambda _: summarize(engine, start, end), args.rounds)
        b_times: list[float] = []
        b_answer: dict[str, ModelCost] = {}
        for _ in range(args.raw_rounds):
            t = time.perf_counter()
            b_answer = from_raw(engine, fleet, card, start, end, max_gap)
            b_times.append(time.perf_counter() - t)

        worst = compare(a_answer, b_answer)
        a_median, b_median = statistics.median(a_times), statistics.median(b_times)
        print(f"A: summarize from rollups ({kind})    {ms(a_times)}")
        print(f"B: from raw samples, same functions   {seconds(b_times)}")
        speedup = b_median / a_median
        agree = "OK" if worst <= REL_TOLERANCE else "MISMATCH"
        print(
            f"check: same cost per M tokens within {REL_TOLERANCE} -> {float(worst):.2e}, {agree}"
        )
        lost = b_answer["(fleet)"].observed_seconds - a_answer["(fleet)"].observed_seconds
        if lost:
            per = lost / len(fleet.gpus) / args.days
            print(
                f"  the rollup ledger metered {lost:,.0f} GPU-seconds fewer ({per:.1f} per GPU-day)"
            )
        print(
            f"target: B / A >= {SPEEDUP_TARGET:g} x -> {speedup:.1f} x, "
            f"{'OK' if speedup >= SPEEDUP_TARGET else 'UNDER TARGET'}"
        )
        print(
            f"target: A < {A_TARGET_S:g} s -> {a_median:.3f} s, "
            f"{'OK' if a_median < A_TARGET_S else 'OVER TARGET'}"
        )

        if args.no_diagnostics:
            engine.dispose()
            return 0
        # Diagnostics: the daemon's minute job, then A and that job with only hour rows, i.e.
        # what they would cost if summarize skipped the minute rows its hour rows cover.
        config = Config(host=fleet.hosts[0], database_url=url, rates=card.rates)
        job_s = once(lambda: cost_samples(engine, config, now))
        print(f"diagnostic: daemon minute job, cost signals (5 windows)  {job_s:.2f} s")
        drop_minute_rows(engine)
        hours_only = timed(lambda _: summarize(engine, start, end), args.rounds)
        same = from_rollups(engine, start, end) == a_answer
        print(
            f"diagnostic: A with minute rows deleted  {ms(hours_only)} "
            f"({b_median / statistics.median(hours_only):.0f} x B; same answer: {same})"
        )
        job_hours = once(lambda: cost_samples(engine, config, now))
        print(f"diagnostic: minute job, cost signals, minute rows deleted  {job_hours:.2f} s")
        engine.dispose()
    return 0


if __name__ == "__main__":
    sys.exit(main())
