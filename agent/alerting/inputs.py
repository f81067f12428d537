"""Everything the alert rules read, gathered once per evaluation from the round and the store.

The conditions themselves (:mod:`agent.alerting.conditions`) are pure over :class:`AlertInputs`, so
they are tested with hand-built inputs; this module is the only part that queries. Queries are
bounded: the rules' own windows (minutes) and 24 hours for the latency baseline.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Protocol

from sqlalchemy import Engine, select

from agent.alerting.recent import RecentWindows
from agent.alerting.slo_burn import Burn, SloCache, read_burns
from agent.collect.runner import Round
from agent.config.settings import Config
from agent.storage import rolled_up
from agent.storage.buckets import unpack
from agent.storage.series_math import histogram_quantile
from agent.storage.store import Store
from agent.storage.windows import HistogramWindow, ReadOnce, WindowSource, histogram_window
from alerts.rules import DEFAULT_RULES, RuleSpec
from collectors.base import Sample
from migrations.schema import histogram_layouts, histogram_rollups, series

Points = tuple[tuple[datetime, float], ...]
PairKey = tuple[str, str]  # (target, model)
LatencyKey = tuple[str, str, str]  # (target, model, "ttft" | "e2e")
Latencies = dict[LatencyKey, tuple[float, float]]  # -> (p99 seconds, observations)

LATENCY_METRICS = dict(
    zip(("ttft", "e2e"), rolled_up.rolled_up(rolled_up.TTFT, rolled_up.E2E), strict=True)
)
WAITING = "gpuwatch_engine_requests_waiting"
TARGET_UP = "gpuwatch_target_up"
_PRICE = "gpuwatch_gpu_hourly_cost_usd"
BASELINE = timedelta(hours=24)
HOUR_SECONDS = 3600
LATENCY_EVERY_SECONDS = 10.0  # see LatencyCadence


@dataclass(frozen=True, slots=True)
class AlertInputs:
    """One evaluation's view of the box. Absent keys mean "unknown", never zero."""

    now: datetime
    host: str
    interval_seconds: float
    started_at: datetime  # when collection started: "never succeeded" counts from here
    latest: tuple[Sample, ...] = ()  # the last round's samples, health and derived included
    collector_last_success: Mapping[str, datetime | None] = field(default_factory=dict)
    collector_success: Mapping[str, bool] = field(default_factory=dict)
    # Collectors failing since before this process started and never successful: since when
    # (their first stored failure), so a restart does not restart the count.
    failing_since: Mapping[str, datetime] = field(default_factory=dict)
    billed_gpus: frozenset[str] = frozenset()  # gpu_uuid of GPUs with an hourly rate
    gpu_hourly_usd: Mapping[str, float] = field(default_factory=dict)
    gpu_targets: Mapping[str, frozenset[str]] = field(default_factory=dict)  # gpu_uuid -> targets
    target_up_since: Mapping[str, datetime | None] = field(default_factory=dict)
    queue_points: Mapping[PairKey, Points] = field(default_factory=dict)
    p99: Mapping[LatencyKey, tuple[float, float]] = field(default_factory=dict)  # (p99, count)
    baseline_p99: Mapping[LatencyKey, tuple[float, float]] = field(default_factory=dict)
    slo_burns: tuple[Burn, ...] | None = ()  # None: unreadable this round (agent.alerting.slo_burn)

    def samples(self, metric: str) -> list[Sample]:
        return [s for s in self.latest if s.metric == metric]


class Baselines(Protocol):
    """Where the 24 h latency baselines come from (see ``StoredBaselines``)."""

    def __call__(self, host: str, pairs: set[PairKey], before: datetime) -> Latencies: ...


