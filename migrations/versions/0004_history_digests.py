"""Alert history (for reports) and the weekly digests' send record.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import migrations.schema

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "alert_history",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("scope", sa.String(length=255), nullable=False),
        sa.Column("rule", sa.String(length=128), nullable=False),
        sa.Column("labels", sa.Text(), nullable=False),
        sa.Column("severity", sa.String(length=16), nullable=False),
        sa.Column("fired_at", migrations.schema.UtcDateTime(), nullable=False),
        sa.Column("resolved_at", migrations.schema.UtcDateTime(), nullable=True),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_alert_history")),
    )
    op.create_index("ix_alert_history_fired_at", "alert_history", ["fired_at"], unique=False)
    op.create_table(
        "digests",
        sa.Column("week_start", migrations.schema.UtcDateTime(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("claimed_by", sa.String(length=255), nullable=False),
        sa.Column("claimed_at", migrations.schema.UtcDateTime(), nullable=False),
        sa.Column("sent_at", migrations.schema.UtcDateTime(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("week_start", name=op.f("pk_digests")),
    )


def downgrade() -> None:
    op.drop_table("digests")
    op.drop_index("ix_alert_history_fired_at", table_name="alert_history")
    op.drop_table("alert_history")
