"""The monthly (or weekly, or any period's) report: every figure, as :mod:`agent.report_model`
values, from the rollups and the cost ledger. The CLI and the weekly digest call
:func:`build_report` and nothing else; the renderers only format what it returns.

Where each figure comes from (all over the period [start, end), read the way
:func:`agent.cost.summarize` reads a window: per host, hour rows up to its hour watermark and
minute rows for the rest, summed by the database; never raw samples):

- spend: "metered" is the cost ledger (``gpu_usage``: rate card x metered uptime); "billed" is
  the providers' ``cost_records`` of kind billed whose charge starts in the period, per source
  (USD only). ``spend_usd`` is the billed figure where providers billed more than was metered
  (the bill includes what gpuwatch cannot see), else the metered one, as the budget rules do.
- tokens: the counters' restart-safe increases from the rollups (``increase``); useful tokens by
  ``cost.useful_tokens`` ("output", or "output+prompt" with computed prompt tokens).
- cost per million useful tokens: per model, its targets' allocated cost (``gpu_allocations``)
  shared among the models a target served by their useful tokens (as ``summarize``); per host and
  for the fleet, the metered cost of the GPUs over their useful tokens. The previous period
  (:func:`agent.report_period.previous_period`) gives the same figures for the trend.
- GPU time: observed (metered) hours, busy hours (uptime x utilisation), idle-but-loaded hours
  (allocated to a serving target, not busy) and unallocated hours (no target), as ``Summary``.
  Idle cost is the ledger's cost x (1 - utilisation); the top waste is the five GPUs with the
  highest idle cost.
- latency: p50/p95/p99 of time to first token and end-to-end latency per model by the bucket
  arithmetic: the period's increase of every ``_bucket`` series (from the rollups), summed per
  bound over the model's targets, then :func:`agent.series_math.histogram_quantile`.
- VRAM: the highest ``gpuwatch_gpu_memory_used_bytes`` any rollup row saw (its ``max``) and the
  GPU's total memory, per GPU; GPU names from ``gpuwatch_gpu_info``.
- alerts: ``alert_history`` rows firing at some time in the period (fired before its end, not
  resolved before its start), counted per rule, with the firing time clipped to the period (an
  alert still firing counts up to the period's end, or ``now`` when that is earlier). Queue
  incidents are the QueueGrowing ones among them.
- budget: the fleet's, whatever the filters (a budget is for the whole account): spend month to
  date at the period's end (or ``now``) by :func:`agent.budget_alerts.gather_budget`, and the
  month-end forecast as ProjectedOverBudget computes it: spent + the last 24 h's metered pace x
  the time left in the month.
- daily series: the same sums grouped by local day (the configured time zone) in the database.
  Hour rows belong to the day their hour starts in; in a zone whose offset is not whole hours,
  the half hour around midnight is counted in the day the hour starts in.

Filters. ``hosts`` restricts every figure to those hosts (GPUs, targets, tokens, latency,
alerts whose ``host`` label, or scope, is one of them). ``models`` restricts to those models:
their tokens, cost and latency; the targets that reported them (the ``model`` label on the token
series); and the GPUs allocated to those targets in the period (``gpu_allocations``). GPU-level
figures (spend, GPU-hours, idle cost, the GPU rows and daily series) count those GPUs whole,
because a GPU is rented whole: a GPU shared with a model outside the filter shows in full, while
the model rows carry only their share. Alerts are kept when their ``model``, ``target`` or
``gpu_uuid`` label is among the selected ones. Billed spend cannot be cut by host or model
(providers bill accounts): a filtered report shows metered spend only.

Recommendations, each with the numbers behind it (a month is 730 hours, 8,760 / 12):

- pod vs serverless vs API per model (:mod:`agent.breakeven`) at the measured duty cycle:
  requests per day, busy GPU-seconds per request (the model's share of its GPUs' busy time) and
  output tokens per request over the period, as ``gpuwatch breakeven`` measures them; the pod
  costs what the model's GPUs cost per day. Serverless at $2.50 per GPU-hour and an API at $0.40
  per million tokens (economics.md's worked break-even figures) unless
  ``[alerts.rules.CostPerMtokHigh] api_usd_per_million`` names the API price to compare with.
  Cold starts are not counted (the burst count is not measured).
- a smaller GPU: a serving GPU whose VRAM peak plus a 20 % margin (economics.md keeps 15-20 %
  against out-of-memory; the safe end) fits a smaller card of :data:`CATALOG` that costs less
  per hour than the GPU's metered rate.
- consolidation: GPUs under 50 % busy; how many GPUs their busy time needs at a 70 % target
  utilisation, and what releasing the most expensive of the rest saves.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any

from sqlalchemy import Connection, Engine, Select, case, func, literal, select, union_all

from agent.billing import billed
from agent.breakeven import Prices, Workload, compare, percent, usd
from agent.budget_alerts import gather_budget
from agent.config import Config
from agent.cost import (
    MILLION,
    OUTPUT,
    PROMPT,
    PROMPT_COMPUTED,
    REQUESTS,
    Split,
    TokenKey,
    Tokens,
    model_shares,
    series_ranges,
    summarize,
    tokens_by_target,
)
from agent.report_model import (
    AlertRow,
    Budget,
    DailySpend,
    GpuDay,
    GpuRow,
    HostRow,
    Latency,
    ModelDay,
    ModelRow,
    Period,
    QueueIncident,
    Recommendation,
    Report,
    SpendSource,
    Totals,
)
from agent.report_period import local_days, previous_period
from agent.series_math import histogram_quantile
from migrations.schema import (
    UtcDateTime,
    alert_history,
    gpu_allocations,
    gpu_usage,
    rollups,
    series,
)

HOUR = 3600
GiB = 1 << 30
MINUTE = timedelta(minutes=1)
HOURS_PER_MONTH = Decimal(730)  # 8,760 / 12: what "a month" of savings means
TOP_WASTE = 5
QUEUE_RULE = "QueueGrowing"
TTFT = "gpuwatch_engine_ttft_seconds_bucket"
E2E = "gpuwatch_engine_e2e_latency_seconds_bucket"
MEMORY_USED = "gpuwatch_gpu_memory_used_bytes"
MEMORY_TOTAL = "gpuwatch_gpu_memory_total_bytes"
GPU_INFO = "gpuwatch_gpu_info"
TOKEN_METRICS = (OUTPUT, PROMPT_COMPUTED, PROMPT, REQUESTS)

# Prices the comparison uses when the configuration names none: economics.md, "Pod (dedicated)
# vs serverless vs API", worked break-even (a serverless A100 80GB at $2.50/h; a hosted token
# API at $0.40 per million tokens).
SERVERLESS_USD_PER_HOUR = Decimal("2.50")
API_USD_PER_MILLION = Decimal("0.40")
VRAM_MARGIN = Decimal("0.20")  # economics.md "Sizing facts": keep 15-20 % against OOM
LOW_UTILIZATION = 0.5  # below this a GPU is a consolidation candidate (economics.md: x2 cost)
TARGET_UTILIZATION = 0.7  # what consolidated GPUs may run at, leaving room for peaks


@dataclass(frozen=True, slots=True)
class CatalogGpu:
    name: str
    memory_gb: int  # as the vendors print it, in 10^9 bytes
    usd_per_hour: Decimal  # a typical on-demand price per GPU-hour
    source: str

    @property
    def memory_bytes(self) -> int:
        # Decimal GB are a little under what the cards report usable (an L4's 24 GB is 22.4 GiB,
        # NVML shows 22.5 GiB; an H200's 141 GB is 131 GiB of its 139.8): a fit here fits.
        return self.memory_gb * 10**9


# Smaller GPUs to suggest. Memory: economics.md "Sizing facts" (the rough catalogue). Prices:
# the project's reference notes, billing-apis.md section 5 "Rate-card defaults: published
# on-demand prices", which transcribe the vendors' pages with dates: Modal per-second prices
# (modal.com/pricing, via api-evangelist/modal-labs, 2026-07; techbytes.app 2026-05), Lambda
# (its /instance-types API, 2026-07-30; lambda.ai/instances, 2026-09-20), RunPod Secure Cloud
# (runpod.io/pricing, via datareceipts, 2026-11-09). Where several are listed, the higher, so
# that a saving is not overstated. Live prices differ: the recommendation names its source.
CATALOG = (
    CatalogGpu("T4 16GB", 16, Decimal("0.59"), "Modal $0.000164/s"),
    CatalogGpu("L4 24GB", 24, Decimal("0.80"), "Modal $0.000222/s"),
    CatalogGpu("A10 24GB", 24, Decimal("1.29"), "Lambda on-demand, 2026-07"),
    CatalogGpu("A100 40GB", 40, Decimal("1.99"), "Lambda on-demand, 2026-07"),
    CatalogGpu("A100 80GB", 80, Decimal("2.79"), "Lambda 8x SXM, 2026-09"),
    CatalogGpu("H100 80GB", 80, Decimal("3.99"), "RunPod Secure SXM, 2026-11"),
    CatalogGpu("H200 141GB", 141, Decimal("4.54"), "Modal $0.001261/s"),
    CatalogGpu("B200 180GB", 180, Decimal("6.69"), "Lambda 8x, 2026-09"),
)

GpuKey = tuple[str, str]  # (host, gpu_uuid)
TargetKey = tuple[str, str]  # (host, target)


def build_report(
    engine: Engine,
    config: Config,
    period: Period,
    *,
    now: datetime,
    hosts: Sequence[str] = (),
    models: Sequence[str] = (),
) -> Report:
    """Every figure of ``period`` (see the module docstring), restricted to ``hosts`` and
    ``models`` when given."""
    wanted = _Wanted(frozenset(hosts), frozenset(models))
    before = previous_period(period)
    days = local_days(period)
    rule = config.cost.useful_tokens
    with engine.connect() as conn:
        current = _Window.read(conn, period.start, period.end, wanted, [at for _, at in days])
        previous = _Window.read(conn, before.start, before.end, wanted, [before.start])
        gauges = _gauges(conn, current.split, wanted)
        names = _gpu_names(conn, wanted)
        history = _history(conn, period)
    figures = _Figures.of(current, wanted, rule)
    earlier = _Figures.of(previous, wanted, rule)
    billed_usd = None if wanted.any else _billed_by_source(engine, period)
    gpus = _gpu_rows(figures, gauges, names)
    alerts = [a for a in history if wanted.keeps_alert(a, figures.targets, figures.gpus)]
    models_rows = _model_rows(figures, earlier, gauges)
    return Report(
        generated_at=now,
        period=period,
        previous_period=before,
        hosts_filter=tuple(sorted(wanted.hosts)),
        models_filter=tuple(sorted(wanted.models)),
        useful_tokens_rule=rule,
        totals=_totals(figures, earlier, billed_usd),
        spend_sources=_spend_sources(figures, billed_usd),
        models=models_rows,
        hosts=_host_rows(figures, earlier),
        gpus=gpus,
        top_waste=_top_waste(gpus),
        alerts=_alert_rows(alerts, period, now),
        queue_incidents=_queue_incidents(alerts),
        budget=_budget(engine, config, period, now),
        recommendations=_recommendations(figures, gpus, config, period, now),
        daily_spend=_daily_spend(figures, days),
        model_days=_model_days(figures, days, rule),
        gpu_days=_gpu_days(figures, gpus, days),
    )


# -- what to keep ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Wanted:
    hosts: frozenset[str]  # empty: every host
    models: frozenset[str]  # empty: every model

    @property
    def any(self) -> bool:
        return bool(self.hosts or self.models)

    def model(self, model: str) -> bool:
        return not self.models or model in self.models

    def keeps_alert(
        self, alert: _Alert, targets: frozenset[TargetKey], gpus: frozenset[GpuKey]
    ) -> bool:
        labels = alert.labels
        host = labels.get("host") or (alert.scope if alert.scope != "fleet" else None)
        if self.hosts and host not in self.hosts:
            return False
        if not self.models:
            return True
        if "model" in labels:
            return labels["model"] in self.models
        if "target" in labels:
            return (host or "", labels["target"]) in targets
        return "gpu_uuid" in labels and (host or "", labels["gpu_uuid"]) in gpus


# -- reading a window -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Usage:
    index: str = ""
    cost: Decimal = Decimal(0)
    idle: Decimal = Decimal(0)
    observed: float = 0.0
    busy: float = 0.0

    def __add__(self, other: _Usage) -> _Usage:
        return _Usage(
            self.index or other.index,
            self.cost + other.cost,
            self.idle + other.idle,
            self.observed + other.observed,
            self.busy + other.busy,
        )

    @property
    def utilization(self) -> float | None:
        return self.busy / self.observed if self.observed else None


@dataclass(frozen=True, slots=True)
class _Allocated:
    cost: Decimal = Decimal(0)
    seconds: float = 0.0
    busy: float = 0.0

    def __add__(self, other: _Allocated) -> _Allocated:
        return _Allocated(
            self.cost + other.cost, self.seconds + other.seconds, self.busy + other.busy
        )


@dataclass(frozen=True, slots=True)
class _Window:
    """A period's sums as the database returns them, per local day (index into the period's
    days; a single day 0 for the previous period)."""

    split: Split
    usage: Mapping[GpuKey, Mapping[int, _Usage]]
    allocations: Mapping[tuple[str, str, str], Mapping[int, _Allocated]]  # host, gpu, target
    tokens: Mapping[int, Mapping[TokenKey, Tokens]]

    @classmethod
    def read(
        cls,
        conn: Connection,
        start: datetime,
        end: datetime,
        wanted: _Wanted,
        day_starts: Sequence[datetime],
    ) -> _Window:
        split = Split.read(conn, start, end)
        return cls(
            split,
            _usage(conn, split, wanted, day_starts),
            _allocations(conn, split, wanted, day_starts),
            _tokens(conn, split, wanted, day_starts),
        )


def _day_of(column: Any, day_starts: Sequence[datetime]) -> Any:
    """The index of the local day a row's start falls in, computed by the database."""
    if len(day_starts) < 2:
        return literal(0)
    whens = [(column < literal(at, UtcDateTime()), i) for i, at in enumerate(day_starts[1:])]
    return case(*whens, else_=len(day_starts) - 1)


