"""The column types and naming of gpuwatch's tables (migrations.schema): the shared
metadata, and instants stored as UTC (datetime) or as microseconds since the epoch."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import (
    BigInteger,
    DateTime,
    Dialect,
    MetaData,
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


class UtcInstant(TypeDecorator[datetime]):
    """A UTC instant stored compactly: integer microseconds since the epoch on SQLite (8 bytes,
    where ``UtcDateTime`` stores 26 bytes of text), ``timestamptz`` (8 bytes) on PostgreSQL.

    For the tables that grow with time (raw samples, rollups): comparisons and ordering work
    unchanged on both backends, since bound datetimes are converted the same way.
    """

    impl = BigInteger
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> Any:
        if dialect.name == "sqlite":
            return dialect.type_descriptor(BigInteger())
        return dialect.type_descriptor(DateTime(timezone=True))

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> Any:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r}: gpuwatch stores UTC-aware instants only")
        if dialect.name != "sqlite":
            return value.astimezone(UTC)
        return to_micros(value)

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if isinstance(value, datetime):
            return value.astimezone(UTC)
        return from_micros(int(value))


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def to_micros(value: datetime) -> int:
    """Microseconds since the epoch, exactly (no float rounding)."""
    delta = value - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def from_micros(value: int) -> datetime:
    return _EPOCH + timedelta(microseconds=value)
