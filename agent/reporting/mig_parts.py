"""The report's MIG instances (agent.cost.mig): per MIG instance of each GPU in the report, its
share of the GPU, its cost and idle cost, how busy it was and on which basis, and the targets
on it; the GPU's free slices as its own "(free)" line. A GPU's instance lines add up to its
row's cost and idle cost."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from decimal import Decimal
from typing import Any

from sqlalchemy import func, select

from agent.cost.mig import FREE
from agent.cost.split import Split
from agent.cost.summarize import unpriced_seconds
from agent.reporting.model import GpuRow, MigRow
from migrations.schema import gpu_mig_usage

Line = dict[str, Any]


def read_mig(
    conn: Any, split: Split, hosts: Collection[str] = ()
) -> dict[tuple[str, str, str], Line]:
    """(host, gpu uuid, instance) -> its sums over the split's window: a few rows per
    instance, whatever the window's length."""
    c = gpu_mig_usage.c
    query = (
        select(
            c.host, c.gpu_uuid, c.mig_instance, c.basis, c.targets, func.max(c.slices),
            func.sum(c.seconds), func.sum(c.share_seconds), func.sum(c.busy_seconds),
            func.sum(c.sm_seconds), func.sum(c.cost_usd), func.sum(c.idle_cost_usd),
            func.sum(unpriced_seconds(c.cost_usd, c.seconds)),
        )
        .where(split.rows(gpu_mig_usage, c.host))
        .group_by(c.host, c.gpu_uuid, c.mig_instance, c.basis, c.targets)
    )  # fmt: skip
    if hosts:
        query = query.where(c.host.in_(sorted(hosts)))
    out: dict[tuple[str, str, str], Line] = {}
    for row in conn.execute(query).all():
        host, uuid, name, basis, targets, slices = row[:6]
        line = out.setdefault((host, uuid, name), _empty())
        line["bases"].add(basis)
        line["targets"].update(t for t in targets.split(",") if t)
        line["slices"] = slices if line["slices"] is None else max(line["slices"], slices or 0)
        for key, value in zip(("seconds", "share", "busy", "sm"), row[6:10], strict=True):
            line[key] += value or 0.0
        line["cost"] += row[10] or Decimal(0)
        line["idle"] += row[11] or Decimal(0)
        line["unpriced"] += row[12] or 0.0
    return out


def _empty() -> Line:
    sums = dict.fromkeys(("seconds", "share", "busy", "sm", "unpriced"), 0.0)
    return {"bases": set(), "targets": set(), "slices": None, "cost": Decimal(0),
            "idle": Decimal(0), **sums}  # fmt: skip


def mig_rows(lines: dict[tuple[str, str, str], Line], gpus: Sequence[GpuRow]) -> tuple[MigRow, ...]:
    """The instance lines of the report's GPUs, in the GPUs' order, each GPU's free line last."""
    out: list[MigRow] = []
    for g in gpus:
        mine = sorted(
            (name, line) for (host, uuid, name), line in lines.items()
            if (host, uuid) == (g.host, g.gpu_uuid)
        )  # fmt: skip
        mine.sort(key=lambda item: item[0] == FREE)
        out.extend(_row(g, name, line) for name, line in mine)
    return tuple(out)


def _row(g: GpuRow, name: str, line: Line) -> MigRow:
    seconds, share, sm = line["seconds"], line["share"], line["sm"]
    if name == FREE:
        basis = "free"
    else:
        basis = "sm_active" if sm >= seconds else ("presence" if sm <= 0 else "sm_active+presence")
    reason = f"no rate for GPU {g.gpu_uuid} on {g.host}" if line["unpriced"] > 0 else None
    return MigRow(
        host=g.host,
        gpu_uuid=g.gpu_uuid,
        gpu_index=g.gpu_index,
        mig_instance=name,
        slices=line["slices"],
        share_ratio=share / seconds if seconds > 0 else None,
        split_basis="+".join(sorted(line["bases"])),
        cost_usd=line["cost"],
        idle_cost_usd=line["idle"],
        observed_hours=seconds / 3600,
        busy_ratio=line["busy"] / share if share > 0 else None,
        activity_basis=basis,
        targets=tuple(sorted(line["targets"])),
        cost_unknown_reason=reason,
    )