def _grouped(inner: Select[Any], keys: Sequence[str], sums: Mapping[str, str]) -> Select[Any]:
    """``inner``'s rows aggregated per ``keys`` (``sums``: column -> "sum" or "max"): an outer
    query, so that GROUP BY names plain columns (PostgreSQL does not match a CASE repeated
    with fresh bind parameters)."""
    sub = inner.subquery()
    columns = [sub.c[k] for k in keys]
    aggregates = [getattr(func, fn)(sub.c[name]).label(name) for name, fn in sums.items()]
    return select(*columns, *aggregates).group_by(*columns)


def _usage(
    conn: Connection, split: Split, wanted: _Wanted, day_starts: Sequence[datetime]
) -> dict[GpuKey, dict[int, _Usage]]:
    t = gpu_usage.c
    inner = select(
        t.host, t.gpu_uuid, t.gpu_index, _day_of(t.start, day_starts).label("day"),
        t.cost_usd, t.idle_cost_usd, t.observed_seconds, t.busy_seconds,
    ).where(split.rows(gpu_usage, t.host))  # fmt: skip
    if wanted.hosts:
        inner = inner.where(t.host.in_(sorted(wanted.hosts)))
    query = _grouped(inner, ("host", "gpu_uuid", "day"), {
        "gpu_index": "max", "cost_usd": "sum", "idle_cost_usd": "sum",
        "observed_seconds": "sum", "busy_seconds": "sum"})  # fmt: skip
    out: dict[GpuKey, dict[int, _Usage]] = defaultdict(dict)
    for r in conn.execute(query).mappings():
        out[(r["host"], r["gpu_uuid"])][r["day"]] = _Usage(
            r["gpu_index"], _money(r["cost_usd"]), _money(r["idle_cost_usd"]),
            r["observed_seconds"] or 0.0, r["busy_seconds"] or 0.0,
        )  # fmt: skip
    return out


