"""Alert states remember when a firing alert's condition first stopped holding.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02

Prometheus counts ``keep_firing_for`` from the first evaluation whose condition is false
(``KeepFiringSince``), not from the last true one; the new column holds that instant. Existing
rows get NULL: an alert kept firing at the upgrade counts from its next false evaluation.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import migrations.schema

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("alert_states") as batch:
        batch.add_column(
            sa.Column("keep_firing_since", migrations.schema.UtcDateTime(), nullable=True)
        )


def downgrade() -> None:
    with op.batch_alter_table("alert_states") as batch:
        batch.drop_column("keep_firing_since")
