"""The report's database reads: what a window of time holds, summed by the database.

A window is read the way :func:`agent.cost.summarize.summarize` reads one: per host, day rows up
to its day watermark, hour rows up to its hour watermark and minute rows for the rest, summed by
the database; never raw samples. Day rows are UTC days: in a zone with an offset, each counts in the
local day of its noon, and the hours of it that belong to the neighbouring day are moved there
(:mod:`agent.reporting.local_days`).
:class:`Window` holds the cost ledger (``gpu_usage``, ``gpu_allocations``) and the token counters'
restart-safe increases from the rollups (``increase``), per local day of the period: the database
groups them by day (the configured time zone). Hour rows belong to the day their hour starts in;
in a zone whose offset is not whole hours, the half hour around midnight is counted in the day
the hour starts in.

Beside the window: the histogram buckets' increases and the VRAM gauges' highest ``max``
(:func:`gauges`), the GPU names from ``gpuwatch_gpu_info`` (:func:`gpu_names`), the
``alert_history`` rows firing at some time in the period (:func:`history`: fired before its
end, not resolved before its start), and the providers' ``cost_records`` of kind billed whose
charge starts in the period, per source (:func:`billed_by_source`, USD only).

:class:`Wanted` is the report's filters. ``hosts`` restricts every read to those hosts; the
``models`` filter is applied to the latency buckets here and to the rest by
:mod:`agent.reporting.figures`, which needs every model's tokens to share cost.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import (
    Connection,
    Double,
    Engine,
    Select,
    case,
    cast,
    func,
    literal,
    null,
    or_,
    select,
    union_all,
)
from sqlalchemy.dialects import postgresql

from agent.cost.billing import billed
from agent.cost.latency import latency_buckets
from agent.cost.slo_spans import Counts, span_counts
from agent.cost.split import DAY, HOUR, Split, among, series_ranges
from agent.cost.summarize import (
    TOKEN_METRICS,
    TokenKey,
    Tokens,
    tokens_by_target,
    unpriced_seconds,
)
from agent.reporting.ledger_sums import Allocated, Usage
from agent.reporting.local_days import LocalDays
from agent.reporting.model import Period
from agent.storage import rolled_up
from migrations.schema import (
    UtcInstant,
    alert_history,
    gpu_allocations,
    gpu_usage,
    rollups,
    series,
)

MEMORY_USED, MEMORY_TOTAL = rolled_up.rolled_up(rolled_up.MEMORY_USED, rolled_up.MEMORY_TOTAL)
GPU_INFO = "gpuwatch_gpu_info"

GpuKey = tuple[str, str]  # (host, gpu_uuid)
TargetKey = tuple[str, str]  # (host, target)


# -- what to keep ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Wanted:
    """The report's filters: the hosts and models it is about."""

    hosts: frozenset[str]  # empty: every host
    models: frozenset[str]  # empty: every model

    @property
    def any(self) -> bool:
        return bool(self.hosts or self.models)

    def model(self, model: str) -> bool:
        return not self.models or model in self.models

    def keeps_alert(
        self, alert: Alert, targets: frozenset[TargetKey], gpus: frozenset[GpuKey]
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
class Window:
    """A period's sums as the database returns them, per local day (index into the period's
    days; a single day 0 for the previous period)."""

    split: Split
    usage: Mapping[GpuKey, Mapping[int, Usage]]
    allocations: Mapping[tuple[str, str, str], Mapping[int, Allocated]]  # host, gpu, target
    tokens: Mapping[int, Mapping[TokenKey, Tokens]]

    @classmethod
    def read(
        cls,
        conn: Connection,
        start: datetime,
        end: datetime,
        wanted: Wanted,
        day_starts: Sequence[datetime],
    ) -> Window:
        split = Split.read(conn, start, end)
        days = LocalDays.of(day_starts, split)
        return cls(
            split,
            _usage(conn, split, wanted, days),
            _allocations(conn, split, wanted, days),
            _tokens(conn, split, wanted, days),
        )


def _row_day(conn: Connection, table: Any, days: LocalDays) -> Any:
    """The local day a row counts in: a day row its noon's (:mod:`.local_days`), any other
    row its start's."""
    plain = _day_of(conn, table.c.start, days.day_starts)
    if days.aligned:
        return plain
    return case(
        (table.c.resolution == DAY, _day_of(conn, table.c.start, days.row_bounds)), else_=plain
    )


def _moved(
    conn: Connection,
    days: LocalDays,
    table: Any,
    until: Any,
    keys: Sequence[Any],
    sums: Sequence[Any],
) -> list[Select[Any]]:
    """The hour rows a day row counted in the wrong local day (those before ``until``, the
    end of the host's day rows): each added to its own day and taken from the day row's."""
    start, day = table.c.start, _day_of(conn, table.c.start, days.day_starts)
    out = []
    for delta, ranges in days.moved.items():
        where = (
            (table.c.resolution == HOUR)
            & or_(*((start >= a) & (start < b) for a, b in ranges))
            & (start < until)
        )
        out.append(select(*keys, day.label("day"), *sums).where(where))
        taken = [(-column).label(column.name) for column in sums]
        out.append(select(*keys, (day - delta).label("day"), *taken).where(where))
    return out


def _day_of(conn: Connection, column: Any, day_starts: Sequence[datetime]) -> Any:
    """The index of the local day a row's start falls in, computed by the database."""
    if len(day_starts) < 2:
        return literal(0)
    if conn.dialect.name == "postgresql":
        # The number of later day starts at or before the row's: a binary search per row,
        # where a CASE compares a month's row with half the month's days on average.
        bounds = postgresql.array([literal(at, UtcInstant()) for at in day_starts[1:]])
        return func.width_bucket(column, bounds)
    whens = [(column < literal(at, UtcInstant()), i) for i, at in enumerate(day_starts[1:])]
    return case(*whens, else_=len(day_starts) - 1)


def _grouped(inner: Any, keys: Sequence[str], sums: Mapping[str, str]) -> Select[Any]:
    """``inner``'s rows aggregated per ``keys`` (``sums``: column -> "sum" or "max"): an outer
    query, so that GROUP BY names plain columns (PostgreSQL does not match a CASE repeated
    with fresh bind parameters)."""
    sub = inner.subquery()
    columns = [sub.c[k] for k in keys]
    aggregates = [getattr(func, fn)(sub.c[name]).label(name) for name, fn in sums.items()]
    return select(*columns, *aggregates).group_by(*columns)


# The real-work and energy sums of gpu_usage (agent.reporting.ledger_sums.Usage).
_USAGE_EXTRA = (
    gpu_usage.c.sm_observed_seconds,
    gpu_usage.c.sm_active_seconds,
    gpu_usage.c.sm_idle_cost_usd,
    gpu_usage.c.energy_joules,
    gpu_usage.c.co2_grams,
    gpu_usage.c.power_integrated_seconds,
)


def _usage(
    conn: Connection, split: Split, wanted: Wanted, days: LocalDays
) -> dict[GpuKey, dict[int, Usage]]:
    t = gpu_usage.c
    keys = (t.host, t.gpu_uuid, t.gpu_index)
    unpriced = unpriced_seconds(t.cost_usd, t.observed_seconds).label("unpriced_seconds")
    sums = (t.cost_usd, t.idle_cost_usd, t.observed_seconds, t.busy_seconds, unpriced,
            *_USAGE_EXTRA)  # fmt: skip
    inner = select(*keys, _row_day(conn, gpu_usage, days).label("day"), *sums).where(
        split.rows(gpu_usage, t.host)
    )
    parts = [inner, *_moved(conn, days, gpu_usage, split.per_host(t.host, split.day_end), keys,
                            sums)]  # fmt: skip
    if wanted.hosts:
        parts = [part.where(t.host.in_(sorted(wanted.hosts))) for part in parts]
    query = _grouped(union_all(*parts), ("host", "gpu_uuid", "day"), {
        "gpu_index": "max", "cost_usd": "sum", "idle_cost_usd": "sum",
        "observed_seconds": "sum", "busy_seconds": "sum", "unpriced_seconds": "sum",
        **{c.name: "sum" for c in _USAGE_EXTRA}})  # fmt: skip
    out: dict[GpuKey, dict[int, Usage]] = defaultdict(dict)
    for r in conn.execute(query).mappings().all():  # one fetch: row by row costs more
        out[(r["host"], r["gpu_uuid"])][r["day"]] = Usage(
            r["gpu_index"], _money(r["cost_usd"]), _money(r["idle_cost_usd"]),
            r["observed_seconds"] or 0.0, r["busy_seconds"] or 0.0, r["unpriced_seconds"] or 0.0,
            r["sm_observed_seconds"] or 0.0, r["sm_active_seconds"] or 0.0,
            _money(r["sm_idle_cost_usd"]), r["energy_joules"], r["co2_grams"],
            r["power_integrated_seconds"] or 0.0,
        )  # fmt: skip
    return out


def _allocations(
    conn: Connection, split: Split, wanted: Wanted, days: LocalDays
) -> dict[tuple[str, str, str], dict[int, Allocated]]:
    t = gpu_allocations.c
    keys = (t.host, t.gpu_uuid, t.target)
    unpriced = unpriced_seconds(t.cost_usd, t.seconds).label("unpriced_seconds")
    summed = (t.cost_usd, t.seconds, t.busy_seconds, unpriced, t.energy_joules, t.co2_grams)
    inner = select(*keys, _row_day(conn, gpu_allocations, days).label("day"), *summed).where(
        split.rows(gpu_allocations, t.host)
    )
    until = split.per_host(t.host, split.day_end)
    parts = [inner, *_moved(conn, days, gpu_allocations, until, keys, summed)]
    if wanted.hosts:
        parts = [part.where(t.host.in_(sorted(wanted.hosts))) for part in parts]
    sums = {"cost_usd": "sum", "seconds": "sum", "busy_seconds": "sum", "unpriced_seconds": "sum",
            "energy_joules": "sum", "co2_grams": "sum"}  # fmt: skip
    query = _grouped(union_all(*parts), ("host", "gpu_uuid", "target", "day"), sums)
    out: dict[tuple[str, str, str], dict[int, Allocated]] = defaultdict(dict)
    for r in conn.execute(query).mappings().all():
        out[(r["host"], r["gpu_uuid"], r["target"])][r["day"]] = Allocated(
            _money(r["cost_usd"]), r["seconds"] or 0.0, r["busy_seconds"] or 0.0,
            r["unpriced_seconds"] or 0.0, r["energy_joules"], r["co2_grams"],
        )  # fmt: skip
    return out


@dataclass(frozen=True, slots=True)
class _Series:
    host: str
    metric: str
    labels_json: str
    labels: Mapping[str, str]


def _series(conn: Connection, metrics: Sequence[str], wanted: Wanted) -> dict[int, _Series]:
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
    days: LocalDays | None,
) -> dict[tuple[int, int], tuple[float | None, float | None]]:
    """(series id, day) -> (sum of increase, max of max) over the window, for the wanted series
    only (agent.cost.summarize.series_ranges: primary-key ranges per series), each range summed
    by the database and the few partial sums added here. Without ``days``, rows are grouped by
    series id alone, in the key's order: a computed day column would make the database sort
    them. With them, only increases are summed (the max is None)."""
    r = rollups.c
    hosts = {sid: s.host for sid, s in wanted.items()}
    parts: list[Any] = []
    for condition in series_ranges(split, hosts):
        if days is not None:
            inner = select(r.series_id, _row_day(conn, rollups, days).label("day"), r.increase,
                           cast(null(), Double()).label("max")).where(condition)  # fmt: skip
            parts.append(_grouped(inner, ("series_id", "day"), {"increase": "sum", "max": "max"}))
        else:
            parts.append(
                select(r.series_id, literal(0), func.sum(r.increase), func.max(r.max))
                .where(condition)
                .group_by(r.series_id)
            )
    if days is not None and not days.aligned:
        parts += _moved_series(conn, split, days, hosts)
    out: dict[tuple[int, int], tuple[float | None, float | None]] = {}
    for sid, day, increase, highest in conn.execute(union_all(*parts)).all() if parts else ():
        total, peak = out.get((sid, day), (None, None))
        out[(sid, day)] = (_plus(total, increase), _max(peak, highest))
    return out


