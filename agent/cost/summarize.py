"""Cost per million useful tokens over a window, from the rollups and the cost ledger.

A window reads per-hour rows where whole hours are rolled up and per-minute rows for the rest,
never raw samples. Costs come from the ledger (rate card x metered uptime, split by target);
useful tokens from the counters' restart-safe increases. A target's cost is shared among the
models it served in proportion to their useful tokens (a target serving one model, the usual
case, gives it all). Money stays Decimal throughout.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from sqlalchemy import (
    ARRAY,
    Engine,
    Integer,
    Select,
    Table,
    any_,
    bindparam,
    case,
    func,
    literal,
    or_,
    select,
    union_all,
)

from agent.storage.rolled_up import (
    GENERATION_TOKENS,
    PROMPT_TOKENS,
    PROMPT_TOKENS_COMPUTED,
    REQUESTS_FINISHED,
    rolled_up,
)
from migrations.schema import (
    UtcInstant,
    gpu_allocations,
    gpu_usage,
    rollup_state,
    rollups,
    series,
)

MINUTE, HOUR, DAY = 60, 3600, 86400
OUTPUT, PROMPT_COMPUTED, PROMPT, REQUESTS = rolled_up(
    GENERATION_TOKENS, PROMPT_TOKENS_COMPUTED, PROMPT_TOKENS, REQUESTS_FINISHED
)
MILLION = Decimal(1_000_000)


@dataclass(frozen=True, slots=True)
class Tokens:
    output: float = 0.0
    prompt: float = 0.0  # computed prompt tokens where the engine says, else all prompt tokens
    requests: float = 0.0  # finished, whatever the reason

    def useful(self, rule: str) -> float:
        return self.output + (self.prompt if rule == "output+prompt" else 0.0)

    def __add__(self, other: Tokens) -> Tokens:
        return Tokens(
            self.output + other.output, self.prompt + other.prompt, self.requests + other.requests
        )


@dataclass(frozen=True, slots=True)
class Line:
    """One row of a cost breakdown (a model, a host, a GPU or the fleet)."""

    name: str
    cost_usd: Decimal
    useful_tokens: float
    output_tokens: float
    total_tokens: float

    @property
    def usd_per_million_tokens(self) -> Decimal | None:
        if self.useful_tokens <= 0:
            return None
        return self.cost_usd / Decimal(repr(self.useful_tokens)) * MILLION


@dataclass(frozen=True, slots=True)
class GpuLine:
    host: str
    gpu_uuid: str
    gpu_index: str
    cost_usd: Decimal
    idle_cost_usd: Decimal
    observed_seconds: float
    busy_seconds: float

    @property
    def utilization(self) -> float | None:
        return self.busy_seconds / self.observed_seconds if self.observed_seconds else None


@dataclass(frozen=True, slots=True)
class Summary:
    """Everything a window costs and produced."""

    start: datetime
    end: datetime
    fleet: Line
    models: tuple[Line, ...]
    hosts: tuple[Line, ...]
    gpus: tuple[GpuLine, ...]
    gpu_seconds: float
    busy_seconds: float
    allocated_seconds: float
    allocated_busy_seconds: float
    idle_cost_usd: Decimal
    requests_finished: float

    @property
    def idle_loaded_seconds(self) -> float:
        """Allocated to a serving target, but the GPU was not busy."""
        return self.allocated_seconds - self.allocated_busy_seconds

    @property
    def unallocated_seconds(self) -> float:
        """Billed and watched, but no serving target used the GPU."""
        return self.gpu_seconds - self.allocated_seconds


def summarize(
    engine: Engine,
    start: datetime,
    end: datetime,
    *,
    useful: str = "output",
    host: str | None = None,
) -> Summary:
    """Cost, tokens and GPU time over (start, end] (minute-aligned edges are exact)."""
    with engine.connect() as conn:
        split = Split.read(conn, start, end)
        usage = conn.execute(_usage_query(split, host)).mappings().all()
        allocations = conn.execute(_allocation_query(split, host)).mappings().all()
        tokens = tokens_by_target(_token_rows(conn, split, host))
    return _summary(start, end, usage, allocations, tokens, useful)


def metered_usd(engine: Engine, start: datetime, end: datetime) -> Decimal:
    """The fleet's metered cost over (start, end]: ``summarize(...).fleet.cost_usd`` to the
    digit (the same per-GPU sums, added the same way), without the allocations, tokens and
    per-GPU columns a budget's month to date does not need."""
    t = gpu_usage.c
    with engine.connect() as conn:
        split = Split.read(conn, start, end)
        query = (
            select(func.sum(t.cost_usd))
            .where(split.rows(gpu_usage, t.host))
            .group_by(t.host, t.gpu_uuid)
        )
        costs = conn.execute(query).scalars().all()
    return sum((Decimal(0) + (cost or Decimal(0)) for cost in costs), Decimal(0))


