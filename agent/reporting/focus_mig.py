"""The MIG instances' parts of each GPU charge for FOCUS 1.3's allocated rows
(``gpu_mig_usage``, agent.cost.mig): per instance its share-weighted GPU-seconds, busy
GPU-seconds and cost, the basis that priced it and the targets on it. The free slices are left
out: they are the charge's unallocated portion."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal

from sqlalchemy import Connection, select

from agent.cost.mig import FREE
from agent.cost.split import Split
from migrations.schema import gpu_mig_usage

ChargeKey = tuple[datetime, str, str]  # (charge start, host, gpu uuid)


@dataclass(frozen=True, slots=True)
class MigUse:
    """A MIG instance's part of one GPU's charge."""

    instance: str
    seconds: float  # GPU-seconds: its seconds x its share of the GPU
    busy_seconds: float
    cost_usd: Decimal | None
    basis: str  # "slices" or "memory" ("memory" where any of its rows was)
    targets: tuple[str, ...] = ()


@dataclass
class _Mig:
    seconds: float = 0.0
    busy: float = 0.0
    cost: Decimal | None = None
    bases: set[str] = field(default_factory=set)
    targets: set[str] = field(default_factory=set)


def read_migs(
    conn: Connection, split: Split, bucket: Callable[[datetime], datetime]
) -> dict[ChargeKey, tuple[MigUse, ...]]:
    """(charge start, host, gpu uuid) -> its MIG instances' parts, for the MIG GPUs in the
    split's window."""
    c = gpu_mig_usage.c
    query = select(c.host, c.gpu_uuid, c.mig_instance, c.start, c.share_seconds, c.busy_seconds,
                   c.cost_usd, c.basis, c.targets)  # fmt: skip
    read: dict[ChargeKey, dict[str, _Mig]] = {}
    for host, uuid, name, start, seconds, busy, cost, basis, targets in conn.execute(
        query.where(split.rows(gpu_mig_usage, c.host), c.mig_instance != FREE)
    ):
        m = read.setdefault((bucket(start), host, uuid), {}).setdefault(name, _Mig())
        m.seconds += seconds
        m.busy += busy
        m.bases.add(basis)
        m.targets.update(t for t in targets.split(",") if t)
        if cost is not None:
            m.cost = Decimal(cost) if m.cost is None else m.cost + Decimal(cost)
    return {
        key: tuple(
            MigUse(
                name,
                m.seconds,
                m.busy,
                m.cost,
                "memory" if "memory" in m.bases else "slices",
                tuple(sorted(m.targets)),
            )
            for name, m in sorted(instances.items())
        )  # fmt: skip
        for key, instances in read.items()
    }
