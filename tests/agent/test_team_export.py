"""The team and project labels as FOCUS tags: `gpuwatch export focus`
tags each GPU's rows with the teams and projects of the targets it served, "(unlabelled)" for
a target without one, on SQLite and PostgreSQL."""

from __future__ import annotations

import csv
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import Engine

from agent.cli import export as export_cli
from agent.cli.main import build_parser
from tests.agent.team_helpers import IDLE_GPU, TARGETS, fill, team_config

START = datetime(2026, 11, 10, 12, 0, tzinfo=UTC)


def test_focus_rows_carry_the_team_and_project_of_their_targets(
    db_url: str, db: Engine, tmp_path: Path
) -> None:
    end = fill(db, START)
    config = team_config(tmp_path, db_url)
    out = tmp_path / "focus.csv"
    flags = ["--from", START.isoformat(), "--to", end.isoformat(), "--output", str(out)]
    args = build_parser().parse_args(["export", "focus", *flags])
    assert export_cli.run(args, config, end + timedelta(minutes=5)) == 0
    with out.open(newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))

    tags = {r["ResourceId"]: json.loads(r["Tags"]) for r in rows}
    gpu = {name: uuid for name, (uuid, *_) in TARGETS.items()}
    assert (tags[gpu["chat"]]["team"], tags[gpu["chat"]]["project"]) == ("search", "assistant")
    assert (tags[gpu["embed"]]["team"], tags[gpu["embed"]]["project"]) == ("ads", "assistant")
    assert tags[gpu["batch"]]["team"] == "(unlabelled)"
    assert "team" not in tags[IDLE_GPU]  # no target served on it
    assert tags[gpu["chat"]]["gpuwatch/target"] == "chat"
