"""The report's Kubernetes namespaces and pods (agent.cost.pods_read): each one's cost, idle
dollars, GPU hours, useful tokens and the basis of its GPUs' split, and a namespace's team and
project where ``[[labels]]`` names it. None where no GPU ran on Kubernetes in the window, and
none under a model filter (a pod's GPU time is not per model)."""

from __future__ import annotations

from decimal import Decimal

from agent.config.teams import Labels
from agent.cost.pods_read import PodCosts, PodLine
from agent.cost.summarize import MILLION
from agent.reporting.figures import hours
from agent.reporting.model import PodRow


def pod_rows(
    costs: PodCosts, labels: Labels, models_filter: bool
) -> tuple[tuple[PodRow, ...], tuple[PodRow, ...]]:
    """(namespaces, pods)."""
    if models_filter:
        return (), ()
    return (
        tuple(_row(p, labels, namespace=True) for p in costs.namespaces),
        tuple(_row(p, labels, namespace=False) for p in costs.pods),
    )


def _row(p: PodLine, labels: Labels, namespace: bool) -> PodRow:
    label = labels.of_namespace(p.namespace) if namespace else None
    return PodRow(
        namespace=p.namespace,
        pod=p.pod,
        cost_usd=p.cost_usd,
        idle_cost_usd=p.idle_usd,
        gpu_hours=hours(p.seconds),
        utilization_ratio=p.busy_seconds / p.seconds if p.seconds > 0 else None,
        useful_tokens=p.useful_tokens,
        cost_per_million_tokens_usd=_per_million(p),
        split_basis=p.basis,
        team=None if label is None else label.team,
        project=None if label is None else label.project,
        targets=tuple(sorted(p.targets)),
        hosts=tuple(sorted(p.hosts)),
        cost_unknown_reason=p.cost_unknown,
    )


def _per_million(p: PodLine) -> Decimal | None:
    if p.cost_unknown is not None or not p.useful_tokens:
        return None
    return p.cost_usd / Decimal(repr(p.useful_tokens)) * MILLION