def _moved_series(
    conn: Connection, split: Split, days: LocalDays, hosts: Mapping[int, str]
) -> list[Select[Any]]:
    """:func:`_moved` for rollup series, per group of hosts whose day rows end together."""
    r = rollups.c
    groups: dict[datetime, list[int]] = defaultdict(list)
    for sid, host in hosts.items():
        if (until := split.day_end(host)) > split.first_day:
            groups[until].append(sid)
    out = []
    for until, ids in sorted(groups.items()):
        moved = _moved(conn, days, rollups, literal(until, UtcInstant()), (r.series_id,),
                       (r.increase,))  # fmt: skip
        for part in moved:
            sub = part.where(among(r.series_id, ids, split.arrays)).subquery()
            out.append(
                select(sub.c.series_id, sub.c.day, func.sum(sub.c.increase),
                       cast(null(), Double())).group_by(sub.c.series_id, sub.c.day)
            )  # fmt: skip
    return out


def _plus(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else a + b


def _max(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else max(a, b)


def _tokens(
    conn: Connection, split: Split, wanted: Wanted, days: LocalDays
) -> dict[int, dict[TokenKey, Tokens]]:
    meta = _series(conn, TOKEN_METRICS, wanted)
    per_day: dict[int, list[tuple[str, str, str, float | None]]] = defaultdict(list)
    for (sid, day), (increase, _) in _series_sums(conn, split, meta, days).items():
        s = meta[sid]
        per_day[day].append((s.host, s.metric, s.labels_json, increase))
    return {day: tokens_by_target(rows) for day, rows in per_day.items()}


@dataclass(frozen=True, slots=True)
class Gauges:
    """Histogram bucket increases per (model, kind) and VRAM per GPU, over the window."""

    buckets: Mapping[tuple[str, str], Mapping[float, float]]  # (model, "ttft"|"e2e") -> le -> n
    vram_peak: Mapping[GpuKey, float]
    vram_total: Mapping[GpuKey, float]
    spans: Counts = field(default_factory=dict)  # requests judged from their OTLP spans


def gauges(conn: Connection, split: Split, wanted: Wanted) -> Gauges:
    meta = _series(conn, (MEMORY_USED, MEMORY_TOTAL), wanted)
    meta = {sid: s for sid, s in meta.items() if "mig_instance" not in s.labels}
    peak: dict[GpuKey, float] = {}
    total: dict[GpuKey, float] = {}
    for (sid, _), (_, highest) in _series_sums(conn, split, meta, None).items():
        s = meta[sid]
        key = (s.host, s.labels.get("gpu_uuid", ""))
        into = peak if s.metric == MEMORY_USED else total
        if highest is not None:
            into[key] = max(into.get(key, highest), highest)
    spans = span_counts(conn, split, wanted.hosts, wanted.model)
    return Gauges(_latency_buckets(conn, split, wanted), peak, total, spans)


def _latency_buckets(
    conn: Connection, split: Split, wanted: Wanted
) -> dict[tuple[str, str], dict[float, float]]:
    """(model, "ttft"|"e2e") -> le -> the window's increase (agent.cost.latency)."""
    return latency_buckets(conn, split, wanted.hosts, wanted.model)


def gpu_names(conn: Connection, wanted: Wanted) -> dict[GpuKey, str]:
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


# -- alerts ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Alert:
    """An ``alert_history`` row."""

    scope: str
    rule: str
    labels: Mapping[str, str]
    fired_at: datetime
    resolved_at: datetime | None
    summary: str


def history(conn: Connection, period: Period) -> list[Alert]:
    t = alert_history.c
    query = (
        select(t.scope, t.rule, t.labels, t.fired_at, t.resolved_at, t.summary)
        .where(t.fired_at < period.end)
        .where(t.resolved_at.is_(None) | (t.resolved_at > period.start))
        .order_by(t.fired_at, t.id)
    )
    return [
        Alert(scope, rule, json.loads(labels), fired, resolved, summary)
        for scope, rule, labels, fired, resolved, summary in conn.execute(query)
    ]


# -- billed spend ---------------------------------------------------------------------------------


def billed_by_source(engine: Engine, period: Period) -> dict[str, Decimal]:
    amounts = billed(engine, period.start, period.end)
    return {source: amount for (source, currency), amount in amounts.items() if currency == "USD"}