class StoredBaselines:
    """The baselines from the hour rollups; the last answer is remembered for an outage,
    when the database cannot be asked (a baseline of whole hours moves slowly anyway)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._last: Latencies = {}

    def __call__(self, host: str, pairs: set[PairKey], before: datetime) -> Latencies:
        self._last = _baselines(self.engine, host, pairs, before)
        return self._last

    def remembered(self, host: str, pairs: set[PairKey], before: datetime) -> Latencies:
        return {key: value for key, value in self._last.items() if key[:2] in pairs}


@dataclass
class LatencyCadence:
    """The latency rule's windows, read at most every ``every`` seconds of ticks.

    The p99 over 5 minutes reads every bucket of every latency histogram in the window: at 1 s
    ticks (two vLLM targets, 2 models each) 59 k points and nine tenths of the tick's database
    work, every second. Prometheus evaluates a rule group every ``evaluation_interval``, not
    every scrape; here the other rules still follow every tick, and the latency windows are
    read again once ``every`` has passed (half an interval early, so ticks of ``every`` or
    longer read them every tick), when the (target, model) pairs change, or when the clock
    went back. A p99 over 300 s that is up to 10 s old moves an alert by at most that much.
    """

    interval_seconds: float
    every: float = LATENCY_EVERY_SECONDS
    _read_at: datetime | None = None
    _pairs: frozenset[PairKey] = frozenset()
    _latencies: tuple[Latencies, Latencies] = ({}, {})
    slo: SloCache = field(default_factory=SloCache)  # SloBurnRate's rollup reads, per minute

    def __call__(
        self, pairs: set[PairKey], now: datetime, read: Callable[[], tuple[Latencies, Latencies]]
    ) -> tuple[Latencies, Latencies]:
        """``read()``'s answer, or the last one while it is fresh."""
        due = self.every - self.interval_seconds / 2
        last = self._read_at
        if last is None or pairs != self._pairs or not last <= now < last + timedelta(seconds=due):
            self._latencies, self._read_at, self._pairs = read(), now, frozenset(pairs)
        return self._latencies


def gather(
    store: WindowSource,
    round_: Round,
    config: Config,
    now: datetime,
    *,
    rules: Mapping[str, RuleSpec] = DEFAULT_RULES,
    started_at: datetime | None = None,
    baselines: Baselines | None = None,
    failing_since: Mapping[str, datetime] | None = None,
    cadence: LatencyCadence | None = None,
) -> AlertInputs:
    """The inputs for evaluating ``rules`` at ``now`` after ``round_`` (already stored).

    ``store``: the store, or during an outage the rules' memory of it (agent.alerting.recent).
    ``started_at``: when this process began collecting, as the runner's last-success memory is
    per process; None takes ``now`` (a never-successful collector then waits to be reported).
    ``baselines``: None reads them from ``store`` (a Store), else none are known.
    ``cadence``: how often the latency windows are read (None: every call).
    """
    if baselines is None:
        baselines = StoredBaselines(store.engine) if isinstance(store, Store) else _no_baselines
    store = ReadOnce(store, config.host)  # each window read once per tick, not once per pair
    latest = tuple(s for _, s in round_.tagged_samples())
    success, last = _collector_health(latest)
    prices = {s.labels["gpu_uuid"]: s.value for s in latest if s.metric == _PRICE}
    window = _seconds(rules, "LatencyP99Spike", "window")
    pairs = _engine_pairs(latest)

    def read() -> tuple[Latencies, Latencies]:
        return _latencies(store, baselines, config.host, pairs, now, window)

    p99, baseline = read() if cadence is None else cadence(pairs, now, read)
    slo_rule = rules.get("SloBurnRate")
    slo_burns = (
        read_burns(store, config.host, config.slos, {m for _, m in pairs}, now,
                   cadence.slo if cadence else None)
        if slo_rule is not None and slo_rule.enabled else ()
    )  # fmt: skip
    return AlertInputs(
        now=now,
        host=config.host,
        interval_seconds=config.daemon.interval_seconds,
        started_at=started_at or now,
        latest=latest,
        collector_last_success=last,
        collector_success=success,
        failing_since=failing_since or {},
        billed_gpus=frozenset(prices),
        gpu_hourly_usd=prices,
        gpu_targets=_gpu_targets(latest),
        target_up_since=_up_since(store, config, latest, now, _seconds(rules, "GpuIdle", "warmup")),
        queue_points=_queue_points(
            store, config.host, latest, now, _seconds(rules, "QueueGrowing", "slope_window")
        ),
        p99=p99,
        baseline_p99=baseline,
        slo_burns=slo_burns,
    )


