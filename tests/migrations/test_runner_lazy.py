"""The runner finds the head without Alembic, and a database at the head costs no Alembic import.

A daemon starts every day or so and upgrades its SQLite database at each start; only the first
start after an upgrade has migrations to run. Importing Alembic (and Mako, Pygments) for nothing
would keep about 8 MB in the daemon's memory for its whole life.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from alembic.script import ScriptDirectory

from agent.storage.db import create_engine
from migrations.runner import alembic_config, current_revision, head_revision, upgrade_to_head

REPO = Path(__file__).resolve().parents[2]


def test_the_head_read_from_the_scripts_is_alembic_s() -> None:
    assert [head_revision()] == ScriptDirectory.from_config(alembic_config()).get_heads()


def test_an_empty_database_has_no_revision_and_is_upgraded(db_url: str) -> None:
    engine = create_engine(db_url)
    assert current_revision(engine) is None
    assert upgrade_to_head(engine) == (None, head_revision())
    assert current_revision(engine) == head_revision()
    engine.dispose()


def test_a_database_at_the_head_is_opened_without_importing_alembic(db_url: str) -> None:
    engine = create_engine(db_url)
    upgrade_to_head(engine)
    engine.dispose()
    probe = (
        "import sys\n"
        "from agent.storage.db import create_engine\n"
        "from migrations.runner import upgrade_to_head\n"
        f"engine = create_engine({db_url!r})\n"
        "before, after = upgrade_to_head(engine)\n"
        "assert before == after, (before, after)\n"
        "print(sorted(m for m in ('alembic', 'mako', 'pygments') if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"
