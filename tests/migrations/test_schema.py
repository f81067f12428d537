"""The migrations produce exactly the schema in migrations.schema, on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect, text

from agent.storage.db import create_engine
from migrations.runner import (
    SchemaError,
    alembic_config,
    assert_at_head,
    current_revision,
    head_revision,
    upgrade_to_head,
)
from migrations.schema import metadata


def test_there_is_exactly_one_head() -> None:
    heads = ScriptDirectory.from_config(alembic_config()).get_heads()
    assert heads == [head_revision()]


def test_migrations_match_the_metadata_without_drift(db_url: str) -> None:
    engine = create_engine(db_url)
    upgrade_to_head(engine)
    with engine.connect() as conn:
        diff = compare_metadata(
            MigrationContext.configure(conn, opts={"compare_type": True}), metadata
        )
    engine.dispose()
    assert diff == [], f"migrations and migrations/schema.py disagree: {diff}"


def test_upgrade_is_idempotent_and_reports_revisions(db_url: str) -> None:
    engine = create_engine(db_url)
    assert current_revision(engine) is None
    assert upgrade_to_head(engine) == (None, head_revision())
    assert upgrade_to_head(engine) == (head_revision(), head_revision())
    assert set(inspect(engine).get_table_names()) >= {"series", "samples", "collector_runs"}
    engine.dispose()


def test_assert_at_head_names_the_command_on_an_empty_database(db_url: str) -> None:
    engine = create_engine(db_url)
    with pytest.raises(SchemaError, match="gpuwatch db upgrade"):
        assert_at_head(engine)
    engine.dispose()


def test_assert_at_head_refuses_a_schema_from_a_newer_gpuwatch(db_url: str) -> None:
    engine = create_engine(db_url)
    upgrade_to_head(engine)
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = 'ffff'"))
    with pytest.raises(SchemaError, match="newer than this gpuwatch"):
        assert_at_head(engine)
    engine.dispose()