def outage_memory(rules: Mapping[str, RuleSpec], interval_seconds: float) -> RecentWindows:
    """What ``gather`` reads from the store, kept from the rounds of an outage for as long as
    the longest window (see agent.alerting.recent)."""
    metrics = {TARGET_UP, WAITING} | {
        metric + suffix for metric in LATENCY_METRICS.values() for suffix in ("_bucket", "_created")
    }
    return RecentWindows(metrics, raw_reach(rules, interval_seconds))


def raw_reach(rules: Mapping[str, RuleSpec], interval_seconds: float) -> timedelta:
    """How far back from a tick ``gather`` reads raw samples: its longest window.

    The daemon's rollup packs an hour into chunks only once these windows have left it
    (``Rollup.head_reach``). Read from chunks, a 5-minute window of the hour just packed
    decodes every series' whole hour: several times slower than from the head, and the
    allocator keeps megabytes of that read; at 1 s ticks every tick that read the latency
    windows would miss its deadline until the window had passed, and rounds would spool.
    """
    longest = max(
        _seconds(rules, "LatencyP99Spike", "window"),
        _seconds(rules, "QueueGrowing", "slope_window"),
        _seconds(rules, "GpuIdle", "warmup") + 2 * interval_seconds,
    )
    return timedelta(seconds=longest)


def _seconds(rules: Mapping[str, RuleSpec], rule: str, name: str) -> float:
    """A window threshold of a rule, the default where the user's rules lack it."""
    key = f"{name}_seconds"
    value = (rules.get(rule) or DEFAULT_RULES[rule]).thresholds.get(key)
    return float(value if value is not None else DEFAULT_RULES[rule].thresholds[key] or 0.0)


def _collector_health(
    latest: Iterable[Sample],
) -> tuple[dict[str, bool], dict[str, datetime | None]]:
    success: dict[str, bool] = {}
    last: dict[str, datetime | None] = {}
    for s in latest:
        if s.metric == "gpuwatch_collector_success":
            success[s.labels["collector"]] = s.value == 1.0
            last.setdefault(s.labels["collector"], None)
        elif s.metric == "gpuwatch_collector_last_success_timestamp_seconds":
            last[s.labels["collector"]] = datetime.fromtimestamp(s.value, UTC)
    return success, last


def _gpu_targets(latest: Iterable[Sample]) -> dict[str, frozenset[str]]:
    out: dict[str, set[str]] = defaultdict(set)
    for s in latest:
        if s.metric == "gpuwatch_target_gpu_memory_bytes":
            out[s.labels["gpu_uuid"]].add(s.labels["target"])
    return {gpu: frozenset(targets) for gpu, targets in out.items()}


def _engine_pairs(latest: Iterable[Sample]) -> set[PairKey]:
    return {
        (s.labels["target"], s.labels["model"])
        for s in latest
        if s.metric.startswith("gpuwatch_engine_") and "target" in s.labels and "model" in s.labels
    }


def _up_since(
    store: WindowSource, config: Config, latest: Iterable[Sample], now: datetime, warmup: float
) -> dict[str, datetime | None]:
    """When each target last came up (None: down now). The lookback only needs to cover the
    warm-up: a target up through all of it counts as up since the lookback's start or before."""
    start = now - timedelta(seconds=warmup + 2 * config.daemon.interval_seconds)
    out: dict[str, datetime | None] = {}
    for s in latest:
        if s.metric != TARGET_UP:
            continue
        target = s.labels["target"]
        if s.value != 1.0:
            out[target] = None
            continue
        stored = store.window(TARGET_UP, start, now, {"host": config.host, "target": target})
        points = dict(p for series in stored.values() for p in series)
        points[s.ts] = s.value  # the round may not be stored (a failed write)
        out[target] = _run_start(points)
    return out


def _run_start(points: Mapping[datetime, float]) -> datetime:
    """The first instant of the trailing run of "up" points (the last point is up)."""
    ordered = sorted(points.items(), reverse=True)
    since = ordered[0][0]
    for ts, value in ordered:
        if value != 1.0:
            break
        since = ts
    return since


