"""A simulated month with known truth, for the report: two hosts, four GPUs, three models.

October 2026 in Europe/Madrid (745 hours: the clocks go back on the 25th), plus the last day
of September (the previous period's figures) and the first hour of November (outside the
period). Each host's daemon is replayed the way it stores data: a collector round per hour
written by :class:`agent.storage.store.Store` (GPU readings as NVML reports them, engine counters
and histogram buckets as the scrapes map them, with one engine restart), then the real
:class:`agent.storage.rollup.Rollup` job fills the minute and hour rollups and the cost ledger.

The truth is kept per hour bucket (the hour an interval's reading closes): what each GPU cost
and how busy it was, what each target produced, which latency buckets its requests fell in.
Prices are chosen so money is exact: $3.60 an hour is $0.001 a second.

    host a ($3.60/h): GPU a0 (H100 80GB) serves "llama" (llama-8b), 25 % busy (75 % on the
                      20th), VRAM 16 GiB with one 18 GiB peak; GPU a1 idle, no target.
    host b ($1.80/h): GPU b0 (A100 80GB) serves "qwen" (qwen-7b), 90 % busy, 70 GiB;
                      GPU b1 is shared by "qwen" (30 GiB) and "mistral" (mistral-7b, 10 GiB),
                      50 % busy. mistral publishes no latency histograms.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo

from sqlalchemy import Engine, insert

from agent.collect.runner import CollectorRun, Round
from agent.config.rates import Rate
from agent.cost.metering import metered_rollup
from agent.cost.ratecard import RateCard
from agent.storage.store import Store, labels_json
from collectors.base import Sample
from migrations.schema import alert_history

MADRID = ZoneInfo("Europe/Madrid")
ZONE = "Europe/Madrid"
FIRST_TICK = datetime(2026, 9, 29, 22, tzinfo=UTC)  # 30 September 00:00 in Madrid
LAST_TICK = datetime(2026, 11, 1, 1, tzinfo=UTC)  # 1 November 02:00 in Madrid
OCT_START = datetime(2026, 9, 30, 22, tzinfo=UTC)
OCT_END = datetime(2026, 10, 31, 23, tzinfo=UTC)
RESTART = datetime(2026, 10, 14, 6, tzinfo=UTC)  # llama's engine restarted before this tick
BAD_DAY = date(2026, 10, 20)  # llama: busier GPU, slower requests
VRAM_PEAK_HOUR = datetime(2026, 10, 10, 12, tzinfo=UTC)
GiB = float(1 << 30)
Counters = dict[tuple[str, str], float]  # (target/metric, le) -> the cumulative value
HOUR = timedelta(hours=1)

RATES = {"a": Decimal("3.60"), "b": Decimal("1.80")}
CARD = RateCard((Rate(host="a", usd_per_hour=RATES["a"]), Rate(host="b", usd_per_hour=RATES["b"])))
TTFT_LE = ("0.1", "0.25", "0.5", "1.0", "+Inf")
E2E_LE = ("1.0", "2.5", "5.0", "10.0", "+Inf")


@dataclass(frozen=True, slots=True)
class Gpu:
    host: str
    uuid: str
    index: str
    name: str
    targets: tuple[tuple[str, float], ...]  # (target, memory GiB)

    @property
    def labels(self) -> dict[str, str]:
        return {"host": self.host, "gpu_uuid": self.uuid, "gpu_index": self.index}

    def utilization(self, hour: datetime) -> float:
        if self.uuid == "GPU-a0":
            return 0.75 if local_day(hour) == BAD_DAY else 0.25
        return {"GPU-a1": 0.0, "GPU-b0": 0.9, "GPU-b1": 0.5}[self.uuid]

    def memory_used(self, hour: datetime) -> float:
        if self.uuid == "GPU-a0":
            return (18.0 if hour == VRAM_PEAK_HOUR else 16.0) * GiB
        return {"GPU-a1": 0.5, "GPU-b0": 70.0, "GPU-b1": 40.0}[self.uuid] * GiB


GPUS = (
    Gpu("a", "GPU-a0", "0", "NVIDIA H100 80GB HBM3", (("llama", 16.0),)),
    Gpu("a", "GPU-a1", "1", "NVIDIA H100 80GB HBM3", ()),
    Gpu("b", "GPU-b0", "0", "NVIDIA A100-SXM4-80GB", (("qwen", 70.0),)),
    Gpu("b", "GPU-b1", "1", "NVIDIA A100-SXM4-80GB", (("qwen", 30.0), ("mistral", 10.0))),
)


@dataclass(frozen=True, slots=True)
class Hour:
    """What one target did in one hour bucket."""

    output: int
    prompt: int  # all prompt tokens (0: the engine has no such counter)
    computed: int | None  # prompt tokens computed (None: no such counter)
    requests: int
    ttft: tuple[int, ...] | None  # requests per bucket (not cumulative), None: no histogram
    e2e: tuple[int, ...] | None


@dataclass(frozen=True, slots=True)
class Target:
    host: str
    name: str
    model: str

    def hour(self, hour: datetime) -> Hour:
        day = local_day(hour)
        bad = day == BAD_DAY
        if self.name == "llama":
            output = 180_000 if day.month == 9 else 360_000 + 1_000 * day.day
            ttft = (100, 100, 100, 40, 20) if bad else (200, 100, 50, 8, 2)
            e2e = (150, 100, 60, 40, 10) if bad else (300, 50, 8, 2, 0)
            return Hour(output, 720_000, 360_000, 360, ttft, e2e)
        if self.name == "qwen":
            return Hour(
                9_000_000, 900_000, None, 1_800, (1500, 200, 80, 15, 5), (1200, 400, 150, 40, 10)
            )
        return Hour(1_000_000, 0, None, 180, None, None)


TARGETS = (
    Target("a", "llama", "llama-8b"),
    Target("b", "qwen", "qwen-7b"),
    Target("b", "mistral", "mistral-7b"),
)


def local_day(at: datetime) -> date:
    return at.astimezone(MADRID).date()


def hours(start: datetime, end: datetime) -> Iterator[datetime]:
    """The hour buckets (their UTC starts) in [start, end)."""
    at = start
    while at < end:
        yield at
        at += HOUR


# -- the truth ----------------------------------------------------------------------------------


@dataclass
class Truth:
    """Sums over the hour buckets of a window, per GPU, target and local day."""

    cost: dict[str, Decimal] = field(default_factory=lambda: defaultdict(Decimal))
    idle: dict[str, Decimal] = field(default_factory=lambda: defaultdict(Decimal))
    busy_seconds: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    observed_seconds: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    target_cost: dict[str, Decimal] = field(default_factory=lambda: defaultdict(Decimal))
    target_busy: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    output: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    prompt: dict[str, int] = field(default_factory=lambda: defaultdict(int))  # computed if any
    requests: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    ttft: dict[str, list[int]] = field(default_factory=dict)  # cumulative per bound
    e2e: dict[str, list[int]] = field(default_factory=dict)
    day_cost: dict[date, Decimal] = field(default_factory=lambda: defaultdict(Decimal))
    day_idle: dict[date, Decimal] = field(default_factory=lambda: defaultdict(Decimal))
    day_target_cost: dict[tuple[date, str], Decimal] = field(
        default_factory=lambda: defaultdict(Decimal)
    )
    day_output: dict[tuple[date, str], int] = field(default_factory=lambda: defaultdict(int))
    day_busy: dict[tuple[date, str], float] = field(default_factory=lambda: defaultdict(float))
    day_observed: dict[tuple[date, str], float] = field(default_factory=lambda: defaultdict(float))


def truth(start: datetime, end: datetime) -> Truth:
    """The figures of [start, end). The ledger spreads each hour's interval over its minutes,
    so a partial last hour carries its share of cost and GPU time; counters land in the
    minute that closes the hour, so a partial hour has produced no tokens yet."""
    t = Truth()
    whole = end.replace(minute=0, second=0, microsecond=0)
    for hour in hours(start, whole):
        _gpu_hour(t, hour, Decimal(1), 3600.0)
        _target_hour(t, hour)
    minutes = int((end - whole).total_seconds() // 60)
    if minutes:
        _gpu_hour(t, whole, Decimal(minutes) / 60, 60.0 * minutes)
    return t


def _gpu_hour(t: Truth, hour: datetime, fraction: Decimal, seconds: float) -> None:
    day = local_day(hour)
    for g in GPUS:
        cost = RATES[g.host] * fraction
        util = g.utilization(hour)
        idle = cost * Decimal(repr(1 - util))
        t.cost[g.uuid] += cost
        t.idle[g.uuid] += idle
        t.busy_seconds[g.uuid] += seconds * util
        t.observed_seconds[g.uuid] += seconds
        t.day_cost[day] += cost
        t.day_idle[day] += idle
        t.day_busy[(day, g.uuid)] += seconds * util
        t.day_observed[(day, g.uuid)] += seconds
        memory = sum(m for _, m in g.targets)
        for target, m in g.targets:
            share = Decimal(repr(m / memory))
            t.target_cost[target] += cost * share
            t.target_busy[target] += seconds * util * m / memory
            t.day_target_cost[(day, target)] += cost * share


def _target_hour(t: Truth, hour: datetime) -> None:
    day = local_day(hour)
    for target in TARGETS:
        h = target.hour(hour)
        t.output[target.name] += h.output
        t.prompt[target.name] += h.computed if h.computed is not None else h.prompt
        t.requests[target.name] += h.requests
        t.day_output[(day, target.name)] += h.output
        for kind, counts in (("ttft", h.ttft), ("e2e", h.e2e)):
            if counts is None:
                continue
            into = getattr(t, kind).setdefault(target.name, [0] * len(counts))
            for i, cumulative in enumerate(_cumulative(counts)):
                into[i] += cumulative


def _cumulative(counts: tuple[int, ...]) -> list[int]:
    out, running = [], 0
    for n in counts:
        running += n
        out.append(running)
    return out


# -- the data, the daemon's way --------------------------------------------------------------------


def fill(engine: Engine) -> None:
    """Every host's hourly rounds from FIRST_TICK to LAST_TICK, rolled up as the daemon does."""
    stores = {host: Store(engine, host) for host in RATES}
    jobs = {host: metered_rollup(engine, host, CARD, interval_seconds=3600) for host in RATES}
    counters: Counters = defaultdict(float)
    tick = FIRST_TICK
    while tick <= LAST_TICK:
        for host, store in stores.items():
            store.write_round(_round(host, tick, counters))
        if tick.hour == 0 or tick == LAST_TICK:
            for job in jobs.values():
                job.run(tick)
        tick += HOUR
    for job in jobs.values():
        while job.run(LAST_TICK + timedelta(minutes=5)).minutes:
            pass


