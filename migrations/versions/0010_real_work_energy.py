"""The cost ledger keeps real work and energy: SM-active time, its idle cost, CO2, and each
target's share of the energy.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-05

``gpu_usage`` gains the seconds SM activity was known (GPM or dcgm-exporter profiling), the
SM-active seconds within them, the cost of their SM-idle share, the energy's CO2 and the
seconds whose energy was integrated from power (no energy counter);
``gpu_allocations`` gains each target's share of the energy and its CO2. Rows metered before
the upgrade had no SM activity source: 0 seconds observed (unknown), NULL money and grams.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("gpu_usage") as batch:
        batch.add_column(
            sa.Column("sm_observed_seconds", sa.Double(), nullable=False, server_default="0")
        )
        batch.add_column(
            sa.Column("sm_active_seconds", sa.Double(), nullable=False, server_default="0")
        )
        batch.add_column(sa.Column("sm_idle_cost_usd", sa.Numeric(24, 12), nullable=True))
        batch.add_column(sa.Column("co2_grams", sa.Double(), nullable=True))
        batch.add_column(
            sa.Column("power_integrated_seconds", sa.Double(), nullable=False, server_default="0")
        )
    with op.batch_alter_table("gpu_allocations") as batch:
        batch.add_column(sa.Column("energy_joules", sa.Double(), nullable=True))
        batch.add_column(sa.Column("co2_grams", sa.Double(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("gpu_allocations") as batch:
        batch.drop_column("co2_grams")
        batch.drop_column("energy_joules")
    with op.batch_alter_table("gpu_usage") as batch:
        batch.drop_column("power_integrated_seconds")
        batch.drop_column("co2_grams")
        batch.drop_column("sm_idle_cost_usd")
        batch.drop_column("sm_active_seconds")
        batch.drop_column("sm_observed_seconds")
