"""bench/cost.py's raw samples and rollup fill: the series rows every daemon would create,
each host's ticks as its daemon would have stored them (bulk-inserted a day per
transaction), then each host's real Rollup job until caught up."""

from __future__ import annotations

import json
import math
import random
import time
from collections import defaultdict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Engine, insert, select

from agent.cost.metering import ENERGY, GPU_INFO, TARGET_MEMORY, UTIL, metered_rollup
from agent.cost.ratecard import RateCard
from agent.cost.summarize import OUTPUT
from agent.storage.rollup import SETTLE_SECONDS, TARGET_UP
from agent.storage.store import labels_json
from bench.cost_fleet import T0, Fleet, Gpu, Target
from migrations.schema import collector_runs, samples, series

GIB = 1 << 30


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
        job = metered_rollup(
            engine, host, card, fleet.step, raw_retention=timedelta(days=days + 2),
            settle=timedelta(seconds=SETTLE_SECONDS),
        )  # fmt: skip
        while job.run(now).minutes:
            runs += 1
    return time.perf_counter() - start, runs
