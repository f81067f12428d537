"""Kubernetes namespaces' GPU time in the team and project roll-ups (agent.cost.teams).

A namespace labelled by ``[[labels]] namespace = ...`` brings its team and project the cost of
its pods that served no known target: batch jobs, notebooks, training, anything gpuwatch does
not scrape. A pod serving a target is already counted through that target (and its target's
own label), so it is not counted twice; such GPU time stays with the target's team. What the
namespaces bring is taken off the "(no target)" line, so a roll-up still adds up to the
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
    """Per team (``name_of``: Label.team or Label.project), its labelled namespaces' pods that
    served no target; none where no label names a namespace."""
    out: dict[str, GroupLine] = {}
    for p in pods.pods:
        if p.targets or p.placeholder:
            continue
        name = name_of(labels.of_namespace(p.namespace))
        if name is None:
            continue
        line = GroupLine(
            name, p.cost_usd, p.idle_usd, p.seconds, p.busy_seconds, p.unpriced_seconds
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
