"""Upgrade a database to the newest schema, or tell whether it is there.

Kept free of gpuwatch's other packages so ``gpuwatch db upgrade`` can run on its own.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Connection, Engine

_HERE = Path(__file__).resolve().parent


class SchemaError(RuntimeError):
    """The database schema is not the one this version of gpuwatch needs."""


def alembic_config(connection: Connection | None = None) -> Config:
    """An Alembic config pointing at this package's scripts (no alembic.ini needed)."""
    config = Config()
    config.set_main_option("script_location", str(_HERE))
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def head_revision() -> str:
    """The single head revision of the migration scripts."""
    heads = ScriptDirectory.from_config(alembic_config()).get_heads()
    if len(heads) != 1:
        raise SchemaError(f"migrations have {len(heads)} heads ({', '.join(heads)}); expected one")
    return heads[0]


def current_revision(engine: Engine) -> str | None:
    """The revision the database is at, or None for an empty (never migrated) database."""
    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def upgrade_to_head(engine: Engine) -> tuple[str | None, str]:
    """Apply every pending migration; returns (revision before, revision after)."""
    before = current_revision(engine)
    with engine.begin() as connection:
        command.upgrade(alembic_config(connection), "head")
    return before, head_revision()


def assert_at_head(engine: Engine) -> None:
    """Raise SchemaError, naming the command to run, unless the database is at the head."""
    current, head = current_revision(engine), head_revision()
    if current == head:
        return
    if current is not None and not _known(current):
        raise SchemaError(
            f"database schema is at revision {current}, newer than this gpuwatch ({head}): "
            "upgrade gpuwatch, or point it at another database"
        )
    state = "empty" if current is None else f"at revision {current}"
    raise SchemaError(
        f"database schema is {state}, this gpuwatch needs {head}: run `gpuwatch db upgrade`"
    )


def _known(revision: str) -> bool:
    try:
        return ScriptDirectory.from_config(alembic_config()).get_revision(revision) is not None
    except Exception:  # alembic raises several types for unknown ids; all mean "not ours"
        return False
