"""The rollup's carried-forward baselines, and an index for a host's last tick.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01

Each series' last raw point before the next minute rollup's read window is kept, so that no run
scans a day of raw samples for it; the rollup also asks for a host's last tick every minute, now
one lookup in (host, ts). Nothing is copied: a database without carry rows makes its next minute
rollup look the baselines up once from the raw samples, as every run did before, and carry them
forward from then on.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import migrations.schema

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "rollup_carry",
        sa.Column("series_id", sa.Integer(), nullable=False),
        sa.Column("ts", migrations.schema.UtcDateTime(), nullable=False),
        sa.Column("value", sa.Double(), nullable=False),
        sa.ForeignKeyConstraint(
            ["series_id"],
            ["series.id"],
            name=op.f("fk_rollup_carry_series_id_series"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("series_id", name=op.f("pk_rollup_carry")),
    )
    op.create_index("ix_collector_runs_host_ts", "collector_runs", ["host", "ts"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_collector_runs_host_ts", table_name="collector_runs")
    op.drop_table("rollup_carry")
