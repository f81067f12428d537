"""Fixtures shared by the agent's tests: the simulated month of report_month.py, filled once.

Filling the month (two hosts, a month of hourly rounds, the real rollup job) takes seconds on
SQLite and longer on PostgreSQL, and test_report.py and test_day_rollups.py each want a
database of their own holding it. So it is filled once per backend into a template and each
module gets a copy: SQLite's backup API, PostgreSQL's ``CREATE DATABASE ... TEMPLATE``.
Both modules are one xdist group: under ``--dist loadgroup`` they share the template's worker;
under `make test`'s ``--dist loadfile`` each worker that runs one of them fills its own.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from agent.storage.db import open_database, upgrade_database
from tests.agent import report_month as M
from tests.conftest import _admin_url

MONTH_GROUP = "report_month"  # the xdist group of the modules that read the month


class MonthTemplates:
    """Per backend, a database holding the filled month, and fresh copies of it."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._sqlite: Path | None = None
        self._pg: str | None = None  # the template database's name
        self._admin: str | None = None

    def copy(self, backend: str) -> Iterator[str]:
        """A URL of a new database holding the month; dropped after the caller is done."""
        if backend == "sqlite":
            yield self._sqlite_copy()
            return
        admin_url = self._pg_admin()
        name = f"gw_{uuid.uuid4().hex[:12]}"
        admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
        try:
            with admin.connect() as conn:
                conn.execute(text(f'CREATE DATABASE "{name}" TEMPLATE "{self._pg_template()}"'))
            yield make_url(admin_url).set(database=name).render_as_string(hide_password=False)
        finally:
            with admin.connect() as conn:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            admin.dispose()

    def close(self) -> None:
        if self._pg is not None and self._admin is not None:
            admin = create_engine(self._admin, isolation_level="AUTOCOMMIT")
            with admin.connect() as conn:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{self._pg}" WITH (FORCE)'))
            admin.dispose()

    def _sqlite_copy(self) -> str:
        if self._sqlite is None:
            self._sqlite = self.folder / "month.db"
            _fill(f"sqlite:///{self._sqlite}")
        target = self.folder / f"{uuid.uuid4().hex[:12]}.db"
        source, copy = sqlite3.connect(self._sqlite), sqlite3.connect(target)
        try:
            source.backup(copy)
        finally:
            source.close()
            copy.close()
        return f"sqlite:///{target}"

    def _pg_admin(self) -> str:
        admin_url = _admin_url()
        assert admin_url is not None
        self._admin = admin_url
        return admin_url

    def _pg_template(self) -> str:
        if self._pg is None:
            admin_url = self._pg_admin()
            name = f"gw_month_{uuid.uuid4().hex[:8]}"
            admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
            with admin.connect() as conn:
                conn.execute(text(f'CREATE DATABASE "{name}"'))
            admin.dispose()
            self._pg = name
            _fill(make_url(admin_url).set(database=name).render_as_string(hide_password=False))
        return self._pg


def _fill(url: str) -> None:
    upgrade_database(url)
    engine = open_database(url)
    try:
        M.fill(engine)
        M.store_alerts(engine)
    finally:
        engine.dispose()  # a template takes no copies while a connection is open


@pytest.fixture(scope="session")
def month_templates(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MonthTemplates]:
    templates = MonthTemplates(tmp_path_factory.mktemp("month"))
    yield templates
    templates.close()
