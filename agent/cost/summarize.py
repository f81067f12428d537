"""Cost per million useful tokens over a window, from the rollups and the cost ledger.

A window reads per-hour rows where whole hours are rolled up and per-minute rows for the rest,
never raw samples. Costs come from the ledger (rate card x metered uptime, split by target);
useful tokens from the counters' restart-safe increases. A target's cost is shared among the
models it served in proportion to their useful tokens (a target serving one model, the usual
case, gives it all). Money stays Decimal throughout.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import (
    Connection,
    Engine,
    Select,
    case,
    func,
    literal,
    select,
    union_all,
)

from agent.cost.split import Split, series_ranges
from agent.cost.split_basis import SplitBasis, split_bases
from agent.cost.tokens import COUNTERS as COUNTERS
from agent.cost.tokens import OUTPUT as OUTPUT
from agent.cost.tokens import PER_REQUEST as PER_REQUEST
from agent.cost.tokens import PROMPT as PROMPT
from agent.cost.tokens import TOKEN_METRICS as TOKEN_METRICS
from agent.cost.tokens import TokenKey as TokenKey
from agent.cost.tokens import Tokens as Tokens
from agent.cost.tokens import tokens_by_target as tokens_by_target
from migrations.schema import (
    gpu_allocations,
    gpu_usage,
    rollups,
    series,
)

MILLION = Decimal(1_000_000)


@dataclass(frozen=True, slots=True)
class Line:
    """One row of a cost breakdown (a model, a host, a GPU or the fleet). ``cost_unknown``:
    why the cost is not known (no rate for some of its GPU time, or no GPU time observed);
    then its cost per million tokens is unknown too, never zero."""

    name: str
    cost_usd: Decimal
    useful_tokens: float
    output_tokens: float
    total_tokens: float
    tokens: Tokens = Tokens()
    cost_unknown: str | None = None

    @property
    def tokens_counted(self) -> bool:
        """Whether any source counted its tokens: Ollama's have none (unknown, not 0 tokens)."""
        return bool(self.tokens.bases) or self.useful_tokens > 0

    @property
    def usd_per_million_tokens(self) -> Decimal | None:
        if self.useful_tokens <= 0 or self.cost_unknown is not None:
            return None
        return self.cost_usd / Decimal(repr(self.useful_tokens)) * MILLION

    @property
    def abandoned_cost_usd(self) -> Decimal | None:
        """The share of the cost that went into abandoned output, in proportion to the output
        tokens generated; None where abandoned work or the cost is unknown."""
        return abandoned_cost(self.cost_usd, self.tokens, self.cost_unknown)


def abandoned_cost(cost: Decimal, tokens: Tokens, unknown: str | None) -> Decimal | None:
    abandoned = tokens.abandoned
    if abandoned is None or unknown is not None:
        return None
    if tokens.generated <= 0:
        return Decimal(0)
    return cost * Decimal(repr(abandoned)) / Decimal(repr(tokens.generated))


@dataclass(frozen=True, slots=True)
class GpuLine:
    host: str
    gpu_uuid: str
    gpu_index: str
    cost_usd: Decimal
    idle_cost_usd: Decimal
    observed_seconds: float
    busy_seconds: float
    unpriced_seconds: float = 0.0  # observed while no rate covered the GPU: cost unknown
    shared: SplitBasis | None = None  # how its cost was split, where several targets used it

    @property
    def utilization(self) -> float | None:
        return self.busy_seconds / self.observed_seconds if self.observed_seconds else None

    @property
    def cost_unknown(self) -> str | None:
        return f"no rate for GPU {self.gpu_uuid} on {self.host}" if self.unpriced_seconds else None


@dataclass(frozen=True, slots=True)
class TargetUse:
    """A target's allocated GPU time over a window, and its cost (``gpu_allocations``)."""

    cost: Decimal = Decimal(0)
    seconds: float = 0.0
    busy: float = 0.0
    unpriced: float = 0.0  # seconds no rate priced


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
    # Per (host, target), for the roll-ups by team and project (agent.cost.teams).
    targets: Mapping[tuple[str, str], TargetUse] = field(default_factory=dict)
    tokens: Mapping[TokenKey, Tokens] = field(default_factory=dict)

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
        return summarize_on(conn, start, end, useful=useful, host=host)