def _allocations(
    conn: Connection, split: Split, wanted: _Wanted, day_starts: Sequence[datetime]
) -> dict[tuple[str, str, str], dict[int, _Allocated]]:
    t = gpu_allocations.c
    inner = select(
        t.host, t.gpu_uuid, t.target, _day_of(t.start, day_starts).label("day"),
        t.cost_usd, t.seconds, t.busy_seconds,
    ).where(split.rows(gpu_allocations, t.host))  # fmt: skip
    if wanted.hosts:
        inner = inner.where(t.host.in_(sorted(wanted.hosts)))
    sums = {"cost_usd": "sum", "seconds": "sum", "busy_seconds": "sum"}
    query = _grouped(inner, ("host", "gpu_uuid", "target", "day"), sums)
    out: dict[tuple[str, str, str], dict[int, _Allocated]] = defaultdict(dict)
    for r in conn.execute(query).mappings():
        out[(r["host"], r["gpu_uuid"], r["target"])][r["day"]] = _Allocated(
            _money(r["cost_usd"]), r["seconds"] or 0.0, r["busy_seconds"] or 0.0
        )
    return out


@dataclass(frozen=True, slots=True)
class _Series:
    host: str
    metric: str
    labels_json: str
    labels: Mapping[str, str]


def _series(conn: Connection, metrics: Sequence[str], wanted: _Wanted) -> dict[int, _Series]:
    query = select(series.c.id, series.c.host, series.c.metric, series.c.labels).where(
        series.c.metric.in_(metrics)
    )
    if wanted.hosts:
        query = query.where(series.c.host.in_(sorted(wanted.hosts)))
    return {
        sid: _Series(host, metric, labels, json.loads(labels))
        for sid, host, metric, labels in conn.execute(query)
    }


