"""Initial schema: series, samples and collector runs.

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import migrations.schema

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "series",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("collector", sa.String(length=64), nullable=False),
        sa.Column("metric", sa.String(length=200), nullable=False),
        sa.Column("labels", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_series")),
        sa.UniqueConstraint("metric", "labels", name="uq_series_metric_labels"),
    )
    op.create_index("ix_series_host_metric", "series", ["host", "metric"])
    op.create_table(
        "samples",
        sa.Column("series_id", sa.Integer(), nullable=False),
        sa.Column("ts", migrations.schema.UtcDateTime(), nullable=False),
        sa.Column("value", sa.Double(), nullable=False),
        sa.ForeignKeyConstraint(
            ["series_id"],
            ["series.id"],
            name=op.f("fk_samples_series_id_series"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("series_id", "ts", name=op.f("pk_samples")),
    )
    op.create_index("ix_samples_ts", "samples", ["ts"])
    op.create_table(
        "collector_runs",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("collector", sa.String(length=64), nullable=False),
        sa.Column("ts", migrations.schema.UtcDateTime(), nullable=False),
        sa.Column("success", sa.Integer(), nullable=False),
        sa.Column("duration_seconds", sa.Double(), nullable=False),
        sa.Column("samples", sa.Integer(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_collector_runs")),
    )
    op.create_index(
        "ix_collector_runs_host_collector_ts", "collector_runs", ["host", "collector", "ts"]
    )


def downgrade() -> None:
    op.drop_index("ix_collector_runs_host_collector_ts", table_name="collector_runs")
    op.drop_table("collector_runs")
    op.drop_index("ix_samples_ts", table_name="samples")
    op.drop_table("samples")
    op.drop_index("ix_series_host_metric", table_name="series")
    op.drop_table("series")