@dataclass(frozen=True, slots=True)
class Split:
    """Which rows answer a window: per host, day rows for the whole UTC days its day rollup
    covers, hour rows for the other whole hours its hour rollup covers, minute rows for the
    rest (the window's partial first and last hours, and what is newer than that host's hour
    watermark). The database sums those rows, so a month costs a few aggregate rows per GPU to
    read: about 30 day rows, not ~720 hour rows (or 43,200 minute rows)."""

    start: datetime
    end: datetime
    first_hour: datetime  # the first whole hour in the window
    last_hour_end: datetime  # the end of the last whole hour in the window
    # Every host that has rolled anything up -> the end of its hour rollup (rollup_state
    # "hour"), None before its first hour. Only the rollup job writes rollup rows, and it
    # writes rollup_state as it does, so no other host has rows to read.
    hour_until: Mapping[str, datetime | None]
    first_day: datetime  # the first whole UTC day in the window
    last_day_end: datetime  # the end of the last whole UTC day in the window
    # Host -> the end of its day rollup (rollup_state "day").
    day_until: Mapping[str, datetime]
    # PostgreSQL: a list of ids is one array parameter. An IN list of a fleet's series is
    # thousands of parameters per range, and parsing those cost the report more than the sums.
    arrays: bool = False

    @classmethod
    def read(cls, conn: Any, start: datetime, end: datetime) -> Split:
        hours: dict[str, datetime | None] = {}
        day_marks: dict[str, datetime] = {}
        for host, job, watermark in conn.execute(
            select(rollup_state.c.host, rollup_state.c.job, rollup_state.c.watermark)
        ):
            hours[host] = watermark if job == "hour" else hours.get(host)
            if job == "day":
                day_marks[host] = watermark
        return cls(
            start, end, _ceil(start, HOUR), _floor(end, HOUR), hours,
            _ceil(start, DAY), _floor(end, DAY), day_marks, conn.dialect.name == "postgresql",
        )  # fmt: skip

    def until(self, host: str | None) -> datetime:
        """Where this host's hour rows stop and its minute rows take over."""
        covered = _floor(self.hour_until.get(host) or self.first_hour, HOUR) if host else None
        return max(self.first_hour, min(covered or self.first_hour, self.last_hour_end))

    def day_end(self, host: str | None) -> datetime:
        """Where this host's day rows stop and its hour rows take over again; ``first_day``
        when its day rows answer none of the window."""
        mark = self.day_until.get(host) if host else None
        if mark is None:
            return self.first_day
        return max(self.first_day, min(_floor(mark, DAY), self.last_day_end, self.until(host)))

    def rows(self, table: Any, host_column: Any) -> Any:
        """The rows that answer the window, exactly: each host's day rows before its
        ``day_end``, hour rows of the other hours before its ``until`` and minute rows outside
        the hours those cover, so nothing counts twice and the database can sum them. Each
        part is a (resolution, start) index range with the per-host edges as filters: a
        condition OR-ed over hosts would make the planner scan every row of every host."""
        until = self.per_host(host_column, self.until)
        start = table.c.start
        tail = (table.c.resolution == MINUTE) & (start >= self._tail_low()) & (start <= self._last)
        minutes = (self._head(table), tail & (start >= until))
        if not self._uses_days():
            hours = (
                (table.c.resolution == HOUR)
                & (start >= self.first_hour)
                & (start < self.last_hour_end)
            )
            return or_(hours & (start < until), *minutes)
        day_end = self.per_host(host_column, self.day_end)
        days = (table.c.resolution == DAY) & (start >= self.first_day) & (start < day_end)
        head_hours = (
            (table.c.resolution == HOUR)
            & (start >= self.first_hour)
            & (start < self.first_day)
            & (start < until)
        )
        tail_hours = (
            (table.c.resolution == HOUR)
            & (start >= self._hour_tail_low())
            & (start < self.last_hour_end)
            & (start >= day_end)
            & (start < until)
        )
        return or_(days & (start < self.last_day_end), head_hours, tail_hours, *minutes)

    def ranges(self, table: Any, host: str) -> tuple[Any, ...]:
        """The rows of ``rows`` for one host, as plain (resolution, start) ranges: day rows up
        to its ``day_end``, hour rows around them up to its ``until``, the head minutes, and
        the minutes from its ``until`` on. For lookups by series id, each is a range of the
        rollups' primary key (series_id, resolution, start), so only the wanted series' rows
        are read."""
        until, day_end, start = self.until(host), self.day_end(host), table.c.start
        head, tail = (
            self._head(table),
            (table.c.resolution == MINUTE) & (start >= until) & (start <= self._last),
        )
        if day_end == self.first_day:  # no day rows of this host answer the window
            hours = (table.c.resolution == HOUR) & (start >= self.first_hour) & (start < until)
            return hours, head, tail
        days = (table.c.resolution == DAY) & (start >= self.first_day) & (start < day_end)
        head_hours = (
            (table.c.resolution == HOUR) & (start >= self.first_hour) & (start < self.first_day)
        )
        tail_hours = (table.c.resolution == HOUR) & (start >= day_end) & (start < until)
        return days, head_hours, tail_hours, head, tail

    def edges(self, host: str) -> tuple[datetime, datetime]:
        """What decides ``ranges`` for a host: hosts with equal edges share their ranges."""
        return self.until(host), self.day_end(host)

    @property
    def _last(self) -> datetime:
        """The start of the last minute row inside the window."""
        return self.end - timedelta(seconds=MINUTE)

    def _head(self, table: Any) -> Any:
        # Bounded by the window's end too: a window inside one hour has no whole hour.
        start = table.c.start
        return (
            (table.c.resolution == MINUTE)
            & (start >= self.start)
            & (start < self.first_hour)
            & (start <= self._last)
        )

    def _uses_days(self) -> bool:
        return any(self.day_end(host) > self.first_day for host in self.day_until)

    def per_host(self, host_column: Any, edge: Callable[[str | None], datetime]) -> Any:
        """Each row's host's ``edge``: one branch per distinct value (hosts that keep up share
        their watermarks), each an IN list that PostgreSQL hashes. One branch per host made
        every row walk the fleet's hosts: a fleet-wide window cost hosts x rows."""
        default = edge(None)
        groups: dict[datetime, list[str]] = defaultdict(list)
        for host in sorted(self.hour_until):
            at = edge(host)
            if at != default:
                groups[at].append(host)
        if not groups:
            return literal(default, UtcInstant())
        whens = [
            (host_column.in_(hosts), literal(at, UtcInstant()))
            for at, hosts in sorted(groups.items())
        ]
        return case(*whens, else_=literal(default, UtcInstant()))

    def _tail_low(self) -> datetime:
        # Hosts outside rollup_state have no rollup rows: they need not widen the range.
        return min([self.until(h) for h in self.hour_until], default=self.last_hour_end)

    def _hour_tail_low(self) -> datetime:
        # The hour rows after the day rows start at the earliest host's day_end: where every
        # host keeps up, the last day or so of hour rows, not the window's.
        return min([self.day_end(h) for h in self.hour_until], default=self.first_day)


