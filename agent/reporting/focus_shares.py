"""Who used each GPU in a charge, for the FOCUS 1.3 export's allocated rows: each serving
target's share of the GPU as the cost ledger allocated it (``gpu_allocations``: seconds, busy
seconds, cost), the rule that split a shared GPU in that charge period (the
``gpuwatch_gpu_split_basis_info`` ticks, agent.cost.split_basis), and the tokens each target
produced in it (the increases of its token counters).

Read per piece of the period with the rows :mod:`agent.reporting.focus_charges` reads for the
charges themselves, bucketed the same way, so a charge's shares are the ledger's for exactly its
time.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import Connection, or_, select

from agent.cost.split import Split, series_ranges
from agent.cost.split_basis import BASIS, MEMORY, SplitBasis
from agent.cost.summarize import OUTPUT, PROMPT
from agent.reporting.focus_mig import MigUse, read_migs
from migrations.schema import gpu_allocations, gpu_pod_allocations, rollups, series

Bucket = Callable[[datetime], datetime]  # a row's start -> the start of its charge
ChargeKey = tuple[datetime, str, str]  # (charge start, host, gpu uuid)
TargetKey = tuple[datetime, str, str]  # (charge start, host, target)


@dataclass(frozen=True, slots=True)
class TargetUse:
    """A target's part of one GPU's charge, as the ledger allocated it."""

    target: str
    seconds: float
    busy_seconds: float
    cost_usd: Decimal | None  # None: no rate priced that time
    # Generated tokens in the charge period, this GPU's part of the target's; None: none counted
    output_tokens: float | None = None
    prompt_tokens: float | None = None
    models: tuple[str, ...] = ()  # the models its token counters were stored under then


@dataclass(frozen=True, slots=True)
class PodUse:
    """A Kubernetes pod's part of one GPU's charge, as the ledger split it by pod
    (``gpu_pod_allocations``): its time and cost, and the seconds each rule split."""

    namespace: str
    pod: str
    seconds: float
    busy_seconds: float
    cost_usd: Decimal | None
    sm_seconds: float = 0.0
    memory_seconds: float = 0.0
    request_seconds: float = 0.0


@dataclass(frozen=True, slots=True)
class Shares:
    """The targets' parts of a GPU's charge and the rule that split it (``basis`` None: no tick
    saw several targets on the GPU, so whichever held it had it whole), and on Kubernetes its
    pods' parts."""

    uses: tuple[TargetUse, ...] = ()
    basis: SplitBasis | None = None
    pods: tuple[PodUse, ...] = ()
    migs: tuple[MigUse, ...] = ()  # a MIG GPU's instances (agent.reporting.focus_mig)


@dataclass
class _Use:
    seconds: float = 0.0
    busy: float = 0.0
    cost: Decimal | None = None


@dataclass
class _Pod:
    seconds: float = 0.0
    busy: float = 0.0
    cost: Decimal | None = None
    by_rule: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])  # sm, memory, request


@dataclass
class _Read:
    uses: dict[ChargeKey, dict[str, _Use]] = field(default_factory=dict)
    bases: dict[ChargeKey, dict[str, int]] = field(default_factory=dict)
    pods: dict[ChargeKey, dict[tuple[str, str], _Pod]] = field(default_factory=dict)


def read_shares(
    conn: Connection, split: Split, bucket: Bucket, token_series: Mapping[int, tuple[str, str, str]]
) -> dict[ChargeKey, Shares]:
    """(charge start, host, gpu uuid) -> its Shares, for the GPUs some target held in the
    split's window. ``token_series`` maps token-counter series ids to (metric, host, target)."""
    read = _Read()
    _allocations(conn, split, bucket, read)
    _bases(conn, split, bucket, read)
    _pods(conn, split, bucket, read)
    tokens = _tokens(conn, split, bucket, token_series)
    migs = read_migs(conn, split, bucket)
    held = _held(read)
    out: dict[ChargeKey, Shares] = {}
    for key in read.uses.keys() | read.pods.keys() | migs.keys():
        by_target = read.uses.get(key, {})
        at, host, _ = key
        uses = tuple(
            TargetUse(target, u.seconds, u.busy, u.cost,
                      _part(tokens.get((OUTPUT, (at, host, target))), u, held[(at, host, target)]),
                      _part(tokens.get((PROMPT, (at, host, target))), u, held[(at, host, target)]))
            for target, u in sorted(by_target.items())
        )  # fmt: skip
        ticks = read.bases.get(key)
        basis = (
            None if not ticks else SplitBasis(ticks.get("sm_utilization", 0), ticks.get(MEMORY, 0))
        )
        out[key] = Shares(uses, basis, _pod_uses(read.pods.get(key, {})), migs.get(key, ()))
    return out


