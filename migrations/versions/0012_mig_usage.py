"""The cost ledger keeps each MIG instance's part of its GPU: ``gpu_mig_usage``.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-05

One row per GPU, MIG instance and bucket (minute, hour, day): the instance's slices, the basis
of its share (slices or memory), its seconds, share-weighted seconds and busy seconds, the
seconds its SM activity was known, its cost and idle cost, and the serving targets on it; the
instance "(free)" is the part no instance holds. Ledgers metered before the upgrade have no
MIG rows: their MIG GPUs stay priced whole, as they were.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from migrations.schema import UtcInstant

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "gpu_mig_usage",
        sa.Column("host", sa.String(255), primary_key=True),
        sa.Column("gpu_uuid", sa.String(100), primary_key=True),
        sa.Column("mig_instance", sa.String(100), primary_key=True),
        sa.Column("resolution", sa.Integer(), primary_key=True),
        sa.Column("start", UtcInstant(), primary_key=True),
        sa.Column("slices", sa.Double(), nullable=True),
        sa.Column("basis", sa.String(16), nullable=False),
        sa.Column("seconds", sa.Double(), nullable=False),
        sa.Column("share_seconds", sa.Double(), nullable=False),
        sa.Column("busy_seconds", sa.Double(), nullable=False),
        sa.Column("sm_seconds", sa.Double(), nullable=False),
        sa.Column("cost_usd", sa.Numeric(24, 12), nullable=True),
        sa.Column("idle_cost_usd", sa.Numeric(24, 12), nullable=True),
        sa.Column("targets", sa.Text(), nullable=False),
        sqlite_with_rowid=False,
    )
    op.create_index("ix_gpu_mig_usage_resolution_start", "gpu_mig_usage", ["resolution", "start"])


def downgrade() -> None:
    op.drop_index("ix_gpu_mig_usage_resolution_start", "gpu_mig_usage")
    op.drop_table("gpu_mig_usage")