def _floor(at: datetime, size: int) -> datetime:
    return at.replace(hour=0 if size == DAY else at.hour, minute=0, second=0, microsecond=0)


def _ceil(at: datetime, size: int) -> datetime:
    floor = _floor(at, size)
    return floor if floor == at else floor + timedelta(seconds=size)


def _usage_query(split: Split, host: str | None) -> Select[Any]:
    t = gpu_usage.c
    query = (
        select(
            t.host,
            t.gpu_uuid,
            func.max(t.gpu_index).label("gpu_index"),
            func.sum(t.cost_usd).label("cost_usd"),
            func.sum(t.idle_cost_usd).label("idle_cost_usd"),
            func.sum(t.observed_seconds).label("observed_seconds"),
            func.sum(t.busy_seconds).label("busy_seconds"),
        )  # fmt: skip
        .where(split.rows(gpu_usage, t.host))
        .group_by(t.host, t.gpu_uuid)
    )
    return query if host is None else query.where(t.host == host)


def _allocation_query(split: Split, host: str | None) -> Select[Any]:
    t = gpu_allocations.c
    query = (
        select(
            t.host,
            t.target,
            func.sum(t.cost_usd).label("cost_usd"),
            func.sum(t.seconds).label("seconds"),
            func.sum(t.busy_seconds).label("busy_seconds"),
        )  # fmt: skip
        .where(split.rows(gpu_allocations, t.host))
        .group_by(t.host, t.target)
    )
    return query if host is None else query.where(t.host == host)


