"""The cost ledger keeps each Kubernetes pod's share of a GPU: ``gpu_pod_allocations``.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-05

One row per GPU, pod and bucket (minute, hour, day), as ``gpu_allocations`` has per target:
the pod's GPU seconds, busy seconds and cost, and the seconds split by SM utilization, by
memory and by the kubelet's allocation alone, and the part of its time, busy time and cost
while no serving target held the GPU (what a namespace's label brings its team). Ledgers
metered before the upgrade have no pod rows: their time is in no pod, as it was.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from migrations.schema import UtcInstant

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "gpu_pod_allocations",
        sa.Column("host", sa.String(255), primary_key=True),
        sa.Column("gpu_uuid", sa.String(100), primary_key=True),
        sa.Column("namespace", sa.String(255), primary_key=True),
        sa.Column("pod", sa.String(255), primary_key=True),
        sa.Column("resolution", sa.Integer(), primary_key=True),
        sa.Column("start", UtcInstant(), primary_key=True),
        sa.Column("seconds", sa.Double(), nullable=False),
        sa.Column("busy_seconds", sa.Double(), nullable=False),
        sa.Column("cost_usd", sa.Numeric(24, 12), nullable=True),
        sa.Column("sm_seconds", sa.Double(), nullable=False),
        sa.Column("memory_seconds", sa.Double(), nullable=False),
        sa.Column("request_seconds", sa.Double(), nullable=False),
        sa.Column("untargeted_seconds", sa.Double(), nullable=False),
        sa.Column("untargeted_busy_seconds", sa.Double(), nullable=False),
        sa.Column("untargeted_cost_usd", sa.Numeric(24, 12), nullable=True),
        sqlite_with_rowid=False,
    )
    op.create_index(
        "ix_gpu_pod_allocations_resolution_start",
        "gpu_pod_allocations",
        ["resolution", "start"],
    )


def downgrade() -> None:
    op.drop_index("ix_gpu_pod_allocations_resolution_start", "gpu_pod_allocations")
    op.drop_table("gpu_pod_allocations")
