"""Upgrade a database to the newest schema, or tell whether it is there.

Kept free of gpuwatch's other packages so ``gpuwatch db upgrade`` can run on its own.

Alembic is imported only when there is work for it: a daemon whose database is already at the
head (every start but the first after an upgrade) reads the version row and the scripts'
``revision`` lines itself. Alembic and what it pulls in (Mako, Pygments) would otherwise stay
in the daemon's memory for its whole life, about 8 MB (bench/memory.py).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import text
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError

if TYPE_CHECKING:
    from alembic.config import Config

_HERE = Path(__file__).resolve().parent
_REVISION = re.compile(r'^(down_revision|revision)\s*=\s*"([^"]+)"', re.MULTILINE)
# Alembic's line for each migration it applies ("Running upgrade 0008 -> 0009, ...").
_STEP = "Running %s"


class SchemaError(RuntimeError):
    """The database schema is not the one this version of gpuwatch needs."""


def alembic_config(connection: Connection | None = None) -> Config:
    """An Alembic config pointing at this package's scripts (no alembic.ini needed)."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(_HERE))
    if connection is not None:
        config.attributes["connection"] = connection
    return config


@cache
def head_revision() -> str:
    """The single head revision of the migration scripts: the one no script revises."""
    revisions, revised = set(), set()
    for script in (_HERE / "versions").glob("*.py"):
        found = dict((key, value) for key, value in _REVISION.findall(script.read_text()))
        if "revision" in found:
            revisions.add(found["revision"])
        if "down_revision" in found:
            revised.add(found["down_revision"])
    heads = sorted(revisions - revised)
    if len(heads) != 1:
        raise SchemaError(f"migrations have {len(heads)} heads ({', '.join(heads)}); expected one")
    return heads[0]


def current_revision(engine: Engine) -> str | None:
    """The revision the database is at, or None for an empty (never migrated) database."""
    with engine.connect() as connection:
        try:
            row = connection.execute(text("SELECT version_num FROM alembic_version")).first()
        except DBAPIError:  # no such table: never migrated
            return None
    return None if row is None else str(row[0])


def upgrade_to_head(engine: Engine) -> tuple[str | None, str]:
    """Apply every pending migration; returns (revision before, revision after)."""
    before, head = current_revision(engine), head_revision()
    if before == head:
        return before, head
    from alembic import command

    with engine.begin() as connection:
        if connection.dialect.name == "sqlite":
            # Python's sqlite3 opens a transaction only before a data change, so each CREATE
            # TABLE committed on its own: a disk that filled during the first start left half
            # a schema that every later start tripped over ("table series already exists").
            # An explicit BEGIN makes the whole upgrade one transaction, as on PostgreSQL.
            connection.exec_driver_sql("BEGIN IMMEDIATE")
        with _steps_only():
            command.upgrade(alembic_config(connection), "head")
    return before, head


@contextmanager
def _steps_only() -> Iterator[None]:
    """While migrations run, Alembic's line for each ("Running upgrade 0008 -> 0009, ..."), at
    the level the process logs at, even where Alembic is quieted (the CLI keeps it at WARNING:
    at INFO it also describes its plugins and context, which tells a user nothing)."""
    steps = logging.getLogger("alembic.runtime.migration")
    saved = steps.level
    steps.setLevel(logging.getLogger().getEffectiveLevel())
    steps.addFilter(_a_step)
    try:
        yield
    finally:
        steps.removeFilter(_a_step)
        steps.setLevel(saved)


def _a_step(record: logging.LogRecord) -> bool:
    return record.levelno != logging.INFO or record.msg == _STEP


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
    from alembic.script import ScriptDirectory

    try:
        return ScriptDirectory.from_config(alembic_config()).get_revision(revision) is not None
    except Exception:  # alembic raises several types for unknown ids; all mean "not ours"
        return False
