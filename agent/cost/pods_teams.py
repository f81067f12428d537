"""Kubernetes namespaces' GPU time in the team and project roll-ups (agent.cost.teams).

A namespace labelled by ``[[labels]] namespace = ...`` brings its team and project its pods'
GPU time while no serving target held the GPU (the ledger's ``untargeted`` figures): batch
jobs, notebooks, training, anything gpuwatch does not scrape. GPU time a target held is
already counted through that target (and the target's own label) however the pods shared it,
so it is not counted twice; it stays with the target's team. What the namespaces bring is
exactly part of the "(no target)" line and is taken off it, so a roll-up still adds up to the
fleet's metered cost. A team's budget (``[[budget.teams]]``) counts the same: its targets'
cost and its namespaces' untargeted pod cost (:func:`namespace_team_costs`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping
from datetime import datetime
from decimal import Decimal

from sqlalchemy import Engine, func, select

from agent.config.teams import Label, Labels
from agent.cost.pods_read import PodCosts
from agent.cost.split import Split
from agent.cost.teams import NO_TARGET, GroupLine
from migrations.schema import gpu_pod_allocations


def namespace_groups(
    labels: Labels, pods: PodCosts, name_of: Callable[[Label], str | None]
) -> tuple[GroupLine, ...]:
    """Per team (``name_of``: Label.team or Label.project), its labelled namespaces' pods'
    GPU time no target held; none where no label names a namespace."""
    out: dict[str, GroupLine] = {}
    for p in pods.pods:
        free = p.untargeted
        name = None if p.placeholder else name_of(labels.of_namespace(p.namespace))
        if name is None or free.seconds <= 0:
            continue
        idle_seconds = max(free.seconds - free.busy_seconds, 0.0)
        idle = free.cost_usd * Decimal(repr(idle_seconds)) / Decimal(repr(free.seconds))
        line = GroupLine(
            name, free.cost_usd, idle, free.seconds, free.busy_seconds, free.unpriced_seconds
        )
        out[name] = out.get(name, GroupLine(name)) + line
    return tuple(out.values())


def merged(groups: tuple[GroupLine, ...], extra: tuple[GroupLine, ...]) -> tuple[GroupLine, ...]:
    """``groups`` (the targets' roll-up, "(no target)" last if there) with the namespaces'
    lines added into their teams, and their time taken off "(no target)"."""
    out = {g.name: g for g in groups}
    moved = GroupLine(NO_TARGET)
    for line in extra:
        out[line.name] = out.get(line.name, GroupLine(line.name)) + line
        moved = moved + line
    rest = out.pop(NO_TARGET, None)
    lines = sorted(out.values(), key=lambda g: (g.name.startswith("("), g.name))
    if rest is not None:
        left = GroupLine(
            NO_TARGET,
            max(rest.cost_usd - moved.cost_usd, Decimal(0)),
            max(rest.cost_usd - moved.cost_usd, Decimal(0)),  # all idle: no target held it
            max(rest.seconds - moved.seconds, 0.0),
            0.0,
            max(rest.unpriced_seconds - moved.unpriced_seconds, 0.0),
        )
        if left.seconds > 0 or left.cost_usd > 0:
            lines.append(left)
    return tuple(lines)


def namespace_team_costs(
    engine: Engine, labels: Labels, start: datetime, end: datetime
) -> dict[str, Decimal]:
    """Each team's labelled namespaces' untargeted, priced pod cost over (start, end] (what
    a team budget adds to its targets' cost); empty, without a query, where no label names a
    namespace."""
    if not labels.namespaces:
        return {}
    c = gpu_pod_allocations.c
    with engine.connect() as conn:
        split = Split.read(conn, start, end)
        query = (
            select(c.namespace, func.sum(c.untargeted_cost_usd))
            .where(split.rows(gpu_pod_allocations, c.host))
            .group_by(c.namespace)
        )
        rows = conn.execute(query).all()
    out: dict[str, Decimal] = defaultdict(Decimal)
    for namespace, cost in rows:
        team = labels.of_namespace(namespace).team
        if team is not None and cost is not None:
            out[team] += Decimal(0) + cost
    return dict(out)


def plus(a: Mapping[str, Decimal], b: Mapping[str, Decimal]) -> dict[str, Decimal]:
    return {key: a.get(key, Decimal(0)) + b.get(key, Decimal(0)) for key in {*a, *b}}
