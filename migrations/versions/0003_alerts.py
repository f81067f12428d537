"""Alert states, notification groups and log, the notification outbox and silences.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import migrations.schema

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def _time(name: str, *, nullable: bool) -> sa.Column[object]:
    return sa.Column(name, migrations.schema.UtcDateTime(), nullable=nullable)


def upgrade() -> None:
    op.create_table(
        "alert_states",
        sa.Column("scope", sa.String(length=255), nullable=False),
        sa.Column("rule", sa.String(length=128), nullable=False),
        sa.Column("labels", sa.Text(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        _time("active_at", nullable=True),
        _time("fired_at", nullable=True),
        _time("resolved_at", nullable=True),
        _time("last_true_at", nullable=True),
        sa.Column("value", sa.Double(), nullable=True),
        sa.Column("annotations", sa.Text(), nullable=False),
        sa.Column("severity", sa.String(length=16), nullable=False),
        sa.PrimaryKeyConstraint("scope", "rule", "labels", name=op.f("pk_alert_states")),
    )
    op.create_table(
        "alert_groups",
        sa.Column("scope", sa.String(length=255), nullable=False),
        sa.Column("receiver", sa.String(length=128), nullable=False),
        sa.Column("group_labels", sa.Text(), nullable=False),
        _time("first_seen", nullable=False),
        sa.PrimaryKeyConstraint("scope", "receiver", "group_labels", name=op.f("pk_alert_groups")),
    )
    op.create_table(
        "notification_log",
        sa.Column("scope", sa.String(length=255), nullable=False),
        sa.Column("receiver", sa.String(length=128), nullable=False),
        sa.Column("group_labels", sa.Text(), nullable=False),
        _time("sent_at", nullable=False),
        sa.Column("firing", sa.Text(), nullable=False),
        sa.Column("resolved", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint(
            "scope", "receiver", "group_labels", name=op.f("pk_notification_log")
        ),
    )
    op.create_table(
        "outbox",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("scope", sa.String(length=255), nullable=False),
        sa.Column("receiver", sa.String(length=128), nullable=False),
        sa.Column("group_labels", sa.Text(), nullable=False),
        sa.Column("reason", sa.String(length=32), nullable=False),
        sa.Column("payload", sa.Text(), nullable=False),
        _time("created_at", nullable=False),
        _time("expires_at", nullable=False),
        _time("next_attempt_at", nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        _time("finished_at", nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_outbox")),
    )
    op.create_index(
        "ix_outbox_status_next_attempt_at", "outbox", ["status", "next_attempt_at"], unique=False
    )
    op.create_table(
        "silences",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("matchers", sa.Text(), nullable=False),
        _time("starts_at", nullable=False),
        _time("ends_at", nullable=False),
        sa.Column("created_by", sa.String(length=255), nullable=False),
        sa.Column("comment", sa.Text(), nullable=False),
        _time("created_at", nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_silences")),
    )


def downgrade() -> None:
    op.drop_table("silences")
    op.drop_index("ix_outbox_status_next_attempt_at", table_name="outbox")
    op.drop_table("outbox")
    op.drop_table("notification_log")
    op.drop_table("alert_groups")
    op.drop_table("alert_states")
