"""Cost, idle dollars, GPU time and useful tokens per Kubernetes pod and namespace over a
window, from the cost ledger's pod rows (``gpu_pod_allocations``, agent.cost.pods).

A pod's idle dollars are its allocated GPU time that was not busy, priced at what that time
cost (cost x (seconds - busy) / seconds), as a target's are (agent.cost.teams): the idle share
of a shared GPU goes to its pods in the proportion their cost does. A pod's useful tokens are
those of the serving targets whose processes ran in it and in no other pod in the window
(``gpuwatch_target_pod_info``); a pod serving no known target, or one of whose targets also
ran in another pod, has unknown useful tokens (None, "n/a"). A namespace's are its pods'
targets' where each of those ran only in that namespace. A cost with unpriced time in it is
unknown.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import func, select, union_all

from agent.cost.pods import NO_POD, UNATTRIBUTED
from agent.cost.split import Split, series_ranges
from agent.cost.summarize import TokenKey, Tokens, unpriced_seconds
from agent.storage.rolled_up import TARGET_POD, rolled_up
from migrations.schema import gpu_pod_allocations, rollups, series

(SERVED,) = rolled_up(TARGET_POD)
HOUR = 3600
PodName = tuple[str, str]  # (namespace, pod)
TargetKey = tuple[str, str]  # (host, target)


@dataclass(frozen=True, slots=True)
class Untargeted:
    """A pod's GPU time, busy time and cost while no serving target held its GPU."""

    cost_usd: Decimal = Decimal(0)
    seconds: float = 0.0
    busy_seconds: float = 0.0
    unpriced_seconds: float = 0.0

    def __add__(self, other: Untargeted) -> Untargeted:
        return Untargeted(
            self.cost_usd + other.cost_usd,
            self.seconds + other.seconds,
            self.busy_seconds + other.busy_seconds,
            self.unpriced_seconds + other.unpriced_seconds,
        )


@dataclass(frozen=True, slots=True)
class PodLine:
    """A pod's (or a namespace's, ``pod`` "") cost and GPU time over a window."""

    namespace: str
    pod: str
    cost_usd: Decimal
    seconds: float
    busy_seconds: float
    unpriced_seconds: float
    sm_seconds: float = 0.0
    memory_seconds: float = 0.0
    request_seconds: float = 0.0
    useful_tokens: float | None = None  # None: unknown (no target, or one shared with others)
    targets: frozenset[str] = frozenset()  # "host/target" served in it
    hosts: frozenset[str] = frozenset()
    # The part of its time while no serving target held the GPU (agent.cost.pods_teams)
    untargeted: Untargeted = field(default_factory=lambda: Untargeted())

    @property
    def cost_unknown(self) -> str | None:
        if self.unpriced_seconds > 0:
            unpriced, total = self.unpriced_seconds / HOUR, self.seconds / HOUR
            return f"no rate for {unpriced:.2f} of its {total:.2f} GPU-hours"
        return None

    @property
    def idle_usd(self) -> Decimal:
        if self.seconds <= 0:
            return Decimal(0)
        idle = max(self.seconds - self.busy_seconds, 0.0)
        return self.cost_usd * Decimal(repr(idle)) / Decimal(repr(self.seconds))

    @property
    def basis(self) -> str:
        """How its GPUs were split: "sm_utilization", "memory", "request" (the kubelet's
        allocation, no process), "whole_gpu" (the GPU's only pod), joined by "+" where they
        changed over the window; the biggest first."""
        whole = max(self.seconds - self.sm_seconds - self.memory_seconds - self.request_seconds,
                    0.0)  # fmt: skip
        parts = [("sm_utilization", self.sm_seconds), ("memory", self.memory_seconds),
                 ("request", self.request_seconds), ("whole_gpu", whole)]  # fmt: skip
        # Float sums of the same seconds differ in the last bits: below a millisecond is none.
        return "+".join(name for name, s in sorted(parts, key=lambda p: -p[1]) if s > 1e-3)

    @property
    def placeholder(self) -> bool:
        """The "(unattributed)" and "(no pod)" lines: GPU time of no named pod."""
        return self.pod in (UNATTRIBUTED, NO_POD)


@dataclass(frozen=True, slots=True)
class PodCosts:
    pods: tuple[PodLine, ...] = ()
    namespaces: tuple[PodLine, ...] = ()


@dataclass(frozen=True, slots=True)
class PodLedger:
    """A window's pod rows as read (per host, namespace and pod) and which pods each target's
    processes ran in: what :func:`pod_costs` needs besides the window's tokens."""

    rows: tuple[PodLine, ...] = ()
    served: Mapping[TargetKey, frozenset[PodName]] = field(default_factory=dict)


def read_pods(
    conn: Any, start: datetime, end: datetime, tokens: Mapping[TokenKey, Tokens], rule: str
) -> PodCosts:
    """Every pod's and namespace's line over (start, end]; empty off Kubernetes. ``tokens``
    and ``rule``: the window's tokens per target (agent.cost.summarize) and the useful rule."""
    return pod_costs(read_ledger(conn, Split.read(conn, start, end)), tokens, rule)


