"""The report's "Namespaces" and "Pods" sections and their records (agent.reporting.pod_parts):
the same cells in every format, JSON with every field (docs/report-schema.md). No section
where no GPU ran on Kubernetes in the period."""

from __future__ import annotations

from agent.reporting.model import PodRow, Report
from agent.reporting.render.grid import Column, Section, each, grid, text_column
from agent.reporting.render.values import Cell, Kind

Record = dict[str, Cell]
NOTE = (
    "each GPU's cost split among the pods on it (split by: their processes' SM utilization, "
    "else memory; request: no process, the pods the kubelet gave it; whole_gpu: its only pod); "
    "idle cost: the share of that time the GPU was not busy; (unattributed): GPU processes in "
    "no known pod; (no pod): GPU time nobody held; useful tokens: of the targets served in it "
    "alone, else n/a"
)


def pod_record(p: PodRow) -> Record:
    """A pod's or a namespace's row; unknown cost and tokens stay unknown, never 0."""
    reason = p.cost_unknown_reason
    record: Record = {"namespace": Cell(Kind.TEXT, p.namespace)}
    if p.pod:
        record["pod"] = Cell(Kind.TEXT, p.pod)
    return record | {
        "cost_usd": Cell(Kind.USD, None if reason else p.cost_usd),
        "idle_cost_usd": Cell(Kind.USD, None if reason else p.idle_cost_usd),
        "gpu_hours": Cell(Kind.HOURS, p.gpu_hours),
        "utilization_ratio": Cell(Kind.RATIO, p.utilization_ratio),
        "useful_tokens": Cell(Kind.COUNT, p.useful_tokens),
        "cost_per_million_tokens_usd": Cell(Kind.USD_PER_M, p.cost_per_million_tokens_usd),
        "split_basis": Cell(Kind.TEXT, p.split_basis or None),
        "team": Cell(Kind.TEXT, p.team, ""),
        "project": Cell(Kind.TEXT, p.project, ""),
        "targets": Cell(Kind.TEXT, ", ".join(p.targets)),
        "hosts": Cell(Kind.TEXT, ", ".join(p.hosts)),
        "cost_unknown_reason": Cell(Kind.TEXT, reason, ""),
    }


def pod_sections(report: Report) -> list[Section]:
    if not report.pods:
        return []
    figures = (
        Column("cost_usd", "cost"),
        Column("idle_cost_usd", "idle cost"),
        Column("gpu_hours", "GPU hours"),
        Column("useful_tokens", "useful tokens"),
        Column("cost_per_million_tokens_usd", "$/M tokens"),
        text_column("split_basis", "split by"),
    )
    labelled = any(n.team or n.project for n in report.namespaces)
    labels = (text_column("team", "team"), text_column("project", "project")) if labelled else ()
    namespaces = grid(
        "namespaces", "Namespaces", (text_column("namespace", "namespace"), *figures, *labels),
        each(report.namespaces, pod_record), note=NOTE,
    )  # fmt: skip
    pods = grid(
        "pods", "Pods", (text_column("namespace", "namespace"), text_column("pod", "pod"),
                         *figures),
        each(report.pods, pod_record),
    )  # fmt: skip
    return [namespaces, pods]
