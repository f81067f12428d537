"""The synthetic fleet of bench/cost.py, bench/rollup.py and bench/report.py, and its database.

Not a benchmark. Hosts of 8 GPUs; the models' serving targets go round-robin over the hosts and
a host's GPUs are split among its targets (8 models on 8 hosts: one tensor-parallel-8 target per
host, alternately vLLM and SGLang), each with its token rate and one engine restart (a failed
scrape, no process on its GPUs for that tick, then the counter back from 0). The rate card:
$2.49 per GPU-hour, with one host at an instance price, one with a mid-window price change and
one owned (purchase amortised over 36 months plus energy at $0.12/kWh).

Each host's daemon ticks every ``step`` seconds at its own offset into the minute plus up to
0.25 s of jitter. A tick stores, with the labels production writes: per GPU gpuwatch_gpu_info,
gpuwatch_gpu_utilization_ratio (a daily wave plus noise), the cumulative
gpuwatch_gpu_energy_joules_total and gpuwatch_target_gpu_memory_bytes of its target; per target
gpuwatch_target_up and gpuwatch_engine_generation_tokens_total, and its collector runs. With
``histograms``, also TTFT and end-to-end latency histograms (9 buckets each) per target and GPU
memory per GPU: what a report reads. No ``_created`` series: resets are found by the counter's
decrease. A real host stores about ten more rows per GPU and tick (power, clocks, ...).

:func:`load` bulk-inserts the rows (series rows as production writes them, samples a day of
ticks per transaction); :func:`fill_rollups` then runs each host's real rollup job with the cost
ledger (``metered_rollup``) until caught up, as a daemon catching up would.
:func:`ensure_template` keeps one such host filled in a SQLite file (minutes to fill) for as
long as the code that writes it is the same; :func:`seed_extras` adds a month's alert history
and billed records.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import time
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, delete, insert, select

from agent.config.rates import Rate
from agent.cost.metering import ENERGY, GPU_INFO, TARGET_MEMORY, UTIL, metered_rollup
from agent.cost.ratecard import RateCard
from agent.cost.summarize import OUTPUT
from agent.storage.rollup import SETTLE_SECONDS, TARGET_UP
from agent.storage.store import labels_json
from migrations.schema import alert_history, collector_runs, cost_records, samples, series

T0 = datetime(2026, 10, 31, tzinfo=UTC)  # 30 days from here end on 2026-11-30
GPUS_PER_HOST = 8
TAIL = timedelta(minutes=10)  # ticks past the window's end, so its last hour is complete
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
    days: float, gpus: int, models: int, step: float, *, histograms: bool = False
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


# -- one host, filled once and kept (bench/report.py's template) ----------------------------

# What decides the template's rows: the schema and its migrations, the rollup and the cost
# ledger's metering, and this fleet. Migrations edited in place keep their revision, so the
# revision alone would not notice.
WRITERS = ("migrations", "agent/storage", "agent/cost", "bench/fleet.py")


@dataclass(frozen=True, slots=True)
class TemplateSpec:
    """What a template was filled with; a different spec (or code) means a new fill."""

    days: int  # of ticks from T0, the month plus a margin each side
    models: int  # serving targets on the host, one model each
    step_seconds: float  # between raw ticks
    revision: str  # the schema's head revision when it was filled
    code: str  # a digest of the code that writes it

    def fleet(self) -> Fleet:
        return build_fleet(self.days, GPUS_PER_HOST, self.models, self.step_seconds,
                           histograms=True)  # fmt: skip

    @property
    def now(self) -> datetime:
        """When the fill's rollup ran: just after the last tick."""
        return T0 + timedelta(days=self.days) + TAIL


def code_digest() -> str:
    repo = Path(__file__).resolve().parent.parent
    digest = hashlib.sha256()
    for name in WRITERS:
        root = repo / name
        for path in sorted(root.rglob("*.py")) if root.is_dir() else [root]:
            digest.update(str(path.relative_to(repo)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def ensure_template(path: Path, days: int, models: int, step: float) -> TemplateSpec:
    """One host (8 GPUs, ``models`` targets, histograms) filled into SQLite at ``path`` and
    rolled up by its real rollup job, so the template holds what today's rollup writes;
    reused while a JSON sidecar says it was filled with the same spec and code."""
    from agent.storage.db import open_database, upgrade_database
    from migrations.runner import head_revision

    spec = TemplateSpec(days, models, step, head_revision(), code_digest())
    meta = path.with_name(path.name + ".json")
    if path.exists() and meta.exists() and json.loads(meta.read_text()) == asdict(spec):
        print(f"template: reusing {path}")
        return spec
    for stale in (path, meta):
        stale.unlink(missing_ok=True)
    url = f"sqlite:///{path}"
    upgrade_database(url)
    engine = open_database(url)
    fleet = spec.fleet()
    t = time.perf_counter()
    rows = load(engine, fleet)
    fill_s, _ = fill_rollups(engine, fleet, rate_card(fleet, days), spec.now, days)
    print(f"template: 1 host, {len(fleet.gpus)} GPUs, {len(fleet.targets)} targets, {days} days "
          f"of ticks every {step:g} s: {rows:,} raw rows loaded and rolled up in "
          f"{time.perf_counter() - t:.0f} s (rollup {fill_s:.0f} s) into {path}")  # fmt: skip
    engine.dispose()
    meta.write_text(json.dumps(asdict(spec)))
    return spec


# -- what a fleet's month adds: alerts and billing --------------------------------------------

RULES = ("GpuIdle", "LatencyP99Spike", "QueueGrowing", "TargetDown", "KvCacheSaturated")
ALERTS_PER_HOST = 38  # a month's alert history per host


def seed_extras(
    engine: Engine, hosts: Sequence[str], models: Sequence[str], month: tuple[datetime, datetime]
) -> None:
    """A month of alert history and a daily billed record per host (replacing earlier ones)."""
    rng = random.Random(7)
    start, end = month
    minutes = int((end - start).total_seconds() // 60)
    alerts = []
    for n in range(ALERTS_PER_HOST * len(hosts)):
        fired = start + timedelta(minutes=rng.randrange(minutes))
        rule, host = RULES[n % len(RULES)], rng.choice(hosts)
        labels = {"host": host, "target": "vllm-0", "model": models[n % len(models)]}
        alerts.append({
            "scope": host, "rule": rule, "labels": json.dumps(labels, sort_keys=True),
            "severity": "warning", "fired_at": fired,
            "resolved_at": fired + timedelta(minutes=rng.randrange(5, 240)),
            "summary": f"{rule} on {host}",
        })  # fmt: skip
    bills = []
    day = start
    while day < end:
        bills += [{
            "source": "runpod", "record_id": f"{host}-{day:%Y%m%d}", "kind": "billed",
            "resource": host, "period_start": day, "period_end": day + timedelta(days=1),
            "amount": Decimal("480.00"), "currency": "USD", "description": "pod",
            "imported_at": end,
        } for host in hosts]  # fmt: skip
        day += timedelta(days=1)
    with engine.begin() as conn:
        conn.execute(delete(alert_history))
        conn.execute(delete(cost_records).where(cost_records.c.source == "runpod"))
        conn.execute(insert(alert_history), alerts)
        conn.execute(insert(cost_records), bills)