def _series_sums(
    conn: Connection,
    split: Split,
    wanted: Mapping[int, _Series],
    day_starts: Sequence[datetime],
) -> dict[tuple[int, int], tuple[float | None, float | None]]:
    """(series id, day) -> (sum of increase, max of max) over the window, for the wanted series
    only (agent.cost.series_ranges: primary-key ranges per series), each range summed by the
    database and the few partial sums added here. Without days, rows are grouped by series
    id alone, in the key's order: a computed day column would make the database sort them."""
    r = rollups.c
    parts = []
    for condition in series_ranges(split, {sid: s.host for sid, s in wanted.items()}):
        if len(day_starts) > 1:
            inner = select(r.series_id, _day_of(r.start, day_starts).label("day"), r.increase,
                           r.max).where(condition)  # fmt: skip
            parts.append(_grouped(inner, ("series_id", "day"),
                                  {"increase": "sum", "max": "max"}))  # fmt: skip
        else:
            parts.append(
                select(r.series_id, literal(0), func.sum(r.increase), func.max(r.max))
                .where(condition)
                .group_by(r.series_id)
            )
    out: dict[tuple[int, int], tuple[float | None, float | None]] = {}
    for sid, day, increase, highest in conn.execute(union_all(*parts)) if parts else ():
        total, peak = out.get((sid, day), (None, None))
        out[(sid, day)] = (_plus(total, increase), _max(peak, highest))
    return out


