"""Demo databases and real ones never mix.

`gpuwatch demo` marks its SQLite file with an application id in the file's header (SQLite's
``PRAGMA application_id``: no table, no migration). A configuration with ``demo = true`` runs
only on a marked file, and any other configuration refuses a marked one, so simulated data
can neither reach a real database nor a real daemon run on simulated data.
"""

from __future__ import annotations

from sqlalchemy import Engine, text

from agent.storage.db import is_sqlite, sqlite_path
from foundation.errors import GpuwatchError

DEMO_APPLICATION_ID = 0x67776D6F  # "gwmo": gpuwatch demo


class DemoDatabaseError(GpuwatchError):
    """A demo database where a real one is expected, or the other way round."""


def mark_demo(engine: Engine) -> None:
    with engine.begin() as conn:
        conn.exec_driver_sql(f"PRAGMA application_id = {DEMO_APPLICATION_ID}")


def is_demo(engine: Engine) -> bool:
    if engine.dialect.name != "sqlite":
        return False
    with engine.connect() as conn:
        return conn.execute(text("PRAGMA application_id")).scalar() == DEMO_APPLICATION_ID


def check_kind(engine: Engine, url: str, demo: bool) -> None:
    """Raise DemoDatabaseError unless the database's kind is the configuration's."""
    where = sqlite_path(url) if is_sqlite(url) else None
    if demo and where is None:
        raise DemoDatabaseError("demo = true: the demo runs only on its own SQLite file")
    marked = is_demo(engine)
    if marked and not demo:
        raise DemoDatabaseError(
            f"database_url: {where} is a `gpuwatch demo` database of simulated data; "
            "gpuwatch does not run on it (point database_url at another file)"
        )
    if demo and not marked:
        raise DemoDatabaseError(
            f"demo = true but {where} is not a demo database: the demo never writes into a "
            "real one (remove demo = true, or let `gpuwatch demo` make its own)"
        )
