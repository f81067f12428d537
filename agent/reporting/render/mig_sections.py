"""The report's "MIG instances" section and its records (agent.reporting.mig_parts): the same
cells in every format, JSON with every field (``mig_instances``, docs/report-schema.md). No
section where no GPU of the report ran MIG instances in the period."""

from __future__ import annotations

from agent.reporting.model import MigRow, Report
from agent.reporting.render.grid import Column, Section, each, grid, text_column
from agent.reporting.render.values import Cell, Kind

Record = dict[str, Cell]
NOTE = (
    "each MIG instance priced by its share of its GPU (split by: its slices, or its memory); "
    "busy from its SM activity (sm_active, GPM per instance), else from the presence of "
    "processes on it (presence); (free): the GPU's slices no instance holds, idle; a GPU's "
    "lines add up to its cost and idle cost in GPU time"
)


def mig_record(m: MigRow) -> Record:
    """An instance's line; unknown cost stays unknown, never 0."""
    reason = m.cost_unknown_reason
    return {
        "host": Cell(Kind.TEXT, m.host),
        "gpu_uuid": Cell(Kind.TEXT, m.gpu_uuid),
        "gpu_index": Cell(Kind.TEXT, m.gpu_index),
        "mig_instance": Cell(Kind.TEXT, m.mig_instance),
        "slices": Cell(Kind.COUNT, m.slices),
        "share_ratio": Cell(Kind.RATIO, m.share_ratio),
        "split_basis": Cell(Kind.TEXT, m.split_basis or None),
        "cost_usd": Cell(Kind.USD, None if reason else m.cost_usd),
        "idle_cost_usd": Cell(Kind.USD, None if reason else m.idle_cost_usd),
        "observed_hours": Cell(Kind.HOURS, m.observed_hours),
        "busy_ratio": Cell(Kind.RATIO, m.busy_ratio),
        "activity_basis": Cell(Kind.TEXT, m.activity_basis),
        "targets": Cell(Kind.TEXT, ", ".join(m.targets)),
        "cost_unknown_reason": Cell(Kind.TEXT, reason, ""),
    }


def mig_sections(report: Report) -> list[Section]:
    if not report.mig_instances:
        return []
    columns = (
        text_column("host", "host"),
        Column("gpu_index", "#"),
        text_column("mig_instance", "MIG instance"),
        Column("slices", "slices"),
        Column("share_ratio", "share"),
        text_column("split_basis", "split by"),
        Column("cost_usd", "cost"),
        Column("idle_cost_usd", "idle cost"),
        Column("busy_ratio", "busy"),
        text_column("activity_basis", "busy from"),
        text_column("targets", "targets"),
    )
    records = each(report.mig_instances, mig_record)
    return [grid("mig_instances", "MIG instances", columns, records, note=NOTE)]