def _plus(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else a + b


def _max(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else max(a, b)


def _tokens(
    conn: Connection, split: Split, wanted: _Wanted, day_starts: Sequence[datetime]
) -> dict[int, dict[TokenKey, Tokens]]:
    meta = _series(conn, TOKEN_METRICS, wanted)
    per_day: dict[int, list[tuple[str, str, str, float | None]]] = defaultdict(list)
    for (sid, day), (increase, _) in _series_sums(conn, split, meta, day_starts).items():
        s = meta[sid]
        per_day[day].append((s.host, s.metric, s.labels_json, increase))
    return {day: tokens_by_target(rows) for day, rows in per_day.items()}


@dataclass(frozen=True, slots=True)
class _Gauges:
    """Histogram bucket increases per (model, kind) and VRAM per GPU, over the window."""

    buckets: Mapping[tuple[str, str], Mapping[float, float]]  # (model, "ttft"|"e2e") -> le -> n
    vram_peak: Mapping[GpuKey, float]
    vram_total: Mapping[GpuKey, float]


def _gauges(conn: Connection, split: Split, wanted: _Wanted) -> _Gauges:
    meta = _series(conn, (TTFT, E2E, MEMORY_USED, MEMORY_TOTAL), wanted)
    meta = {sid: s for sid, s in meta.items() if "mig_instance" not in s.labels}
    buckets: dict[tuple[str, str], dict[float, float]] = defaultdict(lambda: defaultdict(float))
    peak: dict[GpuKey, float] = {}
    total: dict[GpuKey, float] = {}
    for (sid, _), (increase, highest) in _series_sums(conn, split, meta, ()).items():
        s = meta[sid]
        if s.metric in (TTFT, E2E):
            model, le = s.labels.get("model", ""), s.labels.get("le")
            if le is not None and increase is not None and wanted.model(model):
                kind = "ttft" if s.metric == TTFT else "e2e"
                buckets[(model, kind)][float(le)] += increase
            continue
        key = (s.host, s.labels.get("gpu_uuid", ""))
        into = peak if s.metric == MEMORY_USED else total
        if highest is not None:
            into[key] = max(into.get(key, highest), highest)
    return _Gauges(buckets, peak, total)


def _gpu_names(conn: Connection, wanted: _Wanted) -> dict[GpuKey, str]:
    out: dict[GpuKey, str] = {}
    for s in _series(conn, (GPU_INFO,), wanted).values():
        name = s.labels.get("gpu_name")
        if name and "mig_instance" not in s.labels:
            out[(s.host, s.labels.get("gpu_uuid", ""))] = name
    return out


def _money(value: Any) -> Decimal:
    if value is None:
        return Decimal(0)
    return value if isinstance(value, Decimal) else Decimal(repr(value))


# -- the window's figures, under the filters ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Figures:
    """A window after the filters: the GPUs and targets kept, and their sums."""

    window: _Window
    rule: str
    gpus: frozenset[GpuKey]
    targets: frozenset[TargetKey]
    wanted: _Wanted
    all_tokens: Mapping[TokenKey, Tokens]  # every model the hosts served (for cost shares)
    tokens: Mapping[TokenKey, Tokens]  # the wanted models'
    usage: Mapping[GpuKey, _Usage]  # per kept GPU, over the window

    @classmethod
    def of(cls, window: _Window, wanted: _Wanted, rule: str) -> _Figures:
        all_tokens = _sum_days(window.tokens.values())
        if wanted.models:
            targets = frozenset(
                {(h, t) for h, t, m in all_tokens if m in wanted.models}
                | {(h, t) for h, _, t in window.allocations if t in wanted.models}
            )
            gpus = frozenset(
                (h, g)
                for (h, g, t), days in window.allocations.items()
                if (h, t) in targets and sum(a.seconds for a in days.values()) > 0
            )
        else:
            targets = frozenset(
                {(h, t) for h, t, _ in all_tokens} | {(h, t) for h, _, t in window.allocations}
            )
            gpus = frozenset(window.usage)
        usage = {
            key: sum(days.values(), _Usage()) for key, days in window.usage.items() if key in gpus
        }
        tokens = {k: t for k, t in all_tokens.items() if wanted.model(k[2])}
        return cls(window, rule, gpus, targets, wanted, all_tokens, tokens, usage)

    @property
    def total(self) -> _Usage:
        return sum(self.usage.values(), _Usage())

    @property
    def produced(self) -> Tokens:
        return sum(self.tokens.values(), Tokens())

    def allocated(self) -> _Allocated:
        """Every target's allocation on the kept GPUs (a GPU counts whole)."""
        return sum(
            (
                a
                for (h, g, _), days in self.window.allocations.items()
                if (h, g) in self.gpus
                for a in days.values()
            ),
            _Allocated(),
        )

    def target_totals(self, day: int | None = None) -> dict[TargetKey, _Allocated]:
        out: dict[TargetKey, _Allocated] = defaultdict(_Allocated)
        for (h, _, t), days in self.window.allocations.items():
            for d, a in days.items():
                if day is None or d == day:
                    out[(h, t)] = out[(h, t)] + a
        return out

    def model_sums(self, day: int | None = None) -> dict[str, _Share]:
        """The wanted models' cost, busy time and tokens (over one day, or the window): each
        target's allocated cost and busy GPU time shared among its models as agent.cost
        shares cost (by useful tokens)."""
        tokens = self.all_tokens if day is None else _sum_days([self.window.tokens.get(day, {})])
        targets = self.target_totals(day)
        shares = model_shares(targets, tokens, self.rule)
        out: dict[str, _Share] = defaultdict(_Share)
        for key, a in targets.items():
            for model, share in shares[key].items():
                out[model] = out[model] + _Share(a.cost * share, a.busy * float(share))
        for (_, _, model), t in tokens.items():
            out[model] = out[model] + _Share(tokens=t)
        return {m: out[m] for m in sorted(out) if self.wanted.model(m)}


@dataclass(frozen=True, slots=True)
class _Share:
    """What a model (or a host) cost, kept busy and produced."""

    cost: Decimal = Decimal(0)
    busy: float = 0.0
    tokens: Tokens = Tokens()

    def __add__(self, other: _Share) -> _Share:
        return _Share(self.cost + other.cost, self.busy + other.busy, self.tokens + other.tokens)

    def per_million(self, rule: str) -> Decimal | None:
        return _per_million(self.cost, self.tokens.useful(rule))


def _sum_days(days: Iterable[Mapping[TokenKey, Tokens]]) -> dict[TokenKey, Tokens]:
    out: dict[TokenKey, Tokens] = defaultdict(Tokens)
    for day in days:
        for key, t in day.items():
            out[key] = out[key] + t
    return dict(out)


def _per_million(cost: Decimal, tokens: float) -> Decimal | None:
    if tokens <= 0:
        return None
    return cost / Decimal(repr(tokens)) * MILLION


def _hours(seconds: float) -> float:
    return seconds / HOUR


# -- the report's parts ---------------------------------------------------------------------------


def _totals(f: _Figures, earlier: _Figures, billed_usd: Mapping[str, Decimal] | None) -> Totals:
    total, produced, allocated = f.total, f.produced, f.allocated()
    billed_total = None if not billed_usd else sum(billed_usd.values(), Decimal(0))
    spend = billed_total if billed_total is not None and billed_total > total.cost else total.cost
    useful = produced.useful(f.rule)
    return Totals(
        spend_usd=spend,
        metered_usd=total.cost,
        billed_usd=billed_total,
        useful_tokens=useful,
        output_tokens=produced.output,
        total_tokens=produced.output + produced.prompt,
        cost_per_million_tokens_usd=_per_million(total.cost, useful),
        previous_cost_per_million_tokens_usd=_per_million(
            earlier.total.cost, earlier.produced.useful(f.rule)
        ),
        gpu_hours=_hours(total.observed),
        busy_gpu_hours=_hours(total.busy),
        idle_loaded_gpu_hours=_hours(allocated.seconds - allocated.busy),
        unallocated_gpu_hours=_hours(total.observed - allocated.seconds),
        utilization_ratio=total.utilization,
        idle_cost_usd=total.idle,
        requests=produced.requests,
    )


def _spend_sources(
    f: _Figures, billed_usd: Mapping[str, Decimal] | None
) -> tuple[SpendSource, ...]:
    metered = SpendSource("metered", "metered", f.total.cost)
    billed_rows = [SpendSource(s, "billed", usd) for s, usd in sorted((billed_usd or {}).items())]
    return (metered, *billed_rows)


def _billed_by_source(engine: Engine, period: Period) -> dict[str, Decimal]:
    amounts = billed(engine, period.start, period.end)
    return {source: amount for (source, currency), amount in amounts.items() if currency == "USD"}


def _model_rows(f: _Figures, earlier: _Figures, gauges: _Gauges) -> tuple[ModelRow, ...]:
    before = earlier.model_sums()
    return tuple(
        ModelRow(
            model=model,
            cost_usd=m.cost,
            useful_tokens=m.tokens.useful(f.rule),
            output_tokens=m.tokens.output,
            total_tokens=m.tokens.output + m.tokens.prompt,
            requests=m.tokens.requests,
            cost_per_million_tokens_usd=m.per_million(f.rule),
            previous_cost_per_million_tokens_usd=_previous(before.get(model), f.rule),
            ttft=_latency(gauges.buckets.get((model, "ttft"))),
            e2e=_latency(gauges.buckets.get((model, "e2e"))),
        )
        for model, m in f.model_sums().items()
    )


def _previous(share: _Share | None, rule: str) -> Decimal | None:
    return None if share is None else share.per_million(rule)


def _latency(by_le: Mapping[float, float] | None) -> Latency:
    if not by_le:
        return Latency()
    ordered = sorted(by_le.items())
    count = max(n for _, n in ordered)
    if count <= 0:
        return Latency()
    p50, p95, p99 = (histogram_quantile(q, ordered) for q in (0.5, 0.95, 0.99))
    return Latency(p50, p95, p99, count)


def _host_rows(f: _Figures, earlier: _Figures) -> tuple[HostRow, ...]:
    now, before, usage = _per_host(f), _per_host(earlier), _host_usage(f)
    return tuple(
        HostRow(
            host=host,
            cost_usd=h.cost,
            useful_tokens=h.tokens.useful(f.rule),
            cost_per_million_tokens_usd=h.per_million(f.rule),
            previous_cost_per_million_tokens_usd=_previous(before.get(host), f.rule),
            gpu_hours=_hours(usage[host].observed),
            utilization_ratio=usage[host].utilization,
        )
        for host, h in sorted(now.items())
    )


def _per_host(f: _Figures) -> dict[str, _Share]:
    """Per host, its kept GPUs' metered cost and its wanted models' tokens."""
    out: dict[str, _Share] = defaultdict(_Share)
    for (host, _), u in f.usage.items():
        out[host] = out[host] + _Share(u.cost)
    for (host, _, _), t in f.tokens.items():
        out[host] = out[host] + _Share(tokens=t)
    return out


def _host_usage(f: _Figures) -> dict[str, _Usage]:
    out: dict[str, _Usage] = defaultdict(_Usage)
    for (host, _), u in f.usage.items():
        out[host] = out[host] + u
    return out


def _gpu_rows(f: _Figures, gauges: _Gauges, names: Mapping[GpuKey, str]) -> tuple[GpuRow, ...]:
    rows = [
        GpuRow(
            host=host,
            gpu_uuid=uuid,
            gpu_index=u.index,
            gpu_name=names.get((host, uuid)),
            cost_usd=u.cost,
            idle_cost_usd=u.idle,
            observed_hours=_hours(u.observed),
            busy_hours=_hours(u.busy),
            utilization_ratio=u.utilization,
            vram_peak_bytes=gauges.vram_peak.get((host, uuid)),
            vram_total_bytes=gauges.vram_total.get((host, uuid)),
        )
        for (host, uuid), u in f.usage.items()
    ]
    return tuple(sorted(rows, key=lambda g: (g.host, _index_order(g.gpu_index), g.gpu_uuid)))


def _index_order(index: str) -> tuple[int, str]:
    return (int(index), "") if index.isdigit() else (1 << 30, index)


def _top_waste(gpus: Sequence[GpuRow]) -> tuple[GpuRow, ...]:
    wasteful = [g for g in gpus if g.idle_cost_usd > 0]
    return tuple(sorted(wasteful, key=lambda g: (-g.idle_cost_usd, g.host, g.gpu_uuid))[:TOP_WASTE])


# -- alerts ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Alert:
    scope: str
    rule: str
    labels: Mapping[str, str]
    fired_at: datetime
    resolved_at: datetime | None
    summary: str


def _history(conn: Connection, period: Period) -> list[_Alert]:
    t = alert_history.c
    query = (
        select(t.scope, t.rule, t.labels, t.fired_at, t.resolved_at, t.summary)
        .where(t.fired_at < period.end)
        .where(t.resolved_at.is_(None) | (t.resolved_at > period.start))
        .order_by(t.fired_at, t.id)
    )
    return [
        _Alert(scope, rule, json.loads(labels), fired, resolved, summary)
        for scope, rule, labels, fired, resolved, summary in conn.execute(query)
    ]


def _alert_rows(alerts: Sequence[_Alert], period: Period, now: datetime) -> tuple[AlertRow, ...]:
    cap = min(period.end, now)
    count: dict[str, int] = defaultdict(int)
    seconds: dict[str, float] = defaultdict(float)
    for a in alerts:
        low = max(a.fired_at, period.start)
        high = min(a.resolved_at or cap, cap)
        count[a.rule] += 1
        seconds[a.rule] += max((high - low).total_seconds(), 0.0)
    return tuple(AlertRow(rule, count[rule], seconds[rule]) for rule in sorted(count))


def _queue_incidents(alerts: Sequence[_Alert]) -> tuple[QueueIncident, ...]:
    return tuple(
        QueueIncident(
            host=a.labels.get("host", a.scope),
            target=a.labels.get("target", ""),
            model=a.labels.get("model", ""),
            fired_at=a.fired_at,
            resolved_at=a.resolved_at,
            summary=a.summary,
        )
        for a in alerts
        if a.rule == QUEUE_RULE
    )


# -- budget ---------------------------------------------------------------------------------------


def _budget(engine: Engine, config: Config, period: Period, now: datetime) -> Budget:
    """The fleet's month to date at the period's end (``now`` when earlier) and the forecast.

    gather_budget reads up to its ``now``'s minute; asked at the last instant before ``at``
    (so that a period ending on a month boundary reads the month it ends, not the next one),
    it stops a minute short, and that minute is added."""
    at = min(period.end, now.replace(second=0, microsecond=0))
    inputs = gather_budget(engine, config, at - timedelta(microseconds=1), config.alerts.rules)
    last_minute = summarize(engine, at - MINUTE, at, useful=config.cost.useful_tokens)
    inputs = replace(inputs, metered_usd=inputs.metered_usd + last_minute.fleet.cost_usd)
    spent, forecast = inputs.spent_usd, inputs.forecast_usd  # ProjectedOverBudget's arithmetic
    budget = inputs.budget
    return Budget(
        monthly_usd=budget,
        month=inputs.month,
        spent_usd=spent,
        used_ratio=None if budget is None else float(spent / budget),
        forecast_usd=forecast,
        forecast_ratio=None if budget is None else float(forecast / budget),
    )


# -- daily series ---------------------------------------------------------------------------------


def _daily_spend(f: _Figures, days: Sequence[tuple[date, datetime]]) -> tuple[DailySpend, ...]:
    cost = [Decimal(0)] * len(days)
    idle = [Decimal(0)] * len(days)
    for key, by_day in f.window.usage.items():
        if key not in f.gpus:
            continue
        for d, u in by_day.items():
            cost[d] += u.cost
            idle[d] += u.idle
    return tuple(DailySpend(day, cost[i] - idle[i], idle[i]) for i, (day, _) in enumerate(days))


def _model_days(
    f: _Figures, days: Sequence[tuple[date, datetime]], rule: str
) -> tuple[ModelDay, ...]:
    names = list(f.model_sums())
    out = []
    for i, (day, _) in enumerate(days):
        sums = f.model_sums(i)
        for model in names:
            out.append(ModelDay(model, day, sums.get(model, _Share()).per_million(rule)))
    return tuple(out)


def _gpu_days(
    f: _Figures, gpus: Sequence[GpuRow], days: Sequence[tuple[date, datetime]]
) -> tuple[GpuDay, ...]:
    out = []
    for g in gpus:
        by_day = f.window.usage.get((g.host, g.gpu_uuid), {})
        for i, (day, _) in enumerate(days):
            u = by_day.get(i)
            util = None if u is None else u.utilization
            out.append(GpuDay(g.host, g.gpu_uuid, g.gpu_index, day, util))
    return tuple(out)


# -- recommendations ------------------------------------------------------------------------------


def _recommendations(
    f: _Figures, gpus: Sequence[GpuRow], config: Config, period: Period, now: datetime
) -> tuple[Recommendation, ...]:
    found = [
        *_deployment_advice(f, config, period, now),
        *_smaller_gpus(f, gpus),
        *_consolidation(gpus),
    ]
    return tuple(
        sorted(
            found, key=lambda r: (r.saving_usd_per_month is None, -(r.saving_usd_per_month or 0))
        )
    )


def _api_price(config: Config) -> tuple[Decimal, str]:
    spec = config.alerts.rules.get("CostPerMtokHigh")
    configured = None if spec is None else spec.thresholds.get("api_usd_per_million")
    if configured is not None:
        return Decimal(
            repr(float(configured))
        ), "[alerts.rules.CostPerMtokHigh] api_usd_per_million"
    return API_USD_PER_MILLION, "default, economics.md worked break-even"


def _deployment_advice(
    f: _Figures, config: Config, period: Period, now: datetime
) -> list[Recommendation]:
    """Per model: pod (what its GPUs cost now) vs serverless vs API at its measured load."""
    span = min(period.end, now) - period.start
    days = Decimal(repr(span.total_seconds() / 86400))
    if days <= 0:
        return []
    api, api_source = _api_price(config)
    out = []
    for model, m in f.model_sums().items():
        if m.tokens.requests <= 0 or m.cost <= 0:
            continue
        prices = Prices(
            pod_usd_per_hour=m.cost / days / 24,
            serverless_usd_per_hour=SERVERLESS_USD_PER_HOUR,
            api_usd_per_million_tokens=api,
        )
        result = compare(_workload(m, days), prices)
        best = result.cheapest
        saving = None
        if best != "pod":
            cheapest = result.usd_per_day(best) or result.pod_usd_per_day
            saving = (result.pod_usd_per_day - cheapest) * HOURS_PER_MONTH / 24
        detail = (
            f"{result.recommendation}. Measured over {period.label}: "
            f"{m.tokens.requests:,.0f} requests, {m.busy / HOUR:,.1f} busy GPU-hours, "
            f"{m.tokens.output:,.0f} output tokens; the pod is what the model's GPUs cost, "
            f"{usd(prices.pod_usd_per_hour)}/h. Prices compared: serverless "
            f"{usd(SERVERLESS_USD_PER_HOUR)} per GPU-hour (economics.md default, a serverless "
            f"A100 80GB), API {_rate(api)} per million tokens ({api_source}); cold starts not "
            "counted."
        )
        if saving is not None:
            detail += f" Saving {usd(saving)} a month (730 h)."
        out.append(Recommendation(best, f"{model}: {_ADVICE[best]}", detail, saving))
    return out


_ADVICE = {
    "pod": "keep the dedicated GPU(s)",
    "serverless": "serverless GPUs would cost less than the dedicated ones",
    "api": "a token API would cost less than the dedicated GPU(s)",
}


def _workload(m: _Share, days: Decimal) -> Workload:
    """The model's day, as `gpuwatch breakeven` measures it (agent.cost_cli.measured_workload):
    requests, busy GPU-seconds per request, output tokens per request."""
    requests = Decimal(repr(m.tokens.requests))
    output = Decimal(repr(m.tokens.output))
    return Workload(
        requests_per_day=requests / days,
        gpu_seconds_per_request=Decimal(repr(m.busy)) / requests,
        tokens_per_request=output / requests if output else None,
    )


def _rate(value: Decimal) -> str:
    """'$0.40', but '$0.125' rather than a rounded '$0.13'."""
    return usd(value) if value == value.quantize(Decimal("0.01")) else f"${value.normalize():f}"


def _paid_per_hour(g: GpuRow) -> Decimal | None:
    if g.observed_hours <= 0:
        return None
    return g.cost_usd / Decimal(repr(g.observed_hours))


def _smaller_gpus(f: _Figures, gpus: Sequence[GpuRow]) -> list[Recommendation]:
    """Serving GPUs whose VRAM peak plus the margin fits a cheaper, smaller card; grouped per
    host and card."""
    serving = {
        (h, g)
        for (h, g, _), days in f.window.allocations.items()
        if sum(a.seconds for a in days.values()) > 0
    }
    groups: dict[tuple[str, CatalogGpu], list[tuple[GpuRow, Decimal]]] = defaultdict(list)
    for g in gpus:
        paid = _paid_per_hour(g)
        card = None if paid is None else _smaller_card(g, paid)
        if paid is not None and card is not None and (g.host, g.gpu_uuid) in serving:
            groups[(g.host, card)].append((g, paid))
    out = []
    for (host, card), members in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1].name)):
        saving = sum(((paid - card.usd_per_hour) * HOURS_PER_MONTH for _, paid in members),
                     Decimal(0))  # fmt: skip
        peak = max(g.vram_peak_bytes or 0.0 for g, _ in members)
        listed = ", ".join(
            f"GPU {g.gpu_index} ({g.gpu_name or 'unknown'}, {_gib(g.vram_peak_bytes)} of "
            f"{_gib(g.vram_total_bytes)} peak, {usd(paid)}/h)"
            for g, paid in members
        )
        detail = (
            f"{listed}. With a {_pct(VRAM_MARGIN)} margin against out-of-memory the highest peak "
            f"needs {_gib(peak * float(1 + VRAM_MARGIN))}, which fits one {card.name} at about "
            f"{usd(card.usd_per_hour)}/h ({card.source}). Saving {usd(saving)} a month (730 h)."
        )
        title = f"{host}: move {len(members)} GPU(s) to a smaller {card.name}"
        out.append(Recommendation("smaller_gpu", title, detail, saving))
    return out