def summarize_on(
    conn: Connection,
    start: datetime,
    end: datetime,
    *,
    useful: str = "output",
    host: str | None = None,
) -> Summary:
    """:func:`summarize` on an open connection (one whose rollups agent.cost.provisional
    brought up to date, for a reader that must see everything stored)."""
    split = Split.read(conn, start, end)
    usage = conn.execute(_usage_query(split, host)).mappings().all()
    allocations = conn.execute(_allocation_query(split, host)).mappings().all()
    tokens = tokens_by_target(_token_rows(conn, split, host))
    bases = split_bases(conn, split, () if host is None else (host,))
    return _summary(start, end, usage, allocations, tokens, useful, bases)


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
            func.sum(unpriced_seconds(t.cost_usd, t.observed_seconds)).label("unpriced_seconds"),
        )  # fmt: skip
        .where(split.rows(gpu_usage, t.host))
        .group_by(t.host, t.gpu_uuid)
    )
    return query if host is None else query.where(t.host == host)


def unpriced_seconds(cost: Any, seconds: Any) -> Any:
    """The seconds of a ledger row no rate priced (its cost is NULL), else 0."""
    return case((cost.is_(None), seconds), else_=literal(0.0))


def _allocation_query(split: Split, host: str | None) -> Select[Any]:
    t = gpu_allocations.c
    query = (
        select(
            t.host,
            t.target,
            func.sum(t.cost_usd).label("cost_usd"),
            func.sum(t.seconds).label("seconds"),
            func.sum(t.busy_seconds).label("busy_seconds"),
            func.sum(unpriced_seconds(t.cost_usd, t.seconds)).label("unpriced_seconds"),
        )  # fmt: skip
        .where(split.rows(gpu_allocations, t.host))
        .group_by(t.host, t.target)
    )
    return query if host is None else query.where(t.host == host)