def _token_rows(conn: Any, split: Split, host: str | None) -> list[tuple[str, str, str, Any]]:
    """(host, metric, labels, increase) per token and request counter series over the window."""
    query = select(series.c.id, series.c.host, series.c.metric, series.c.labels).where(
        series.c.metric.in_((OUTPUT, PROMPT_COMPUTED, PROMPT, REQUESTS))
    )
    if host is not None:
        query = query.where(series.c.host == host)
    meta = {sid: (h, metric, labels) for sid, h, metric, labels in conn.execute(query)}
    r = rollups.c
    parts = [
        select(r.series_id, func.sum(r.increase)).where(condition).group_by(r.series_id)
        for condition in series_ranges(split, {sid: m[0] for sid, m in meta.items()})
    ]
    sums: dict[int, Any] = {}
    for sid, increase in conn.execute(union_all(*parts)) if parts else ():
        if increase is not None:
            sums[sid] = sums.get(sid, 0.0) + increase
    return [(*meta[sid], increase) for sid, increase in sums.items()]


def series_ranges(split: Split, hosts: Mapping[int, str], table: Table = rollups) -> list[Any]:
    """Conditions on ``table`` (``rollups`` or ``histogram_rollups``) that together select,
    once each, the rows answering the split's window for the series ``hosts`` names (series
    id -> its host): per group of hosts sharing their watermarks, its ranges over their ids.
    Each is a range of the primary key (series_id, resolution, start): the cost follows the
    series asked for, not every series of the fleet (a vLLM target alone stores hundreds),
    which a scan of the (resolution, start) index joined to ``series`` would read."""
    ids: dict[tuple[datetime, datetime], list[int]] = defaultdict(list)
    host_of: dict[tuple[datetime, datetime], str] = {}
    for sid, host in hosts.items():
        edges = split.edges(host)
        ids[edges].append(sid)
        host_of[edges] = host
    return [
        among(table.c.series_id, group, split.arrays) & condition
        for edges, group in sorted(ids.items())
        for condition in split.ranges(table, host_of[edges])
    ]


def among(column: Any, ids: Iterable[int], arrays: bool) -> Any:
    if arrays:
        return column == any_(bindparam(None, sorted(ids), type_=ARRAY(Integer)))
    return column.in_(sorted(ids))


TokenKey = tuple[str, str, str]  # (host, target, model)


def tokens_by_target(rows: Iterable[Any]) -> dict[TokenKey, Tokens]:
    per: dict[tuple[TokenKey, str], float] = defaultdict(float)
    for host, metric, labels_json, increase in rows:
        if increase is None:
            continue
        labels = json.loads(labels_json)
        key = (host, labels.get("target", ""), labels.get("model", ""))
        per[(key, metric)] += increase
    out: dict[TokenKey, Tokens] = {}
    for key in {k for k, _ in per}:
        computed = per.get((key, PROMPT_COMPUTED))
        prompt = computed if computed is not None else per.get((key, PROMPT), 0.0)
        out[key] = Tokens(per.get((key, OUTPUT), 0.0), prompt, per.get((key, REQUESTS), 0.0))
    return out


