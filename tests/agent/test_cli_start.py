"""`gpuwatch --help` and `breakeven` with given figures start without the database's libraries:
SQLAlchemy and Alembic alone take most of a second (timed by `make bench`, not here). Checked
in a fresh process, by what it has imported when the command is done."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.cli_start import BREAKEVEN  # the command the benchmark times

REPO = Path(__file__).resolve().parents[2]
# Libraries a command imports only when it needs them, and gpuwatch's own rooms that read the
# database or run the daemon.
HEAVY = ("sqlalchemy", "alembic", "httpx", "apscheduler", "slack_sdk", "pynvml", "psycopg")
ROOMS = ("agent.config.settings", "agent.storage", "agent.daemon", "agent.alerting", "migrations")
PROBE = """
import json, sys
from agent.cli.main import main
try:
    status = main(sys.argv[1:])
except SystemExit as exit_:
    status = exit_.code
print(json.dumps({"status": status, "modules": sorted(sys.modules)}), file=sys.stderr)
"""


def loaded(args: list[str]) -> tuple[int, list[str], str]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    found = json.loads(done.stderr.strip().splitlines()[-1])
    return found["status"], found["modules"], done.stdout


def heavy_among(modules: list[str]) -> list[str]:
    return [
        m
        for m in modules
        if m.split(".")[0] in HEAVY or any(m == r or m.startswith(r + ".") for r in ROOMS)
    ]


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        BREAKEVEN,
        [*BREAKEVEN, "--json"],
        ["breakeven", "--help"],
        ["report", "--help"],
        ["export", "focus", "--help"],
    ],
    ids=["help", "breakeven", "breakeven-json", "breakeven-help", "report-help", "export-help"],
)
def test_help_and_breakeven_with_figures_import_no_database_library(args: list[str]) -> None:
    status, modules, out = loaded(args)
    assert status == 0
    assert out.startswith(("usage: gpuwatch", "gpuwatch breakeven: 20,000 requests/day", "{"))
    assert heavy_among(modules) == []


def test_a_command_that_reads_the_database_still_finds_its_libraries(tmp_path: Path) -> None:
    """The probe's other side: the lazy imports are there when a command needs them."""
    config = tmp_path / "gpuwatch.toml"
    config.write_text(f'database_url = "sqlite:///{tmp_path / "gw.db"}"\n')
    status, modules, out = loaded(["--log-level", "WARNING", "alerts", "--config", str(config)])
    assert (status, out) == (0, "No alerts firing or pending.\n")
    assert {"sqlalchemy", "agent.config.settings", "agent.storage.db"} <= set(modules)