def _round(host: str, tick: datetime, counters: Counters) -> Round:
    """The samples of ``host`` at ``tick``: readings of the hour bucket that ends there."""
    hour = tick - HOUR
    nvml, derived = [], []
    for g in (g for g in GPUS if g.host == host):
        nvml += [
            _sample("gpuwatch_gpu_info", 1.0, {**g.labels, "gpu_name": g.name}, tick),
            _sample("gpuwatch_gpu_utilization_ratio", g.utilization(hour), g.labels, tick),
            _sample("gpuwatch_gpu_memory_used_bytes", g.memory_used(hour), g.labels, tick),
            _sample("gpuwatch_gpu_memory_total_bytes", 80 * GiB, g.labels, tick),
        ]
        derived += [
            _sample("gpuwatch_target_gpu_memory_bytes", m * GiB, {**g.labels, "target": t}, tick)
            for t, m in g.targets
        ]
    runs = [CollectorRun("nvml", tick, True, 0.0, tuple(nvml))]
    for target in (t for t in TARGETS if t.host == host):
        up = {"host": host, "target": target.name}
        derived.append(_sample("gpuwatch_target_up", 1.0, up, tick))
        samples = tuple(_engine_samples(target, hour, tick, counters, tick == FIRST_TICK))
        run = CollectorRun(f"target/{target.name}", tick, True, 0.0, samples, target=target.name)
        runs.append(run)
    return Round(tick, tuple(runs), tuple(derived))


