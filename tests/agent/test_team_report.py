"""Teams, projects and team budgets in every report format, on SQLite and
PostgreSQL: what a reader of each format sees per team is the sum of its targets' model
figures, and the unlabelled target and the GPU no target held are shown, never dropped."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

from sqlalchemy import Engine

from agent.config.settings import load_config
from agent.reporting.build import build_report
from agent.reporting.model import Report
from agent.reporting.period import range_period
from agent.reporting.render.dispatch import render
from tests.agent.report_parsers import (
    csv_sections,
    grid_table,
    markdown_tables,
    number,
    parse_html,
    terminal_sections,
)
from tests.agent.team_helpers import fill, team_config

START = datetime(2026, 11, 10, 12, 0, tzinfo=UTC)
BUDGETS = """
[[budget.teams]]
team = "search"
monthly_usd = 4
[[budget.teams]]
team = "ads"
monthly_usd = 1000
"""
# Which models each team's (and project's) targets served (tests/agent/team_helpers.py).
TEAM_MODELS = {"ads": ["bge"], "search": ["llama"], "(unlabelled)": ["mistral"]}
PROJECT_MODELS = {"assistant": ["llama", "bge"], "(unlabelled)": ["mistral"]}
COLUMNS = ("cost_usd", "useful_tokens", "cost_per_million_tokens_usd", "idle_cost_usd")

Rows = dict[str, tuple[Decimal, ...]]  # name -> the COLUMNS' figures


def _report(db: Engine, tmp_path: Path, db_url: str) -> Report:
    end = fill(db, START)
    config = team_config(tmp_path, db_url, BUDGETS)
    period = range_period(START.isoformat(), end.isoformat(), "UTC")
    return build_report(db, config, period, now=end + timedelta(minutes=5))


def _figures(cells: list[str]) -> tuple[Decimal, ...]:
    return tuple(number(c) for c in cells)


def _from_json(report: Report, key: str) -> Rows:
    rows = json.loads(render(report, "json"))[key]
    return {
        r["name"]: _figures(["-1" if r[c] is None else str(r[c]) for c in COLUMNS]) for r in rows
    }


def _grid_rows(rows: list[list[str]]) -> Rows:
    """A grid's rows (the header first) by name: cost, useful tokens, $/M, idle cost."""
    header = rows[0]
    picked = [header.index(label) for label in ("cost", "useful tokens", "$/M tokens", "idle cost")]
    return {
        row[0]: tuple(_value(row[i]) for i in picked) for row in rows[1:] if len(row) == len(header)
    }


def _value(cell: str) -> Decimal:
    return Decimal(-1) if cell == "n/a" else number(cell)


def _round(value: Decimal | None, places: str) -> Decimal:
    """As the renderers round (half up); -1 for unknown, as the parsers above read "n/a"."""
    return Decimal(-1) if value is None else value.quantize(Decimal(places), ROUND_HALF_UP)


def _in_each_format(report: Report, key: str, title: str) -> dict[str, Rows]:
    table = terminal_sections(render(report, "table"))[title.upper()]
    grid = [row for row in grid_table(table) if len(row) > 1]  # targets wrap onto their own line
    csv_rows = csv_sections(render(report, "csv"))[key]
    return {
        "json": _from_json(report, key),
        "table": _grid_rows(grid),
        "csv": {r["name"]: _figures([r[c] or "-1" for c in COLUMNS]) for r in csv_rows},
        "markdown": _grid_rows(markdown_tables(render(report, "markdown"))[title]),
        "html": _grid_rows(parse_html(render(report, "html")).tables[f"table-{key}"]),
    }


