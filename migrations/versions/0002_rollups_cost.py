"""Rollups, the GPU cost ledger and billing records.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import migrations.schema

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "billing_resources",
        sa.Column("source", sa.String(length=64), nullable=False),
        sa.Column("resource", sa.String(length=255), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("gpus", sa.Integer(), nullable=False),
        sa.Column("usd_per_hour", sa.Numeric(precision=24, scale=12), nullable=False),
        sa.Column("first_seen", migrations.schema.UtcDateTime(), nullable=False),
        sa.Column("last_seen", migrations.schema.UtcDateTime(), nullable=False),
        sa.Column("metered_usd", sa.Numeric(precision=24, scale=12), nullable=False),
        sa.PrimaryKeyConstraint("source", "resource", name=op.f("pk_billing_resources")),
    )
    op.create_table(
        "cost_records",
        sa.Column("source", sa.String(length=255), nullable=False),
        sa.Column("record_id", sa.String(length=255), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("resource", sa.String(length=255), nullable=False),
        sa.Column("period_start", migrations.schema.UtcDateTime(), nullable=False),
        sa.Column("period_end", migrations.schema.UtcDateTime(), nullable=False),
        sa.Column("amount", sa.Numeric(precision=24, scale=12), nullable=False),
        sa.Column("currency", sa.String(length=8), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("imported_at", migrations.schema.UtcDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("source", "record_id", name=op.f("pk_cost_records")),
    )
    op.create_index("ix_cost_records_period_start", "cost_records", ["period_start"], unique=False)
    op.create_table(
        "gpu_allocations",
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("gpu_uuid", sa.String(length=100), nullable=False),
        sa.Column("target", sa.String(length=255), nullable=False),
        sa.Column("resolution", sa.Integer(), nullable=False),
        sa.Column("start", migrations.schema.UtcDateTime(), nullable=False),
        sa.Column("seconds", sa.Double(), nullable=False),
        sa.Column("busy_seconds", sa.Double(), nullable=False),
        sa.Column("cost_usd", sa.Numeric(precision=24, scale=12), nullable=True),
        sa.PrimaryKeyConstraint(
            "host", "gpu_uuid", "target", "resolution", "start", name=op.f("pk_gpu_allocations")
        ),
    )
    op.create_index(
        "ix_gpu_allocations_resolution_start",
        "gpu_allocations",
        ["resolution", "start"],
        unique=False,
    )
    op.create_table(
        "gpu_usage",
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("gpu_uuid", sa.String(length=100), nullable=False),
        sa.Column("resolution", sa.Integer(), nullable=False),
        sa.Column("start", migrations.schema.UtcDateTime(), nullable=False),
        sa.Column("gpu_index", sa.String(length=16), nullable=False),
        sa.Column("observed_seconds", sa.Double(), nullable=False),
        sa.Column("busy_seconds", sa.Double(), nullable=False),
        sa.Column("energy_joules", sa.Double(), nullable=True),
        sa.Column("cost_usd", sa.Numeric(precision=24, scale=12), nullable=True),
        sa.Column("idle_cost_usd", sa.Numeric(precision=24, scale=12), nullable=True),
        sa.PrimaryKeyConstraint(
            "host", "gpu_uuid", "resolution", "start", name=op.f("pk_gpu_usage")
        ),
    )
    op.create_index(
        "ix_gpu_usage_resolution_start", "gpu_usage", ["resolution", "start"], unique=False
    )
    op.create_table(
        "rollup_state",
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("job", sa.String(length=64), nullable=False),
        sa.Column("watermark", migrations.schema.UtcDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("host", "job", name=op.f("pk_rollup_state")),
    )
    op.create_table(
        "rollups",
        sa.Column("series_id", sa.Integer(), nullable=False),
        sa.Column("resolution", sa.Integer(), nullable=False),
        sa.Column("start", migrations.schema.UtcDateTime(), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.Column("sum", sa.Double(), nullable=False),
        sa.Column("min", sa.Double(), nullable=False),
        sa.Column("max", sa.Double(), nullable=False),
        sa.Column("last", sa.Double(), nullable=False),
        sa.Column("increase", sa.Double(), nullable=True),
        sa.ForeignKeyConstraint(
            ["series_id"],
            ["series.id"],
            name=op.f("fk_rollups_series_id_series"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("series_id", "resolution", "start", name=op.f("pk_rollups")),
    )
    op.create_index("ix_rollups_resolution_start", "rollups", ["resolution", "start"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_rollups_resolution_start", table_name="rollups")
    op.drop_table("rollups")
    op.drop_table("rollup_state")
    op.drop_index("ix_gpu_usage_resolution_start", table_name="gpu_usage")
    op.drop_table("gpu_usage")
    op.drop_index("ix_gpu_allocations_resolution_start", table_name="gpu_allocations")
    op.drop_table("gpu_allocations")
    op.drop_index("ix_cost_records_period_start", table_name="cost_records")
    op.drop_table("cost_records")
    op.drop_table("billing_resources")