def _held(read: _Read) -> dict[TargetKey, float]:
    """(charge start, host, target) -> the GPU-seconds the target held over all its GPUs."""
    out: dict[TargetKey, float] = defaultdict(float)
    for (at, host, _), by_target in read.uses.items():
        for target, u in by_target.items():
            out[(at, host, target)] += u.seconds
    return out


def _part(tokens: float | None, use: _Use, held: float) -> float | None:
    """A target's tokens on one of its GPUs: by that GPU's share of the time it held GPUs (a
    model on two GPUs produced its tokens on both), so its rows add up to its tokens."""
    if tokens is None or held <= 0:
        return tokens
    return tokens * use.seconds / held


def token_series(conn: Connection) -> dict[int, tuple[str, str, str]]:
    """Generated and prompt token series id -> (metric, host, target), for those naming a
    target."""
    query = select(series.c.id, series.c.metric, series.c.host, series.c.labels).where(
        series.c.metric.in_((OUTPUT, PROMPT))
    )
    out: dict[int, tuple[str, str, str]] = {}
    for sid, metric, host, labels in conn.execute(query):
        target = _labels(labels).get("target")
        if target:
            out[sid] = (metric, host, str(target))
    return out


def _allocations(conn: Connection, split: Split, bucket: Bucket, read: _Read) -> None:
    c = gpu_allocations.c
    query = select(c.host, c.gpu_uuid, c.target, c.start, c.seconds, c.busy_seconds, c.cost_usd)
    for host, uuid, target, start, seconds, busy, cost in conn.execute(
        query.where(split.rows(gpu_allocations, c.host), c.seconds > 0)
    ):
        u = read.uses.setdefault((bucket(start), host, uuid), {}).setdefault(target, _Use())
        u.seconds += seconds
        u.busy += busy
        if cost is not None:
            u.cost = Decimal(cost) if u.cost is None else u.cost + Decimal(cost)


def _pods(conn: Connection, split: Split, bucket: Bucket, read: _Read) -> None:
    c = gpu_pod_allocations.c
    query = select(c.host, c.gpu_uuid, c.namespace, c.pod, c.start, c.seconds, c.busy_seconds,
                   c.cost_usd, c.sm_seconds, c.memory_seconds, c.request_seconds)  # fmt: skip
    for host, uuid, namespace, pod, start, seconds, busy, cost, *by_rule in conn.execute(
        query.where(split.rows(gpu_pod_allocations, c.host), c.seconds > 0)
    ):
        p = read.pods.setdefault((bucket(start), host, uuid), {}).setdefault(
            (namespace, pod), _Pod()
        )
        p.seconds += seconds
        p.busy += busy
        p.by_rule = [a + b for a, b in zip(p.by_rule, by_rule, strict=True)]
        if cost is not None:
            p.cost = Decimal(cost) if p.cost is None else p.cost + Decimal(cost)


def _pod_uses(pods: Mapping[tuple[str, str], _Pod]) -> tuple[PodUse, ...]:
    return tuple(
        PodUse(namespace, pod, p.seconds, p.busy, p.cost, *p.by_rule)
        for (namespace, pod), p in sorted(pods.items())
    )


def _bases(conn: Connection, split: Split, bucket: Bucket, read: _Read) -> None:
    query = select(series.c.id, series.c.host, series.c.labels).where(series.c.metric == BASIS)
    meta = {sid: (host, _labels(labels)) for sid, host, labels in conn.execute(query)}
    conditions = series_ranges(split, {sid: m[0] for sid, m in meta.items()})
    if not conditions:
        return
    r = rollups.c
    for sid, start, count in conn.execute(
        select(r.series_id, r.start, r.count).where(or_(*conditions))
    ):
        host, labels = meta[sid]
        key = (bucket(start), host, str(labels.get("gpu_uuid", "")))
        ticks = read.bases.setdefault(key, defaultdict(int))
        ticks[str(labels.get("basis", MEMORY))] += int(count or 0)


def _tokens(
    conn: Connection, split: Split, bucket: Bucket, token_series: Mapping[int, tuple[str, str, str]]
) -> dict[tuple[str, TargetKey], float]:
    """(metric, (charge start, host, target)) -> the counter's increase in that charge."""
    out: dict[tuple[str, TargetKey], float] = defaultdict(float)
    conditions = series_ranges(split, {sid: meta[1] for sid, meta in token_series.items()})
    if not conditions:
        return out
    r = rollups.c
    for sid, start, increase in conn.execute(
        select(r.series_id, r.start, r.increase).where(or_(*conditions))
    ):
        if increase is None:
            continue  # no increase known for that bucket (a counter's first sample)
        metric, host, target = token_series[sid]
        out[(metric, (bucket(start), host, target))] += increase
    return out


def _labels(text: str) -> dict[str, Any]:
    value = json.loads(text)
    return value if isinstance(value, dict) else {}