def _sample(metric: str, value: float, labels: dict[str, str], ts: datetime) -> Sample:
    return Sample(metric=metric, value=value, labels=labels, ts=ts)


def _engine_samples(
    target: Target, hour: datetime, tick: datetime, counters: Counters, first: bool
) -> list[Sample]:
    """Cumulative counters; the first tick only opens them (at 0); a restart starts from 0."""
    h = target.hour(hour)
    labels = {"host": target.host, "target": target.name, "engine": "vllm", "model": target.model}
    step = {
        ("gpuwatch_engine_generation_tokens_total", ""): h.output,
        ("gpuwatch_engine_requests_finished_total", ""): h.requests,
    }
    if h.prompt:
        step[("gpuwatch_engine_prompt_tokens_total", "")] = h.prompt
    if h.computed is not None:
        step[("gpuwatch_engine_prompt_tokens_computed_total", "")] = h.computed
    for kind, bounds, counts in (
        ("ttft_seconds", TTFT_LE, h.ttft),
        ("e2e_latency_seconds", E2E_LE, h.e2e),
    ):
        if counts is not None:
            for le, n in zip(bounds, _cumulative(counts), strict=True):
                step[(f"gpuwatch_engine_{kind}_bucket", le)] = n
    out = []
    for (metric, le), amount in step.items():
        key = (f"{target.name}/{metric}", le)
        if tick == RESTART and target.name == "llama":
            counters[key] = 0.0
        counters[key] += 0 if first else amount
        series_labels = {**labels, "le": le} if le else labels
        if metric == "gpuwatch_engine_requests_finished_total":
            series_labels = {**labels, "reason": "stop"}
        out.append(Sample(metric=metric, value=counters[key], labels=series_labels, ts=tick))
    return out