def test_teams_and_projects_are_their_targets_model_figures_in_every_format(
    db_url: str, db: Engine, tmp_path: Path
) -> None:
    report = _report(db, tmp_path, db_url)
    models = {m.model: m for m in report.models}
    for key, title, groups in (("teams", "Teams", TEAM_MODELS),
                               ("projects", "Projects", PROJECT_MODELS)):  # fmt: skip
        rows = {g.name: g for g in getattr(report, key)}
        assert list(rows) == [*groups, "(no target)"]  # by name, the unlabelled last
        for name, served in groups.items():
            cost = sum((models[m].cost_usd for m in served), Decimal(0))
            tokens = sum(models[m].useful_tokens for m in served)
            assert rows[name].cost_usd == cost
            assert rows[name].useful_tokens == tokens
            assert rows[name].cost_per_million_tokens_usd == cost / Decimal(tokens) * 10**6
        # The rows add up to the metered spend: the idle GPU is nobody's, and all idle.
        assert sum((g.cost_usd for g in rows.values()), Decimal(0)) == report.totals.metered_usd
        assert rows["(no target)"].idle_cost_usd == rows["(no target)"].cost_usd > 0

        formats = _in_each_format(report, key, title)
        expected = {
            name: (
                _round(g.cost_usd, "0.01"),
                Decimal(round(g.useful_tokens)),
                _round(g.cost_per_million_tokens_usd, "0.0001"),
                _round(g.idle_cost_usd, "0.01"),
            )
            for name, g in rows.items()
        }
        for fmt, seen in formats.items():
            assert seen == expected, fmt
    # Idle dollars: the allocated time not busy (chat's GPU is 50 % busy, embed's 25 %).
    teams = {g.name: g for g in report.teams}
    assert teams["search"].idle_cost_usd == teams["search"].cost_usd / 2
    assert teams["ads"].idle_cost_usd == teams["ads"].cost_usd * 3 / 4
    assert teams["search"].targets == ("box/chat",)


def test_team_budgets_show_in_every_format(db_url: str, db: Engine, tmp_path: Path) -> None:
    report = _report(db, tmp_path, db_url)
    search, ads = report.team_budgets
    assert (search.team, search.monthly_usd, ads.team) == ("search", Decimal(4), "ads")
    # A quarter of the fleet's month to date: chat holds one of the four GPUs.
    assert search.spent_usd == report.budget.spent_usd / 4
    assert search.used_ratio == float(search.spent_usd / 4) > 0.8
    assert search.forecast_usd > search.spent_usd  # the last day's pace until the month ends

    spent, used = f"${search.spent_usd:,.2f}", f"{search.used_ratio:.2%}"
    table = terminal_sections(render(report, "table"))["TEAM BUDGETS"]
    assert [spent, used] == grid_table(table)[1][2:4]
    csv_row = csv_sections(render(report, "csv"))["team_budgets"][0]
    assert (csv_row["team"], csv_row["spent_usd"]) == ("search", f"{search.spent_usd:.2f}")
    assert [spent, used] == markdown_tables(render(report, "markdown"))["Team budgets"][1][2:4]
    html = parse_html(render(report, "html")).tables["table-team_budgets"]
    assert [spent, used] == html[1][2:4]
    doc = json.loads(render(report, "json"))["team_budgets"]
    assert [b["team"] for b in doc] == ["search", "ads"]
    assert doc[0]["monthly_usd"] == "4.00"


def test_without_labels_the_report_has_no_team_sections(
    db_url: str, db: Engine, tmp_path: Path
) -> None:
    end = fill(db, START)
    path = tmp_path / "plain.toml"
    path.write_text(f'host = "box"\ndatabase_url = "{db_url}"\n')
    report = build_report(
        db, load_config(str(path), {}), range_period(START.isoformat(), end.isoformat(), "UTC"),
        now=end,
    )  # fmt: skip
    assert (report.teams, report.projects, report.team_budgets) == ((), (), ())
    assert "TEAMS" not in render(report, "table")
    assert json.loads(render(report, "json"))["teams"] == []


def test_a_model_filter_keeps_the_teams_of_that_models_targets(
    db_url: str, db: Engine, tmp_path: Path
) -> None:
    end = fill(db, START)
    config = team_config(tmp_path, db_url)
    period = range_period(START.isoformat(), end.isoformat(), "UTC")
    report = build_report(db, config, period, now=end, models=["llama"], hosts=["box"])
    (llama,) = report.models
    (search,) = report.teams  # no "(no target)": GPU time outside the filter is not shown
    assert (search.name, search.cost_usd, search.useful_tokens) == (
        "search", llama.cost_usd, llama.useful_tokens)  # fmt: skip
    assert [p.name for p in report.projects] == ["assistant"]
