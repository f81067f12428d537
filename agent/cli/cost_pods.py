"""`gpuwatch cost`'s Kubernetes pods and namespaces (agent.cost.pods_read): cost, idle dollars,
GPU hours, useful tokens and the basis of each GPU's split, as text lines and as JSON. Nothing
where no GPU ran on Kubernetes in the window (empty lists in JSON)."""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING, Any

from agent.cli.columns import aligned

if TYPE_CHECKING:
    from agent.config.teams import Labels
    from agent.cost.pods_read import PodCosts, PodLine

MILLION = Decimal(1_000_000)


def lines(pods: PodCosts, labels: Labels) -> list[str]:
    out: list[str] = []
    for kind, rows in (("namespace", pods.namespaces), ("pod", pods.pods)):
        if not rows:
            continue
        table = [["by " + kind, "cost USD", "idle USD", "GPU hours", "useful tokens",
                  "USD / M useful", "split by"]]  # fmt: skip
        if kind == "namespace" and labels.namespaces:
            table[0] += ["team", "project"]
        for p in rows:
            unknown = p.cost_unknown is not None
            name = p.namespace if kind == "namespace" else f"{p.namespace}/{p.pod}"
            if p.placeholder or p.namespace.startswith("("):
                name = p.namespace
            row = [name, "n/a" if unknown else f"{p.cost_usd:,.2f}",
                   "n/a" if unknown else f"{p.idle_usd:,.2f}", f"{p.seconds / 3600:,.1f}",
                   "n/a" if p.useful_tokens is None else f"{p.useful_tokens:,.0f}",
                   _per_million_text(p), p.basis or "n/a"]  # fmt: skip
            if kind == "namespace" and labels.namespaces:
                label = labels.of_namespace(p.namespace)
                row += [label.team or "", label.project or ""]
            table.append(row)
        out += ["", *aligned(table, right=range(1, 6))]
    return out


def as_json(pods: PodCosts, labels: Labels) -> dict[str, Any]:
    """``pods`` and ``namespaces`` lists (docs/report-schema.md)."""
    return {
        "namespaces": [_namespace(p, labels) for p in pods.namespaces],
        "pods": [_pod(p) for p in pods.pods],
    }


def line_json(p: PodLine) -> dict[str, Any]:
    """The figures a pod's and a namespace's JSON share (the report's too)."""
    unknown, per = p.cost_unknown, per_million(p)
    return {
        "namespace": p.namespace,
        "cost_usd": None if unknown else str(round(p.cost_usd, 6)),
        "cost_unknown_reason": unknown,
        "idle_cost_usd": None if unknown else str(round(p.idle_usd, 6)),
        "gpu_hours": p.seconds / 3600,
        "busy_gpu_hours": p.busy_seconds / 3600,
        "useful_tokens": p.useful_tokens,
        "cost_per_million_tokens_usd": None if per is None else str(round(per, 6)),
        "split_basis": p.basis or None,
        "targets": sorted(p.targets),
        "hosts": sorted(p.hosts),
    }


def _pod(p: PodLine) -> dict[str, Any]:
    return {"namespace": p.namespace, "pod": p.pod} | line_json(p)


def _namespace(p: PodLine, labels: Labels) -> dict[str, Any]:
    label = labels.of_namespace(p.namespace)
    return line_json(p) | {"team": label.team, "project": label.project}


def per_million(p: PodLine) -> Decimal | None:
    if p.cost_unknown is not None or not p.useful_tokens:
        return None
    return p.cost_usd / Decimal(repr(p.useful_tokens)) * MILLION


def _per_million_text(p: PodLine) -> str:
    value = per_million(p)
    return "n/a" if value is None else f"${value:,.4f}"