def _summary(
    start: datetime,
    end: datetime,
    usage: Sequence[Any],
    allocations: Sequence[Any],
    tokens: Mapping[TokenKey, Tokens],
    rule: str,
) -> Summary:
    target_cost: dict[tuple[str, str], Decimal] = defaultdict(Decimal)
    for a in allocations:
        target_cost[(a["host"], a["target"])] += a["cost_usd"] or Decimal(0)
    models = model_lines(target_cost, tokens, rule)
    gpus = _gpu_lines(usage)
    hosts = _host_lines(gpus, tokens, rule)
    total_tokens = sum(tokens.values(), Tokens())
    fleet_cost = sum((g.cost_usd for g in gpus), Decimal(0))
    return Summary(
        start=start,
        end=end,
        fleet=_line("fleet", fleet_cost, total_tokens, rule),
        models=models,
        hosts=hosts,
        gpus=gpus,
        gpu_seconds=sum(g.observed_seconds for g in gpus),
        busy_seconds=sum(g.busy_seconds for g in gpus),
        allocated_seconds=sum(a["seconds"] for a in allocations),
        allocated_busy_seconds=sum(a["busy_seconds"] for a in allocations),
        idle_cost_usd=sum((g.idle_cost_usd for g in gpus), Decimal(0)),
        requests_finished=total_tokens.requests,
    )


def _line(name: str, cost: Decimal, tokens: Tokens, rule: str) -> Line:
    return Line(name, cost, tokens.useful(rule), tokens.output, tokens.output + tokens.prompt)


def model_lines(
    target_cost: Mapping[tuple[str, str], Decimal], tokens: Mapping[TokenKey, Tokens], rule: str
) -> tuple[Line, ...]:
    cost: dict[str, Decimal] = defaultdict(Decimal)
    produced: dict[str, Tokens] = defaultdict(Tokens)
    for (_, _, model), t in tokens.items():
        produced[model] = produced[model] + t
    shares = model_shares(target_cost, tokens, rule)
    for key, amount in target_cost.items():
        for model, share in shares[key].items():
            cost[model] += amount * share
    names = sorted(set(cost) | set(produced))
    return tuple(_line(m, cost.get(m, Decimal(0)), produced.get(m, Tokens()), rule) for m in names)


def model_shares(
    targets: Iterable[tuple[str, str]], tokens: Mapping[TokenKey, Tokens], rule: str
) -> dict[tuple[str, str], dict[str, Decimal]]:
    """(host, target) -> model -> the share of the target's cost (and GPU time) that model
    carries: its share of the target's useful tokens, equal shares when none were produced,
    and the target's own name when it reported no model at all."""
    by_target: dict[tuple[str, str], dict[str, Tokens]] = defaultdict(dict)
    for (host, target, model), t in tokens.items():
        by_target[(host, target)][model] = t
    out: dict[tuple[str, str], dict[str, Decimal]] = {}
    for key in targets:
        models = by_target.get(key) or {key[1]: Tokens()}  # no tokens seen: the target's name
        total = sum(t.useful(rule) for t in models.values())
        out[key] = {
            model: Decimal(repr(t.useful(rule) / total)) if total else Decimal(1) / len(models)
            for model, t in models.items()
        }
    return out


def _gpu_lines(usage: Sequence[Any]) -> tuple[GpuLine, ...]:
    acc: dict[tuple[str, str], dict[str, Any]] = {}
    for row in usage:
        a = acc.setdefault((row["host"], row["gpu_uuid"]), {
            "index": row["gpu_index"], "cost": Decimal(0), "idle": Decimal(0),
            "observed": 0.0, "busy": 0.0})  # fmt: skip
        a["cost"] += row["cost_usd"] or Decimal(0)
        a["idle"] += row["idle_cost_usd"] or Decimal(0)
        a["observed"] += row["observed_seconds"]
        a["busy"] += row["busy_seconds"]
    return tuple(
        GpuLine(host, uuid, a["index"], a["cost"], a["idle"], a["observed"], a["busy"])
        for (host, uuid), a in sorted(acc.items())
    )


def _host_lines(
    gpus: Sequence[GpuLine], tokens: Mapping[TokenKey, Tokens], rule: str
) -> tuple[Line, ...]:
    cost: dict[str, Decimal] = defaultdict(Decimal)
    produced: dict[str, Tokens] = defaultdict(Tokens)
    for g in gpus:
        cost[g.host] += g.cost_usd
    for (host, _, _), t in tokens.items():
        produced[host] = produced[host] + t
    return tuple(
        _line(h, cost.get(h, Decimal(0)), produced.get(h, Tokens()), rule)
        for h in sorted(set(cost) | set(produced))
    )
