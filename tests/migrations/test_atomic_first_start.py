"""A first start that fails half-way (the disk fills while the schema is created) leaves a
database the next start completes, with no manual step.

SQLite reports a full disk as SQLITE_FULL, "database or disk is full"; ``max_page_count`` makes
SQLite itself refuse to grow the file past a size, through the same error path, so the test
needs no small filesystem.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, event, inspect
from sqlalchemy.exc import OperationalError

from agent.storage.db import open_database, upgrade_database
from migrations.runner import current_revision, head_revision, upgrade_to_head
from migrations.schema import metadata


def _full_after(pages: int) -> Any:
    def limit(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.execute(f"PRAGMA max_page_count = {pages}")

    return limit


@pytest.mark.parametrize("pages", [2, 8, 20, 40])
def test_a_first_start_on_a_full_disk_is_completed_by_the_next(tmp_path: Path, pages: int) -> None:
    url = f"sqlite:///{tmp_path / 'gpuwatch.db'}"
    cramped = create_engine(url)
    event.listen(cramped, "connect", _full_after(pages))
    with pytest.raises(OperationalError, match="full"):
        upgrade_to_head(cramped)
    cramped.dispose()
    # Nothing of the failed start is left half-made: no table, no version.
    engine = create_engine(url)
    assert current_revision(engine) is None
    assert inspect(engine).get_table_names() == []
    engine.dispose()

    upgrade_database(url)  # the next start, with room again
    engine = open_database(url)
    assert current_revision(engine) == head_revision()
    assert set(metadata.tables) <= set(inspect(engine).get_table_names())
    engine.dispose()
