"""Before the demo writes anything: its folder, a fresh demo database, the fake NVML loaded.

A demo database left by an earlier run is replaced (the history always ends now); a file at
the demo's path that is not a demo database is refused, never overwritten.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

from agent.demo.hardware import fake_library, load
from agent.demo.scenario import Month
from agent.demo.settings import DemoFiles
from agent.storage.db import create_engine, open_database
from agent.storage.demo_mark import DemoDatabaseError, is_demo, mark_demo
from agent.storage.rollup import SETTLE_SECONDS


def month_ending(now: datetime, days: int) -> Month:
    """``days`` whole UTC days before today, up to a settle before ``now`` (so the rollup has
    closed the history's last minute by the time it is reported)."""
    end = now - timedelta(seconds=SETTLE_SECONDS)
    start = (end - timedelta(days=days)).replace(hour=0, minute=0, second=0, microsecond=0)
    return Month(start, end)


def fresh_database(files: DemoFiles) -> None:
    """Remove an earlier demo's files, then create the database at the head and mark it."""
    if files.database.exists():
        engine = create_engine(files.database_url)
        try:
            demo = is_demo(engine)
        finally:
            engine.dispose()
        if not demo:
            raise DemoDatabaseError(
                f"{files.database} exists and is not a demo database; the demo does not "
                "touch it (choose another --state-dir)"
            )
    for path in _old_files(files):
        path.unlink(missing_ok=True)
    engine = open_database(files.database_url)
    try:
        mark_demo(engine)
    finally:
        engine.dispose()


def _old_files(files: DemoFiles) -> list[Path]:
    """The database, the hosts' spools and outboxes, with SQLite's -wal and -shm files."""
    if not files.folder.is_dir():
        return []
    return [p for p in files.folder.iterdir() if p.name.endswith((".db", ".db-wal", ".db-shm"))]


def nvml(files: DemoFiles) -> Path:
    """Build (when needed) and load the fake NVML library; returns its path."""
    library = fake_library(files.fakenvml)
    load(library)
    return library
