"""The fleet: forwarding watermarks of a box's local database, and the fleet-wide cost signals.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01

``forward_state`` says how far a box has forwarded each stream (rollups, cost ledger, alert
history, billing records) to the central PostgreSQL; ``fleet_signals`` holds the fleet-wide cost
signals the leader computes once a minute for every daemon's /metrics. Both start empty: a box
forwards from its oldest row, and the leader fills the signals at its next minute.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import migrations.schema

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "forward_state",
        sa.Column("stream", sa.String(length=128), nullable=False),
        sa.Column("until_ts", migrations.schema.UtcDateTime(), nullable=True),
        sa.Column("until_id", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("stream", name=op.f("pk_forward_state")),
    )
    op.create_table(
        "fleet_signals",
        sa.Column("metric", sa.String(length=200), nullable=False),
        sa.Column("labels", sa.Text(), nullable=False),
        sa.Column("value", sa.Double(), nullable=False),
        sa.Column("computed_at", migrations.schema.UtcDateTime(), nullable=False),
        sa.Column("computed_by", sa.String(length=255), nullable=False),
        sa.PrimaryKeyConstraint("metric", "labels", name=op.f("pk_fleet_signals")),
    )


def downgrade() -> None:
    op.drop_table("fleet_signals")
    op.drop_table("forward_state")
