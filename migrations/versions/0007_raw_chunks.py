"""Raw samples in a head of recent rows plus compressed chunks; compact time on SQLite.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01

A raw sample cost 115 bytes on SQLite (a rowid table, its primary-key index and a ``ts`` index,
the timestamp stored as 26 characters of text three times) and about 100 on PostgreSQL. Now
``samples`` holds only the recent rows (the head), keyed by (series, time) with nothing else:
WITHOUT ROWID and integer microseconds on SQLite, no ``ts`` index on either backend (every
query names its series). The rollup job packs each rolled-up hour into ``sample_chunks``
(:mod:`agent.storage.chunk_codec`), a few bytes per sample.

Existing samples are kept, exactly: on SQLite they are copied into the new head table with
their timestamps converted in SQL (the text always has six digits of microseconds); the rollup
job then packs them, a few hours per run, oldest first. On PostgreSQL the table already has the
right shape and only loses its ``ts`` index.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

import migrations.schema

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

# SQLAlchemy's SQLite DATETIME text is "YYYY-MM-DD HH:MM:SS.ffffff": whole seconds from the
# first 19 characters, then the six digits of microseconds.
_MICROS = (
    "CAST(strftime('%s', substr(ts, 1, 19)) AS INTEGER) * 1000000"
    " + CAST(substr(ts, 21, 6) AS INTEGER)"
)
_TEXT = (
    "strftime('%Y-%m-%d %H:%M:%S', ts / 1000000, 'unixepoch')"
    " || '.' || substr('000000' || (ts % 1000000), -6, 6)"
)


def upgrade() -> None:
    op.create_table(
        "sample_chunks",
        sa.Column("series_id", sa.Integer(), nullable=False),
        sa.Column("start", migrations.schema.UtcInstant(), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(
            ["series_id"],
            ["series.id"],
            name=op.f("fk_sample_chunks_series_id_series"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("series_id", "start", name=op.f("pk_sample_chunks")),
    )
    if op.get_bind().dialect.name != "sqlite":
        op.drop_index("ix_samples_ts", table_name="samples")
        return
    _create_head("samples_head", sa.BigInteger(), rowid=False)
    op.execute(
        f"INSERT INTO samples_head (series_id, ts, value) SELECT series_id, {_MICROS}, value"
        " FROM samples"
    )
    op.drop_table("samples")
    op.rename_table("samples_head", "samples")


def downgrade() -> None:
    # Packed samples go back to rows only through a gpuwatch that reads chunks: refuse to drop
    # them silently.
    if op.get_bind().execute(sa.text("SELECT count(*) FROM sample_chunks")).scalar():
        raise RuntimeError("sample_chunks holds packed samples; downgrading would lose them")
    if op.get_bind().dialect.name != "sqlite":
        op.create_index("ix_samples_ts", "samples", ["ts"], unique=False)
    else:
        _create_head("samples_rows", migrations.schema.UtcDateTime(), rowid=True)
        op.execute(
            f"INSERT INTO samples_rows (series_id, ts, value) SELECT series_id, {_TEXT}, value"
            " FROM samples"
        )
        op.drop_table("samples")
        op.rename_table("samples_rows", "samples")
        op.create_index("ix_samples_ts", "samples", ["ts"], unique=False)
    op.drop_table("sample_chunks")


def _create_head(name: str, ts_type: sa.types.TypeEngine[Any], rowid: bool) -> None:
    op.create_table(
        name,
        sa.Column("series_id", sa.Integer(), nullable=False),
        sa.Column("ts", ts_type, nullable=False),
        sa.Column("value", sa.Double(), nullable=False),
        sa.ForeignKeyConstraint(
            ["series_id"],
            ["series.id"],
            name=op.f("fk_samples_series_id_series"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("series_id", "ts", name=op.f("pk_samples")),
        sqlite_with_rowid=rowid,
    )
