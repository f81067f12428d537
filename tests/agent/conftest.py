"""Fixtures shared by the agent's tests: the simulated month of report_month.py, filled once.

Filling the month (two hosts, a month of hourly rounds, the real rollup job) takes seconds on
SQLite and longer on PostgreSQL, and test_report.py and test_day_rollups.py each want a
database of their own holding it. So each xdist worker fills it once per backend into a
template, and each module gets a copy: SQLite's backup API, PostgreSQL's ``CREATE DATABASE ...
TEMPLATE``. (`make test` places files on workers by file, so the two modules share a template
only when they land on the same worker.)
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from agent.storage.db import open_database, upgrade_database
from tests.agent import report_month as M
from tests.conftest import _admin_url, new_pg_database


class MonthTemplates:
    """Per backend, a database holding the filled month, and fresh copies of it."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._sqlite: Path | None = None
        self._pg: Iterator[str] | None = None  # the template's generator: closing it drops it
        self._pg_name = ""

    def copy(self, backend: str) -> Iterator[str]:
        """A URL of a new database holding the month; dropped after the caller is done."""
        if backend == "sqlite":
            yield self._sqlite_copy()
            return
        admin_url = _admin_url()
        assert admin_url is not None
        yield from new_pg_database(admin_url, template=self._pg_template(admin_url))

    def close(self) -> None:
        if self._pg is not None:
            self._pg.close()

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

    def _pg_template(self, admin_url: str) -> str:
        if self._pg is None:
            self._pg = new_pg_database(admin_url)
            url = next(self._pg)
            _fill(url)
            self._pg_name = str(make_url(url).database)
        return self._pg_name


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