def _token_rows(conn: Any, split: Split, host: str | None) -> list[tuple[str, str, str, Any]]:
    """(host, metric, labels, increase) per token and request counter series over the window."""
    query = select(series.c.id, series.c.host, series.c.metric, series.c.labels).where(
        series.c.metric.in_(TOKEN_METRICS)
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


def _summary(
    start: datetime,
    end: datetime,
    usage: Sequence[Any],
    allocations: Sequence[Any],
    tokens: Mapping[TokenKey, Tokens],
    rule: str,
    bases: Mapping[tuple[str, str], SplitBasis] = {},
) -> Summary:
    target_cost: dict[tuple[str, str], Decimal] = defaultdict(Decimal)
    for a in allocations:
        target_cost[(a["host"], a["target"])] += a["cost_usd"] or Decimal(0)
    models = model_lines(target_cost, tokens, rule, _target_unknowns(allocations))
    gpus = _gpu_lines(usage, bases)
    hosts = _host_lines(gpus, tokens, rule)
    total_tokens = sum(tokens.values(), Tokens())
    fleet_cost = sum((g.cost_usd for g in gpus), Decimal(0))
    return Summary(
        start=start,
        end=end,
        fleet=_line("fleet", fleet_cost, total_tokens, rule, unknown_cost(gpus)),
        models=models,
        hosts=hosts,
        gpus=gpus,
        gpu_seconds=sum(g.observed_seconds for g in gpus),
        busy_seconds=sum(g.busy_seconds for g in gpus),
        allocated_seconds=sum(a["seconds"] for a in allocations),
        allocated_busy_seconds=sum(a["busy_seconds"] for a in allocations),
        idle_cost_usd=sum((g.idle_cost_usd for g in gpus), Decimal(0)),
        requests_finished=total_tokens.requests,
        targets={(a["host"], a["target"]): TargetUse(a["cost_usd"] or Decimal(0), a["seconds"],
                 a["busy_seconds"], a["unpriced_seconds"] or 0.0) for a in allocations},
        tokens=dict(tokens),
    )  # fmt: skip


def unknown_cost(gpus: Sequence[GpuLine]) -> str | None:
    """Why the cost of these GPUs' time is not known, if it is not: no GPU time observed at
    all, or no rate for some of it (naming the first such GPU)."""
    if sum(g.observed_seconds for g in gpus) <= 0:
        return "no GPU time observed"
    unpriced = [g for g in gpus if g.unpriced_seconds]
    if not unpriced:
        return None
    more = f" and {len(unpriced) - 1} more" if len(unpriced) > 1 else ""
    return f"{unpriced[0].cost_unknown}{more}"


def _target_unknowns(allocations: Sequence[Any]) -> dict[tuple[str, str], str]:
    """(host, target) -> why its cost is unknown, for the targets with unpriced GPU time."""
    unpriced: dict[tuple[str, str], float] = defaultdict(float)
    for a in allocations:
        unpriced[(a["host"], a["target"])] += a["unpriced_seconds"] or 0.0
    return {
        (host, target): f"no rate for {seconds / 3600:.2f} GPU-hours of target {target} on {host}"
        for (host, target), seconds in unpriced.items()
        if seconds > 0
    }


def _line(name: str, cost: Decimal, tokens: Tokens, rule: str, unknown: str | None = None) -> Line:
    total = tokens.output + tokens.prompt
    return Line(name, cost, tokens.useful(rule), tokens.output, total, tokens, unknown)


def model_lines(
    target_cost: Mapping[tuple[str, str], Decimal],
    tokens: Mapping[TokenKey, Tokens],
    rule: str,
    unknowns: Mapping[tuple[str, str], str] = {},
) -> tuple[Line, ...]:
    """Per model: its share of its targets' cost, and its tokens. Its cost is unknown where
    a target of it ran on GPU time no rate priced, or where no GPU time was seen for it."""
    cost: dict[str, Decimal] = defaultdict(Decimal)
    produced: dict[str, Tokens] = defaultdict(Tokens)
    unknown: dict[str, str] = {}
    for (_, _, model), t in tokens.items():
        produced[model] = produced[model] + t
    shares = model_shares(target_cost, tokens, rule)
    for key, amount in target_cost.items():
        for model, share in shares[key].items():
            cost[model] += amount * share
            if key in unknowns:
                unknown.setdefault(model, unknowns[key])
    names = sorted(set(cost) | set(produced))
    return tuple(
        _line(m, cost.get(m, Decimal(0)), produced.get(m, Tokens()), rule,
              unknown.get(m) or (None if m in cost else "no GPU time observed for it"))
        for m in names
    )  # fmt: skip


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


def _gpu_lines(
    usage: Sequence[Any], bases: Mapping[tuple[str, str], SplitBasis]
) -> tuple[GpuLine, ...]:
    acc: dict[tuple[str, str], dict[str, Any]] = {}
    for row in usage:
        a = acc.setdefault((row["host"], row["gpu_uuid"]), {
            "index": row["gpu_index"], "cost": Decimal(0), "idle": Decimal(0),
            "observed": 0.0, "busy": 0.0, "unpriced": 0.0})  # fmt: skip
        a["cost"] += row["cost_usd"] or Decimal(0)
        a["idle"] += row["idle_cost_usd"] or Decimal(0)
        a["observed"] += row["observed_seconds"]
        a["busy"] += row["busy_seconds"]
        a["unpriced"] += row["unpriced_seconds"] or 0.0
    return tuple(
        GpuLine(host, uuid, a["index"], a["cost"], a["idle"], a["observed"], a["busy"],
                a["unpriced"], bases.get((host, uuid)))
        for (host, uuid), a in sorted(acc.items())
    )  # fmt: skip


def _host_lines(
    gpus: Sequence[GpuLine], tokens: Mapping[TokenKey, Tokens], rule: str
) -> tuple[Line, ...]:
    per_host: dict[str, list[GpuLine]] = defaultdict(list)
    produced: dict[str, Tokens] = defaultdict(Tokens)
    for g in gpus:
        per_host[g.host].append(g)
    for (host, _, _), t in tokens.items():
        produced[host] = produced[host] + t
    return tuple(
        _line(h, sum((g.cost_usd for g in per_host.get(h, ())), Decimal(0)),
              produced.get(h, Tokens()), rule, unknown_cost(per_host.get(h, ())))
        for h in sorted(set(per_host) | set(produced))
    )  # fmt: skip
