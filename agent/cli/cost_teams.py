"""`gpuwatch cost`'s teams and projects: the window's cost rolled up by the configured labels
(:mod:`agent.cost.teams`), as text lines and as JSON."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agent.cli.columns import aligned

if TYPE_CHECKING:
    from agent.config.teams import Label, Labels
    from agent.cost.pods_read import PodCosts
    from agent.cost.summarize import Summary
    from agent.cost.teams import GroupLine


def groups(
    s: Summary, labels: Labels, rule: str, pods: PodCosts | None = None
) -> dict[str, tuple[GroupLine, ...]]:
    """ "target", "team" and "project" -> their lines; "(no target)" after them where GPU time was
    held by no target (so that the lines add up to the fleet's metered cost). None where no
    label is configured (every line would be "(unlabelled)"), as in the report. ``pods``: the
    window's Kubernetes pods, whose labelled namespaces' untargeted time joins their teams
    (agent.cost.pods_teams)."""
    from agent.cost import pods_teams, teams

    # Every serving target's cost and idle dollars, labelled or not.
    targets = teams.roll_up(lambda host, target: f"{host}/{target}", s.targets, s.tokens, rule)
    if not labels.entries:
        return {"target": targets, "team": (), "project": ()}
    rest = teams.no_target(
        s.fleet.cost_usd, s.gpu_seconds, sum(g.unpriced_seconds for g in s.gpus), s.targets
    )
    extra = (rest,) if rest.seconds > 0 or rest.cost_usd > 0 else ()
    team = teams.teams(labels, s.targets, s.tokens, rule) + extra
    project = teams.projects(labels, s.targets, s.tokens, rule) + extra
    if pods is not None and labels.namespaces:
        team = pods_teams.merged(team, pods_teams.namespace_groups(labels, pods, _team))
        project = pods_teams.merged(project, pods_teams.namespace_groups(labels, pods, _project))
    return {"target": targets, "team": team, "project": project}


def _team(label: Label) -> str | None:
    return label.team


def _project(label: Label) -> str | None:
    return label.project


def lines(s: Summary, labels: Labels, rule: str, pods: PodCosts | None = None) -> list[str]:
    out: list[str] = []
    for kind, group in groups(s, labels, rule, pods).items():
        if not group:
            continue
        rows = [["by " + kind, "cost USD", "useful tokens", "USD / M useful", "idle USD",
                 "GPU hours"]]  # fmt: skip
        for g in group:
            unknown = g.cost_unknown is not None
            rows.append([g.name, "n/a" if unknown else f"{g.cost_usd:,.2f}",
                         f"{g.useful(rule):,.0f}", _per_million(g, rule),
                         "n/a" if unknown else f"{g.idle_usd:,.2f}",
                         f"{g.seconds / 3600:,.1f}"])  # fmt: skip
        # Names whole (host/target can be long), columns as wide as their cells.
        out += ["", *aligned(rows, right=range(1, len(rows[0])))]
    return out


def _per_million(g: GroupLine, rule: str) -> str:
    value = g.per_million(rule)
    return "n/a" if value is None else f"${value:,.4f}"


def as_json(s: Summary, labels: Labels, rule: str, pods: PodCosts | None = None) -> dict[str, Any]:
    return {
        f"{kind}s": [_line(g, rule) for g in rows]
        for kind, rows in groups(s, labels, rule, pods).items()
    }


def _line(g: GroupLine, rule: str) -> dict[str, Any]:
    unknown, per = g.cost_unknown, g.per_million(rule)
    return {
        "name": g.name,
        "cost_usd": None if unknown else str(round(g.cost_usd, 6)),
        "cost_unknown_reason": unknown,
        "useful_tokens": g.useful(rule),
        "cost_per_million_tokens_usd": None if per is None else str(round(per, 6)),
        "idle_cost_usd": None if unknown else str(round(g.idle_usd, 6)),
        "gpu_hours": g.seconds / 3600,
        "busy_gpu_hours": g.busy_seconds / 3600,
        "targets": sorted(g.targets),
    }
