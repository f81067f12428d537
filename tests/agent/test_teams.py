"""Teams and projects: the labels in the configuration, and `gpuwatch cost`
rolled up by them, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from sqlalchemy import Engine

from agent.cli.main import main
from agent.config.settings import ConfigError, load_config
from tests.agent.team_helpers import fill, team_config

# Inside `gpuwatch cost`'s default 30-day window, which ends at the real clock's now.
START = (datetime.now(UTC) - timedelta(hours=3)).replace(minute=0, second=0, microsecond=0)


def _load(tmp_path: Path, text: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    load_config(str(path), {})


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('[[targets]]\nname = "a"\nurl = "http://x/m"\nteam = ""\n', "targets[0].team: expected a"),
        ('[[targets]]\nname = "a"\nurl = "http://x/m"\nproject = 3\n', "targets[0].project"),
        ('[[labels]]\ntarget = "a"\n', "labels[0]: no label"),
        ('[[labels]]\nteam = "x"\n', "labels[0]: missing target or host"),
        ('[[labels]]\ntarget = "a"\nteam = "x"\n[[labels]]\ntarget = "a"\nproject = "y"\n',
         "labels[1]: target 'a' is labelled twice"),
        ('[[labels]]\ntarget = "a"\nteam = "(unlabelled)"\n', "labels[0].team"),
        ('[[labels]]\nhost = "h"\nteam = "x"\n[[labels]]\nhost = "h"\nteam = "y"\n',
         "labels[1]: every target on h is labelled twice"),
        ('host = "h"\n[[targets]]\nname = "a"\nurl = "http://x/m"\nteam = "x"\n'
         '[[labels]]\ntarget = "a"\nhost = "h"\nteam = "y"\n',
         "labels[0]: target 'a' on h is labelled twice"),
        ('[[labels]]\ntarget = "a"\nteam = "x"\ncolour = "red"\n', "labels[0].colour: unknown"),
        ('[[labels]]\ntarget = "a"\nteam = "x"\n[[budget.teams]]\nteam = "y"\nmonthly_usd = 1\n',
         "budget.teams[0].team: no target is labelled team 'y' (teams: x)"),
        ('[[labels]]\ntarget = "a"\nteam = "x"\n[[budget.teams]]\nteam = "x"\nmonthly_usd = -1\n',
         "budget.teams[0].monthly_usd: must be"),
        ('[[labels]]\ntarget = "a"\nteam = "x"\n[[budget.teams]]\nteam = "x"\n'
         '[[budget.teams]]\nteam = "x"\n', "budget.teams[1].team: team 'x' has two budgets"),
        ('[[labels]]\ntarget = "a"\nteam = "x"\n[[budget.teams]]\nteam = "x"\n'
         'slack_channel = "#x"\n', "budget.teams[0].slack_channel: needs [notify.slack] token"),
    ],
)  # fmt: skip
def test_wrong_labels_and_team_budgets_are_named_with_their_key(
    tmp_path: Path, text: str, problem: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        _load(tmp_path, text)
    assert problem in str(caught.value)


def test_labels_resolve_by_target_name_a_host_entry_first(tmp_path: Path) -> None:
    extra = (
        '[[labels]]\ntarget = "chat"\nhost = "box-2"\nteam = "ads"\n'
        '[[labels]]\nhost = "box-3"\nteam = "research"\nproject = "lab"\n'
    )
    config = team_config(tmp_path, "sqlite://", extra)
    labels = config.labels
    assert (labels.team("box", "chat"), labels.project("box", "chat")) == ("search", "assistant")
    assert labels.team("box-9", "chat") == "(unlabelled)"  # its own label is this host's
    assert labels.team("box-2", "chat") == "ads"  # a [[labels]] entry for that host
    assert labels.team("box-2", "embed") == "(unlabelled)"  # that entry names host "box"
    assert labels.team("box", "batch") == "(unlabelled)"
    # A host's label covers its targets that have none of their own.
    assert (labels.team("box-3", "batch"), labels.project("box-3", "batch")) == ("research", "lab")
    assert labels.team("box-3", "chat") == "research"
    assert config.targets[0].team == "search"


def test_cost_rolls_up_per_team_and_project_in_text_and_json(
    db_url: str, db: Engine, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    end = fill(db, START)
    team_config(tmp_path, db_url)
    argv = ["cost", "--window", "30d", "--config", str(tmp_path / "gpuwatch.toml")]
    capsys.readouterr()
    assert main([*argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    models = {m["name"]: m for m in out["models"]}
    teams = {t["name"]: t for t in out["teams"]}
    projects = {p["name"]: p for p in out["projects"]}
    seconds = (end - START).total_seconds() - 20  # the first tick is a baseline for time too

    # Each team is its targets' models: search runs chat (llama), ads embed (bge); batch
    # (mistral) has no label and shows as such; the GPU no target held is nobody's.
    assert list(teams) == ["ads", "search", "(unlabelled)", "(no target)"]
    for team, model in (("search", "llama"), ("ads", "bge"), ("(unlabelled)", "mistral")):
        assert teams[team]["cost_usd"] == models[model]["cost_usd"]
        assert teams[team]["useful_tokens"] == models[model]["useful_tokens"]
        assert (
            teams[team]["cost_per_million_tokens_usd"]
            == models[model]["cost_per_million_tokens_usd"]
        )
    assert Decimal(teams["search"]["cost_usd"]) == Decimal(seconds) / 1000
    # Idle dollars: the allocated time not busy (chat's GPU 50 % busy, embed's 25 %).
    assert Decimal(teams["search"]["idle_cost_usd"]) == Decimal(seconds) / 2000
    assert Decimal(teams["ads"]["idle_cost_usd"]) == Decimal(seconds) * 3 / 4000
    assert Decimal(teams["(unlabelled)"]["idle_cost_usd"]) == 0
    assert teams["(no target)"]["cost_usd"] == teams["(no target)"]["idle_cost_usd"]
    assert sum(Decimal(t["cost_usd"]) for t in teams.values()) == Decimal(out["fleet"]["cost_usd"])
    assert teams["search"]["targets"] == ["box/chat"]

    assert list(projects) == ["assistant", "(unlabelled)", "(no target)"]
    assistant = Decimal(models["llama"]["cost_usd"]) + Decimal(models["bge"]["cost_usd"])
    assert Decimal(projects["assistant"]["cost_usd"]) == assistant
    assert projects["assistant"]["targets"] == ["box/chat", "box/embed"]

    assert main(argv) == 0
    text = capsys.readouterr().out
    search = next(line for line in text.splitlines() if line.startswith("search "))
    search_json = teams["search"]
    per_m = Decimal(search_json["cost_per_million_tokens_usd"])
    assert search.split()[1:4] == [
        f"{Decimal(search_json['cost_usd']):,.2f}",
        f"{search_json['useful_tokens']:,.0f}",
        f"${per_m:,.4f}",
    ]
    assert "(unlabelled)" in text and "by project" in text


def test_without_labels_cost_has_no_team_lines(
    db_url: str, db: Engine, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fill(db, START, ticks=10)
    path = tmp_path / "plain.toml"
    path.write_text(f'host = "box"\ndatabase_url = "{db_url}"\n')
    capsys.readouterr()
    assert main(["cost", "--json", "--config", str(path)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["teams"], out["projects"]) == ([], [])
    assert main(["cost", "--config", str(path)]) == 0
    assert "by team" not in capsys.readouterr().out
