"""`gpuwatch cost`'s text as people read it: names whole, however long, and every figure in line
under its heading, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import Engine

from agent.cli.main import main
from tests.agent import team_helpers
from tests.agent.column_checks import assert_aligned
from tests.agent.team_helpers import fill, team_config

START = (datetime.now(UTC) - timedelta(hours=3)).replace(minute=0, second=0, microsecond=0)
MODEL = "mistral-7b-instruct-v0.3-awq"  # longer than any width the table used to cut at
TARGET = "batch-summaries-nightly"
FIGURES = ["cost USD", "useful tokens", "USD / M useful"]


def test_cost_shows_names_whole_in_aligned_columns(
    db_url: str,
    db: Engine,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    targets = dict(team_helpers.TARGETS)
    targets[TARGET] = (*targets.pop("batch")[:2], MODEL, 10.0)
    monkeypatch.setattr(team_helpers, "TARGETS", targets)
    fill(db, START, ticks=30)
    team_config(tmp_path, db_url)
    argv = ["cost", "--window", "30d", "--config", str(tmp_path / "gpuwatch.toml")]
    capsys.readouterr()
    assert main(argv) == 0
    tables = capsys.readouterr().out.split("\n\n")
    assert "…" not in "".join(tables), "nothing is cut"

    header, *rows = tables[1].splitlines()
    assert [r.split("  ")[0] for r in rows] == [
        "fleet", "model bge", "model llama", f"model {MODEL}", "host box"]  # fmt: skip
    assert_aligned(header, rows, right=[*FIGURES, "total tokens", "abandoned"])

    teams = [t.splitlines() for t in tables if t.startswith("by ")]
    assert [t[0].split("  ")[0] for t in teams] == ["by target", "by team", "by project"]
    by_target = teams[0]
    assert f"box/{TARGET}" in [r.split("  ")[0] for r in by_target[1:]]
    for header, *rows in teams:
        assert_aligned(header, rows, right=[*FIGURES, "idle USD", "GPU hours"])

    assert main([*argv, "--json"]) == 0  # JSON had the names whole already
    document = json.loads(capsys.readouterr().out)
    assert MODEL in [m["name"] for m in document["models"]]
    assert f"box/{TARGET}" in [t["name"] for t in document["targets"]]
