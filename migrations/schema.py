"""SQLAlchemy metadata: the one definition of gpuwatch's tables.

Migrations in ``migrations/versions`` must produce exactly this schema; a test compares the two.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Column,
    DateTime,
    Dialect,
    Double,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)
from sqlalchemy.types import TypeDecorator

# Stable constraint names, so Alembic can drop or alter them on both SQLite and PostgreSQL.
NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = MetaData(naming_convention=NAMING_CONVENTION)


class UtcDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC timestamp on every backend.

    SQLite has no timezone type and hands back naive datetimes; this stores UTC and re-attaches
    the zone on the way out, so code never compares naive with aware instants.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r}: gpuwatch stores UTC-aware instants only")
        value = value.astimezone(UTC)
        # SQLite would otherwise store the "+00:00" suffix, and string comparison then breaks.
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        assert isinstance(value, datetime)
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


# One row per distinct series (metric + labels); samples refer to it by id so that a tick
# writes small rows and the label text is stored once.
series = Table(
    "series",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("host", String(255), nullable=False),
    Column("collector", String(64), nullable=False),
    Column("metric", String(200), nullable=False),
    # Canonical JSON of the labels (keys sorted, no spaces): the identity of the series.
    Column("labels", Text, nullable=False),
    UniqueConstraint("metric", "labels", name="uq_series_metric_labels"),
    Index("ix_series_host_metric", "host", "metric"),
)

samples = Table(
    "samples",
    metadata,
    Column(
        "series_id",
        Integer,
        ForeignKey("series.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    Column("ts", UtcDateTime(), primary_key=True),
    Column("value", Double, nullable=False),
    Index("ix_samples_ts", "ts"),
)

# One row per collection tick and collector: when it ran, whether it worked, and why not.
collector_runs = Table(
    "collector_runs",
    metadata,
    Column(
        "id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True
    ),
    Column("host", String(255), nullable=False),
    Column("collector", String(64), nullable=False),
    Column("ts", UtcDateTime(), nullable=False),
    Column("success", Integer, nullable=False),
    Column("duration_seconds", Double, nullable=False),
    Column("samples", Integer, nullable=False),
    Column("error", Text, nullable=True),
    Index("ix_collector_runs_host_collector_ts", "host", "collector", "ts"),
)