def _smaller_card(g: GpuRow, paid: Decimal) -> CatalogGpu | None:
    """The cheapest card with less memory than ``g`` that holds its peak plus the margin and
    costs less than ``g`` does; None without one (or without VRAM figures)."""
    if g.vram_peak_bytes is None or g.vram_total_bytes is None:
        return None
    need = Decimal(repr(g.vram_peak_bytes)) * (1 + VRAM_MARGIN)
    total = g.vram_total_bytes
    fits = [c for c in CATALOG if need <= c.memory_bytes < total and c.usd_per_hour < paid]
    return min(fits, key=lambda c: (c.usd_per_hour, c.memory_gb), default=None)


def _pct(ratio: float | Decimal) -> str:
    return f"{float(ratio) * 100:g} %"


def _gib(value: float | None) -> str:
    return "?" if value is None else f"{value / GiB:,.1f} GiB"


def _consolidation(gpus: Sequence[GpuRow]) -> list[Recommendation]:
    """Low-utilisation GPUs: how many their busy time needs at the target utilisation."""
    low = [
        g
        for g in gpus
        if g.utilization_ratio is not None
        and g.utilization_ratio < LOW_UTILIZATION
        and _paid_per_hour(g) is not None
    ]
    if not low:
        return []
    busy = sum(g.busy_hours for g in low)
    hours = sum(g.observed_hours for g in low) / len(low)  # the span each GPU ran, on average
    needed = math.ceil(busy / (hours * TARGET_UTILIZATION) - 1e-9) if hours > 0 else len(low)
    if needed >= len(low):
        return []
    # The most expensive first; at one price, the least busy (whose work is easiest to move).
    order = sorted(low, key=lambda g: (-(_paid_per_hour(g) or 0), g.utilization_ratio or 0.0,
                                       g.host, g.gpu_uuid))  # fmt: skip
    released = order[: len(low) - needed]
    per_hour = sum((_paid_per_hour(g) or Decimal(0) for g in released), Decimal(0))
    saving = per_hour * HOURS_PER_MONTH
    listed = _some(
        f"{g.host}/{g.gpu_index} {percent(Decimal(repr(g.utilization_ratio or 0.0)))}" for g in low
    )
    names = _some(f"{g.host}/{g.gpu_index}" for g in released)
    detail = (
        f"{len(low)} GPU(s) were busy less than {_pct(LOW_UTILIZATION)} of the time ({listed}): "
        f"{busy:,.1f} busy GPU-hours over {hours:,.1f} h each, which {needed} GPU(s) carry at a "
        f"{_pct(TARGET_UTILIZATION)} target utilization. Releasing {len(released)} ({names}; the "
        f"most expensive first, at one price the least busy) saves {usd(per_hour)}/h, "
        f"{usd(saving)} a month (730 h); the models moved must fit the remaining GPUs' memory."
    )
    title = f"Consolidate {len(low)} low-utilization GPU(s) onto {needed}"
    return [Recommendation("consolidate", title, detail, saving)]


def _some(items: Iterable[str], shown: int = 8) -> str:
    """The first ``shown`` items, and how many more: a detail line stays readable for a fleet."""
    listed = list(items)
    more = f" and {len(listed) - shown} more" if len(listed) > shown else ""
    return ", ".join(listed[:shown]) + more