# -- alert history ---------------------------------------------------------------------------------


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


ALERTS = (
    # (scope, rule, labels, fired, resolved, summary)
    (
        "a",
        "GpuIdle",
        {"host": "a", "gpu_uuid": "GPU-a1", "gpu_index": "1"},
        at("2026-09-29T12:00"),
        at("2026-10-02T00:00"),
        "GPU a/1 idle",
    ),
    (
        "a",
        "GpuIdle",
        {"host": "a", "gpu_uuid": "GPU-a1", "gpu_index": "1"},
        at("2026-10-10T00:00"),
        None,
        "GPU a/1 idle again",
    ),
    (
        "b",
        "QueueGrowing",
        {"host": "b", "target": "qwen", "model": "qwen-7b"},
        at("2026-10-12T08:00"),
        at("2026-10-12T08:45"),
        "Queue growing (qwen): 42 waiting",
    ),
    (
        "a",
        "QueueGrowing",
        {"host": "a", "target": "llama", "model": "llama-8b"},
        at("2026-10-25T01:30"),
        at("2026-10-25T02:10"),
        "Queue growing (llama): 12 waiting",
    ),
    (
        "fleet",
        "BudgetThreshold",
        {"scope": "fleet", "month": "2026-10", "level": "50%"},
        at("2026-10-20T00:00"),
        None,
        "Budget threshold crossed",
    ),
    (
        "a",
        "LatencyP99Spike",
        {"host": "a", "target": "llama", "model": "llama-8b"},
        at("2026-11-01T00:30"),
        None,
        "after the period",
    ),
    (
        "b",
        "KvCacheSaturated",
        {"host": "b", "target": "qwen", "model": "qwen-7b"},
        at("2026-09-20T00:00"),
        at("2026-09-21T00:00"),
        "before the period",
    ),
)


def store_alerts(engine: Engine) -> None:
    rows = [
        {
            "scope": scope,
            "rule": rule,
            "labels": labels_json(labels),
            "severity": "warning",
            "fired_at": fired,
            "resolved_at": resolved,
            "summary": summary,
        }
        for scope, rule, labels, fired, resolved, summary in ALERTS
    ]
    with engine.begin() as conn:
        conn.execute(insert(alert_history), rows)
