"""Opening the database: the embedded SQLite default or a PostgreSQL fleet store.

SQLite is created private (0600, in a 0700 folder), in WAL mode so that a reader (the CLI, a
report) never blocks the daemon's writes, and upgraded to the newest schema on first start.
PostgreSQL is shared by many daemons, so its schema is only ever upgraded on purpose
(`gpuwatch db upgrade`); a daemon refuses to start on an outdated one.
"""

from __future__ import annotations

import logging
import math
import os
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Insert, Table, event
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.engine import create_engine as sa_create_engine

from agent.config.spool import sqlite_file
from foundation.redact import redact_url
from migrations.runner import assert_at_head, upgrade_to_head

log = logging.getLogger(__name__)

# What a command waits for the database: SQLite for another writer's lock, PostgreSQL for a
# connection. The daemon passes its own, shorter deadline (``daemon.database_timeout``).
BUSY_TIMEOUT = 30.0
# Prepared statements kept per SQLite connection (Python's default is 128). A prepared
# window or rollup query holds kilobytes of SQLite's memory, and the daemon's distinct
# statements (IN lists of every length) would fill the caches of its pooled connections over
# its first hour, a slope in its memory. Preparing a statement again costs microseconds
# against a tick's hundreds of milliseconds.
CACHED_STATEMENTS = 16


def is_sqlite(url: str) -> bool:
    return make_url(url).get_backend_name() == "sqlite"


def sqlite_path(url: str) -> Path | None:
    """The database file of a SQLite URL, or None for an in-memory database."""
    return sqlite_file(url)


def create_engine(url: str, timeout: float = BUSY_TIMEOUT) -> Engine:
    """An engine for ``url``; a SQLite file is created private and switched to WAL.

    ``timeout``: how long a connection attempt to PostgreSQL may take (libpq counts whole
    seconds, at least 2), or how long SQLite waits for another writer's lock.
    """
    if not is_sqlite(url):
        # JIT off: gpuwatch's statements are short aggregates over index ranges, costed high
        # enough (a month of a fleet's rows) for the planner to compile them, and the compile
        # (seconds for the ledger's sums) outweighs what it saves; a month's report ran 37 s
        # with JIT and 23 s without.
        given = make_url(url).query.get("options")  # a URL's own options are kept
        options = " ".join([*([given] if isinstance(given, str) else given or ()), "-c jit=off"])
        connect = {"options": options, "connect_timeout": max(2, math.ceil(timeout))}
        return sa_create_engine(url, pool_pre_ping=True, connect_args=connect)
    path = sqlite_path(url)
    if path is not None:
        _create_private_file(path)
    # Two pooled connections: the daemon's jobs take turns on the one writer SQLite allows, and
    # each idle connection keeps its own page cache.
    connect = {"timeout": timeout, "cached_statements": CACHED_STATEMENTS}
    engine = sa_create_engine(url, connect_args=connect, pool_size=2)
    event.listen(engine, "connect", _sqlite_pragmas)
    return engine


def insert_ignoring_conflicts(conn: Connection | Engine, table: Table) -> Insert:
    """INSERT ... ON CONFLICT DO NOTHING in the database's dialect.

    The dialect's module is imported on first use: the PostgreSQL one is 2 MB of a SQLite
    daemon's memory that it never needs.
    """
    if conn.dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        return pg_insert(table).on_conflict_do_nothing()
    from sqlalchemy.dialects.sqlite import insert as sqlite_insert

    return sqlite_insert(table).on_conflict_do_nothing()


def _create_private_file(path: Path) -> None:
    # Created before SQLite opens it, so the file never exists with looser permissions;
    # SQLite gives the -wal and -shm files the same mode as the database file.
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    os.close(fd)
    if path.stat().st_mode & 0o077:
        log.warning("database %s is readable by other users; tightening it to 0600", path)
        path.chmod(0o600)


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")  # durable at checkpoints; WAL keeps it consistent
    cursor.execute("PRAGMA foreign_keys=ON")
    # 256 KiB of page cache per connection instead of SQLite's 2 MiB: a tick's writes and the
    # minute's reads touch the newest pages only, and the OS page cache holds the file anyway;
    # a larger cache only fills with pages nobody reads again, and reads take no longer.
    cursor.execute("PRAGMA cache_size=-256")
    cursor.close()


def upgrade_database(url: str) -> tuple[str | None, str]:
    """`gpuwatch db upgrade`: bring the database at ``url`` to the head; (before, after)."""
    engine = create_engine(url)
    try:
        return upgrade_to_head(engine)
    finally:
        engine.dispose()


def open_database(url: str, timeout: float = BUSY_TIMEOUT) -> Engine:
    """An engine whose schema is at the head: SQLite is upgraded, PostgreSQL only checked.
    ``timeout`` as for :func:`create_engine` (the daemon's database deadline).

    Raises:
        migrations.runner.SchemaError: PostgreSQL (or a newer SQLite) is not at this version's head.
    """
    engine = create_engine(url, timeout)
    if is_sqlite(url):
        before, after = upgrade_to_head(engine)
        if before != after:
            log.info("database %s upgraded from %s to %s", _safe(url), before or "empty", after)
    else:
        try:
            assert_at_head(engine)
        except Exception:
            engine.dispose()
            raise
    return engine


def _safe(url: str) -> str:
    """The URL with any password hidden (a query's ``?password=`` too), for logs and errors."""
    return redact_url(make_url(url).render_as_string(hide_password=True))
