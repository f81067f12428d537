"""Teams in the weekly digest: the fleet's digest lists each team's cost,
cost per million tokens, idle dollars and budget from the real report (SQLite and
PostgreSQL), and a team with a ``slack_channel`` gets its own digest there through the real
slack_sdk, posted to a loopback Slack."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

from sqlalchemy import Engine

from agent.config.digest import DigestConfig
from agent.config.settings import load_config
from agent.reporting.build import build_report
from agent.reporting.digest import block_kit_problems, digest_payload
from agent.reporting.digest_job import DigestJob, SlackDigestSender, Status, team_senders
from agent.reporting.model import GroupRow, Period, Report, TeamBudgetRow
from agent.reporting.period import range_period
from agent.storage.db import open_database, upgrade_database
from tests.agent.digest_helpers import DUE, ZONE, make_report
from tests.agent.team_helpers import fill, team_config
from tests.alerts.notifiers.conftest import Loopback, Reply, loopback  # noqa: F401

START = datetime(2026, 11, 10, 12, 0, tzinfo=UTC)
POST = "/api/chat.postMessage"


def test_the_digest_lists_each_team_with_its_budget(
    db_url: str, db: Engine, tmp_path: Path
) -> None:
    end = fill(db, START)
    budgets = '[[budget.teams]]\nteam = "search"\nmonthly_usd = 4\n'
    config = team_config(tmp_path, db_url, budgets)
    period = range_period(START.isoformat(), end.isoformat(), "UTC")
    report = build_report(db, config, period, now=end + timedelta(minutes=5))
    payload = digest_payload(report, None)
    assert block_kit_problems(payload) == []

    (section,) = [b for b in payload["blocks"] if "By team" in b.get("text", {}).get("text", "")]
    lines = section["text"]["text"].splitlines()[1:]
    teams = {g.name: g for g in report.teams}
    (budget,) = report.team_budgets
    search = teams["search"]
    assert search.cost_per_million_tokens_usd is not None
    assert lines[1] == (
        f"*search*: ${search.cost_usd:,.2f} · ${search.cost_per_million_tokens_usd:,.2f} per 1M"
        f" · ${search.idle_cost_usd:,.2f} idle · 2026-11: ${budget.spent_usd:,.2f} of $4.00"
        f" ({budget.used_ratio:.1%}), forecast ${budget.forecast_usd:,.2f}"
    )
    assert lines[0].startswith("*ads*: $3.58 · $500.00 per 1M")  # no budget: none shown
    assert lines[2].startswith("*(unlabelled)*: $3.58")
    assert lines[3].startswith("*(no target)*: $3.58 · n/a per 1M · $3.58 idle")


def _teams_report(period: Period) -> Report:
    search = GroupRow("search", Decimal("812.40"), 2.1e9, Decimal("0.3869"), Decimal("96.10"),
                      168.0, 0.8, ("box-1/chat",))  # fmt: skip
    ads = GroupRow("ads", Decimal("300"), 4e8, Decimal("0.75"), Decimal("150"), 168.0, 0.5,
                   ("box-2/embed",))  # fmt: skip
    budget = TeamBudgetRow("search", Decimal(2000), "2026-11", Decimal("1750"), 0.875,
                           Decimal("2100"), 1.05)  # fmt: skip
    return replace(make_report(period), teams=(ads, search), team_budgets=(budget,))


def test_a_team_with_a_channel_gets_its_own_digest_there(
    tmp_path: Path,
    loopback: Loopback,  # noqa: F811
) -> None:
    loopback.reply(POST, Reply(200, {"ok": True}))
    url = f"sqlite:///{tmp_path / 'gpuwatch.db'}"
    path = tmp_path / "gpuwatch.toml"
    path.write_text(
        f'host = "box-1"\ndatabase_url = "{url}"\ntimezone = "{ZONE}"\n'
        '[notify.slack]\ntoken_env = "SLACK_TOKEN"\nchannel = "#finops"\n'
        '[[labels]]\ntarget = "chat"\nteam = "search"\n'
        '[[labels]]\ntarget = "embed"\nteam = "ads"\n'
        '[[budget.teams]]\nteam = "search"\nmonthly_usd = 2000\nslack_channel = "#search-gpu"\n'
        '[[budget.teams]]\nteam = "ads"\nmonthly_usd = 500\n'
    )
    config = load_config(str(path), {"SLACK_TOKEN": "xoxb-team-token"})
    upgrade_database(url)
    engine = open_database(url)
    api = loopback.url + "/api/"
    fleet = SlackDigestSender(token="xoxb-team-token", channel="#finops", base_url=api)
    teams = team_senders(config, base_url=api)
    assert [team for team, _ in teams] == ["search"]  # ads has no channel of its own
    job = DigestJob(engine, "box-1", ZONE, DigestConfig(), lambda p, _: _teams_report(p),
                    fleet, teams)  # fmt: skip
    try:
        outcome = job.run(DUE)
        assert (outcome.status, outcome.detail) == (Status.SENT, "")
        assert job.run(DUE).status is Status.ALREADY_SENT  # neither posted twice
    finally:
        engine.dispose()

    bodies = [r.json() for r in loopback.requests]
    assert [b["channel"] for b in bodies] == ["#finops", "#search-gpu"]
    team = bodies[1]
    assert block_kit_problems(team) == []
    text = json.dumps(team["blocks"], ensure_ascii=False)
    assert team["blocks"][0]["text"]["text"] == "GPU weekly digest, team search: 23–29 Nov 2026"
    assert "$812.40 · $0.39 per 1M · $96.10 idle · 2026-11: $1,750.00 of $2,000.00 (87.5%)" in text
    assert "ads" not in text and "$300.00" not in text  # only its own team's figures
    assert "By team" in json.dumps(bodies[0])  # the fleet's digest lists every team


def test_a_failed_team_post_is_said_and_the_fleet_digest_stands(
    tmp_path: Path,
    loopback: Loopback,  # noqa: F811
) -> None:
    loopback.reply(POST, Reply(200, {"ok": True}))
    loopback.reply("/team/" + POST[1:], Reply(200, {"ok": False, "error": "channel_not_found"}))
    url = f"sqlite:///{tmp_path / 'gpuwatch.db'}"
    upgrade_database(url)
    engine = open_database(url)
    fleet = SlackDigestSender(token="xoxb-t", channel="#finops", base_url=loopback.url + "/api/")
    team = SlackDigestSender(token="xoxb-t", channel="#gone", base_url=loopback.url + "/team/api/")
    job = DigestJob(engine, "box-1", ZONE, DigestConfig(), lambda p, _: _teams_report(p),
                    fleet, (("search", team),))  # fmt: skip
    try:
        outcome = job.run(DUE)
    finally:
        engine.dispose()
    assert outcome.status is Status.SENT
    assert outcome.detail.startswith("team search: ") and "channel_not_found" in outcome.detail