def read_ledger(conn: Any, split: Split, hosts: Collection[str] = ()) -> PodLedger:
    """The pod rows answering the split's window (of ``hosts`` when given): a few summed rows
    per pod, whatever the window's length."""
    c = gpu_pod_allocations.c
    query = (
        select(
            c.host,
            c.namespace,
            c.pod,
            func.sum(c.cost_usd),
            func.sum(c.seconds),
            func.sum(c.busy_seconds),
            func.sum(unpriced_seconds(c.cost_usd, c.seconds)),
            func.sum(c.sm_seconds),
            func.sum(c.memory_seconds),
            func.sum(c.request_seconds),
            func.sum(c.untargeted_cost_usd),
            func.sum(c.untargeted_seconds),
            func.sum(c.untargeted_busy_seconds),
            func.sum(unpriced_seconds(c.untargeted_cost_usd, c.untargeted_seconds)),
        )
        .where(split.rows(gpu_pod_allocations, c.host))
        .group_by(c.host, c.namespace, c.pod)
    )
    if hosts:
        query = query.where(c.host.in_(sorted(hosts)))
    rows = tuple(_line(row) for row in conn.execute(query).all())
    if not rows:
        return PodLedger()
    return PodLedger(rows, _served(conn, split, hosts))


def _line(row: Any) -> PodLine:
    host, namespace, pod, cost, seconds, busy, unpriced, sm, memory, request = row[:10]
    free = Untargeted(Decimal(0) + (row[10] or Decimal(0)), row[11], row[12], row[13] or 0.0)
    return PodLine(namespace, pod, Decimal(0) + (cost or Decimal(0)), seconds, busy,
                   unpriced or 0.0, sm, memory, request, hosts=frozenset({host}),
                   untargeted=free)  # fmt: skip


def pod_costs(ledger: PodLedger, tokens: Mapping[TokenKey, Tokens], rule: str) -> PodCosts:
    """Pods' and namespaces' lines, sorted by name (the "(...)" placeholders last), with
    their useful tokens where known."""
    if not ledger.rows:
        return PodCosts()
    useful = {key: t.useful(rule) for key, t in _per_target(tokens).items()}
    pods: dict[PodName, PodLine] = {}
    for line in ledger.rows:
        name = (line.namespace, line.pod)
        pods[name] = _plus(pods.get(name), line)
    served = ledger.served
    return PodCosts(
        tuple(_with_tokens(p, served, useful) for _, p in sorted(pods.items(), key=_order)),
        _namespaces(pods, served, useful),
    )


def _order(item: tuple[PodName, PodLine]) -> tuple[bool, str, str]:
    (namespace, pod), _ = item
    return namespace.startswith("("), namespace, pod


def _plus(a: PodLine | None, b: PodLine) -> PodLine:
    if a is None:
        return b
    return PodLine(
        a.namespace, a.pod, a.cost_usd + b.cost_usd, a.seconds + b.seconds,
        a.busy_seconds + b.busy_seconds, a.unpriced_seconds + b.unpriced_seconds,
        a.sm_seconds + b.sm_seconds, a.memory_seconds + b.memory_seconds,
        a.request_seconds + b.request_seconds, hosts=a.hosts | b.hosts,
        untargeted=a.untargeted + b.untargeted,
    )  # fmt: skip


def _served(conn: Any, split: Split, hosts: Collection[str]) -> dict[TargetKey, frozenset[PodName]]:
    """(host, target) -> the pods its processes ran in during the window."""
    query = select(series.c.id, series.c.host, series.c.labels).where(series.c.metric == SERVED)
    if hosts:
        query = query.where(series.c.host.in_(sorted(hosts)))
    meta = {sid: (host, json.loads(labels)) for sid, host, labels in conn.execute(query)}
    r = rollups.c
    parts = [
        select(r.series_id, func.sum(r.count)).where(condition).group_by(r.series_id)
        for condition in series_ranges(split, {sid: m[0] for sid, m in meta.items()})
    ]
    out: dict[TargetKey, set[PodName]] = defaultdict(set)
    for sid, count in conn.execute(union_all(*parts)) if parts else ():
        host, labels = meta[sid]
        if count:
            out[(host, labels["target"])].add((labels["namespace"], labels["pod"]))
    return {key: frozenset(pods) for key, pods in out.items()}


def _per_target(tokens: Mapping[TokenKey, Tokens]) -> dict[TargetKey, Tokens]:
    out: dict[TargetKey, Tokens] = defaultdict(Tokens)
    for (host, target, _), t in tokens.items():
        out[(host, target)] += t
    return out


def _with_tokens(
    p: PodLine, served: Mapping[TargetKey, frozenset[PodName]], useful: Mapping[TargetKey, float]
) -> PodLine:
    mine = [key for key, pods in served.items() if (p.namespace, p.pod) in pods]
    alone = all(len(served[key]) == 1 for key in mine)
    known = bool(mine) and alone
    total = sum(useful.get(key, 0.0) for key in mine) if known else None
    names = frozenset(f"{host}/{target}" for host, target in mine)
    return replace(p, useful_tokens=total, targets=names)


def _namespaces(
    pods: Mapping[PodName, PodLine],
    served: Mapping[TargetKey, frozenset[PodName]],
    useful: Mapping[TargetKey, float],
) -> tuple[PodLine, ...]:
    out: dict[str, PodLine] = {}
    for (namespace, _), p in pods.items():
        out[namespace] = _plus(out.get(namespace), replace(p, pod=""))
    lines = []
    for namespace, n in sorted(out.items(), key=lambda i: (i[0].startswith("("), i[0])):
        mine = [key for key, ps in served.items() if any(ns == namespace for ns, _ in ps)]
        alone = all(len({ns for ns, _ in served[key]}) == 1 for key in mine)
        total = sum(useful.get(key, 0.0) for key in mine) if mine and alone else None
        names = frozenset(f"{host}/{target}" for host, target in mine)
        lines.append(replace(n, useful_tokens=total, targets=names))
    return tuple(lines)
