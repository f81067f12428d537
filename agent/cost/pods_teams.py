"""Kubernetes namespaces' GPU time in the team and project roll-ups (agent.cost.teams).

A namespace labelled by ``[[labels]] namespace = ...`` brings its team and project its pods'
GPU time while no serving target held the GPU (the ledger's ``untargeted`` figures): batch
jobs, notebooks, training, anything gpuwatch does not scrape. GPU time a target held is
already counted through that target (and the target's own label) however the pods shared it,
so it is not counted twice; it stays with the target's team. What the namespaces bring is
exactly part of the "(no target)" line and is taken off it, so a roll-up still adds up to the
fleet's metered cost.
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal

from agent.config.teams import Label, Labels
from agent.cost.pods_read import PodCosts
from agent.cost.teams import NO_TARGET, GroupLine


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