def _queue_points(
    store: WindowSource, host: str, latest: Iterable[Sample], now: datetime, window: float
) -> dict[PairKey, Points]:
    """Waiting requests per (target, model) over the slope window; series differing only in
    other labels (engine) are summed per instant, as the queue is the pair's."""
    latest = tuple(latest)
    if not any(s.metric == TARGET_UP for s in latest):
        return {}  # no engine targets on this box: nothing to ask the store every tick
    start = now - timedelta(seconds=window)
    summed: dict[PairKey, dict[datetime, float]] = defaultdict(lambda: defaultdict(float))
    for labels_json, points in store.window(WAITING, start, now, {"host": host}).items():
        labels = json.loads(labels_json)
        pair = (labels.get("target", ""), labels.get("model", ""))
        for ts, value in points:
            if ts >= start:  # the baseline point before the window is not part of the slope
                summed[pair][ts] += value
    fresh: dict[PairKey, dict[datetime, float]] = defaultdict(lambda: defaultdict(float))
    for s in latest:
        if s.metric == WAITING:
            fresh[(s.labels.get("target", ""), s.labels.get("model", ""))][s.ts] += s.value
    for pair, now_points in fresh.items():  # the round itself wins over what was stored of it
        summed[pair].update(now_points)
    return {pair: tuple(sorted(by_ts.items())) for pair, by_ts in summed.items()}


def _no_baselines(host: str, pairs: set[PairKey], before: datetime) -> Latencies:
    return {}


def _latencies(
    store: WindowSource,
    baselines: Baselines,
    host: str,
    pairs: Iterable[PairKey],
    now: datetime,
    window: float,
) -> tuple[Latencies, Latencies]:
    """p99 and observation count per (target, model, kind): over the short window from raw
    samples, and as the baseline over the 24 h before it from the hour rollups."""
    short_start = now - timedelta(seconds=window)
    p99: Latencies = {}
    wanted = set(pairs)
    for target, model in sorted(wanted):
        match = {"host": host, "target": target, "model": model}
        for kind, metric in LATENCY_METRICS.items():
            _put(
                p99, (target, model, kind), histogram_window(store, metric, short_start, now, match)
            )
    return p99, (baselines(host, wanted, short_start) if wanted else {})


def _baselines(engine: Engine, host: str, pairs: set[PairKey], before: datetime) -> Latencies:
    """p99 per (target, model, kind) over the whole hours of the 24 h before ``before``, from
    the hour rows of the histogram rollups (restart-safe already). Reading 24 h of raw buckets
    instead would cost more every tick than the rest of the evaluation together; a baseline
    moves slowly, so whole hours (up to an hour old) are what it needs. Bucket sets that
    changed within the day are summed per bound and made monotonic by histogram_quantile."""
    end = before.replace(minute=0, second=0, microsecond=0)
    metrics = {m: kind for kind, m in LATENCY_METRICS.items()}
    h = histogram_rollups.c
    query = (
        select(series.c.metric, series.c.labels, histogram_layouts.c.bounds, h.increases)
        .join(series, series.c.id == h.series_id)
        .join(histogram_layouts, histogram_layouts.c.id == h.layout_id)
        .where(
            h.resolution == HOUR_SECONDS,
            h.start >= end - BASELINE,
            h.start < end,
            series.c.host == host,
            series.c.metric.in_(list(metrics)),
        )
    )
    buckets: dict[LatencyKey, dict[float, float]] = defaultdict(lambda: defaultdict(float))
    with engine.connect() as conn:
        for metric, labels_json, bounds, increases in conn.execute(query):
            labels = json.loads(labels_json)
            pair = (labels.get("target", ""), labels.get("model", ""))
            if pair in pairs:
                into = buckets[(*pair, metrics[metric])]
                for le, increase in unpack(bounds, increases):
                    into[float(le)] += increase
    out: Latencies = {}
    for key, by_le in buckets.items():
        ordered = sorted(by_le.items())
        value = histogram_quantile(0.99, ordered)
        if value is not None and ordered[-1][1] > 0:
            out[key] = (value, ordered[-1][1])
    return out


def _put(into: Latencies, key: LatencyKey, window: HistogramWindow) -> None:
    value = window.quantiles.get(0.99)
    if value is not None and window.count > 0:
        into[key] = (value, window.count)
