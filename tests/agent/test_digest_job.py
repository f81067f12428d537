"""Each week's digest posted once through the real slack_sdk to a loopback Slack, on SQLite
and PostgreSQL, whatever the restarts, failures and concurrent daemons; and `gpuwatch
digest`."""

from __future__ import annotations

import argparse
import json
import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, insert, select

from agent.cli.digest import DigestError, add_parser
from agent.cli.digest import run as run_cli
from agent.config.digest import DigestConfig
from agent.config.secret import Secret
from agent.config.settings import Config, NotifyConfig, SlackConfig
from agent.reporting import digest_job
from agent.reporting.digest import block_kit_problems, digest_payload
from agent.reporting.digest_job import (
    RETRY_FAILED,
    DigestJob,
    Outcome,
    SlackDigestSender,
    Status,
    claim_week,
    send_now,
)
from agent.reporting.model import Period, Report
from agent.storage.db import open_database, upgrade_database
from migrations.schema import digests
from tests.agent.digest_helpers import DUE, HOOK, SECRET, WEEK, ZONE, make_report, utc, week_period
from tests.alerts.notifiers.conftest import Loopback, Reply, loopback  # noqa: F401

# -- the job: once per week, through slack_sdk, on SQLite and PostgreSQL ---------------------


@dataclass
class Reports:
    """The injected builder: hand-built reports, and the periods asked for."""

    fail: bool = False
    asked: list[Period] = field(default_factory=list)

    def __call__(self, period: Period, now: datetime) -> Report:
        self.asked.append(period)
        if self.fail:
            raise RuntimeError("rollups unavailable")
        return make_report(period)


@dataclass
class Fleet:
    url: str
    engine: Engine
    slack: Loopback
    reports: Reports

    def job(self, host: str = "box-1", schedule: DigestConfig | None = None) -> DigestJob:
        """A daemon's job, as built after a (re)start: nothing kept but the database."""
        sender = SlackDigestSender(webhook_url=self.slack.url + HOOK)
        return DigestJob(self.engine, host, ZONE, schedule or DigestConfig(), self.reports, sender)

    def posts(self) -> list[dict[str, Any]]:
        return [r.json() for r in self.slack.requests if r.path == HOOK]

    def rows(self) -> list[Any]:
        with self.engine.connect() as conn:
            return list(conn.execute(select(digests).order_by(digests.c.week_start)))


@pytest.fixture
def fleet(db_url: str, loopback: Loopback) -> Iterator[Fleet]:  # noqa: F811
    loopback.reply(HOOK, Reply(200, "ok"))
    upgrade_database(db_url)
    engine = open_database(db_url)
    try:
        yield Fleet(db_url, engine, loopback, Reports())
    finally:
        engine.dispose()


def test_each_week_is_posted_once_at_its_send_time(fleet: Fleet) -> None:
    # From after the week before's grace (Tuesday 24 November, 09:00 local).
    job, now, step = fleet.job(), utc(2026, 11, 24, 8, 0), timedelta(minutes=5)
    sent: list[datetime] = []
    while now < utc(2026, 12, 15, 0, 0):  # three send times: 30 Nov, 7 Dec, 14 Dec
        if job.run(now).status is Status.SENT:
            sent.append(now)
        now += step
    assert sent == [utc(2026, 11, 30, 8), utc(2026, 12, 7, 8), utc(2026, 12, 14, 8)]
    headers = [p["blocks"][0]["text"]["text"] for p in fleet.posts()]
    assert headers == [
        "GPU weekly digest: 23–29 Nov 2026",
        "GPU weekly digest: 30 Nov – 6 Dec 2026",
        "GPU weekly digest: 7–13 Dec 2026",
    ]
    assert all(block_kit_problems(p) == [] for p in fleet.posts())
    rows = fleet.rows()
    assert [(r.state, r.claimed_by, r.sent_at, r.error) for r in rows] == [
        ("sent", "box-1", moment, None) for moment in sent
    ]
    # The week's report and the week before's, for the change in spend.
    assert fleet.reports.asked[:2] == [WEEK, week_period(date(2026, 11, 16), ZONE)]


def test_a_restart_does_not_post_again(fleet: Fleet) -> None:
    assert fleet.job().run(DUE).status is Status.SENT
    restarted = open_database(fleet.url)  # a new process: new engine, new job
    try:
        again = DigestJob(restarted, "box-1", ZONE, DigestConfig(), fleet.reports,
                          SlackDigestSender(webhook_url=fleet.slack.url + HOOK))  # fmt: skip
        outcome = again.run(DUE + timedelta(minutes=5))
    finally:
        restarted.dispose()
    assert outcome.status is Status.ALREADY_SENT
    assert outcome.detail == "sent at 2026-11-30T08:00:00+00:00 by box-1"
    assert len(fleet.posts()) == 1


def race(jobs: list[DigestJob], now: datetime, outcomes: list[Outcome]) -> None:
    """Run every job at ``now`` at the same moment, one thread each (one "daemon" each)."""
    barrier = threading.Barrier(len(jobs))

    def daemon(job: DigestJob) -> None:
        barrier.wait()
        outcomes.append(job.run(now))

    threads = [threading.Thread(target=daemon, args=(job,)) for job in jobs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(outcomes) == len(jobs)


def test_two_daemons_racing_for_the_same_weeks_post_each_once(fleet: Fleet) -> None:
    engines = [open_database(fleet.url) for _ in range(2)]
    try:
        jobs = [replace(fleet.job(f"box-{n}"), engine=e) for n, e in enumerate(engines, 1)]
        for week in range(5):
            now = DUE + timedelta(weeks=week)
            outcomes: list[Outcome] = []
            race(jobs, now, outcomes)

            statuses = [o.status for o in outcomes]
            assert statuses.count(Status.SENT) == 1
            assert set(statuses) - {Status.SENT} <= {Status.ALREADY_SENT, Status.BUSY}
    finally:
        for engine in engines:
            engine.dispose()
    assert len(fleet.posts()) == 5
    assert [r.state for r in fleet.rows()] == ["sent"] * 5


def test_two_daemons_taking_over_the_same_stale_claim_post_once(fleet: Fleet) -> None:
    with fleet.engine.begin() as conn:
        conn.execute(
            insert(digests).values(
                week_start=WEEK.start, state="claimed", claimed_by="box-9", claimed_at=DUE
            )
        )
    engines = [open_database(fleet.url) for _ in range(3)]
    try:
        outcomes: list[Outcome] = []
        jobs = [replace(fleet.job(f"box-{n}"), engine=e) for n, e in enumerate(engines, 1)]
        race(jobs, DUE + timedelta(minutes=10), outcomes)
    finally:
        for engine in engines:
            engine.dispose()
    assert [o.status for o in outcomes].count(Status.SENT) == 1
    assert len(fleet.posts()) == 1


def test_a_claim_that_loses_the_insert_race_does_nothing(
    fleet: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Another daemon inserts between this one's read (which found no row) and its insert.
    assert claim_week(fleet.engine, WEEK.start, "box-2", DUE, retry_failed_after=RETRY_FAILED)
    monkeypatch.setattr(digest_job, "_row", lambda conn, week_start: None)
    lost = claim_week(fleet.engine, WEEK.start, "box-1", DUE, retry_failed_after=RETRY_FAILED)
    assert lost is None
    assert [(r.state, r.claimed_by) for r in fleet.rows()] == [("claimed", "box-2")]


def test_a_digest_missed_while_down_is_sent_at_start_within_the_grace(fleet: Fleet) -> None:
    late = DUE + timedelta(hours=23, minutes=59)
    assert fleet.job().run(late).status is Status.SENT
    too_late = DUE + timedelta(weeks=1, hours=24)  # the next week's, a day and a second late
    assert fleet.job().run(too_late).status is Status.NOT_DUE
    assert fleet.job().run(too_late - timedelta(seconds=1)).status is Status.SENT
    assert len(fleet.posts()) == 2


def test_a_stale_claim_of_a_daemon_that_died_mid_send_is_taken_over(fleet: Fleet) -> None:
    with fleet.engine.begin() as conn:
        conn.execute(
            insert(digests).values(
                week_start=WEEK.start, state="claimed", claimed_by="box-9", claimed_at=DUE
            )
        )
    busy = fleet.job().run(DUE + timedelta(minutes=9))
    assert (busy.status, busy.detail) == (
        Status.BUSY,
        "being sent by box-9 since 2026-11-30T08:00:00+00:00",
    )
    assert fleet.posts() == []
    assert fleet.job().run(DUE + timedelta(minutes=10)).status is Status.SENT
    assert [(r.state, r.claimed_by) for r in fleet.rows()] == [("sent", "box-1")]


def test_a_slack_500_is_recorded_failed_and_retried_within_the_grace(fleet: Fleet) -> None:
    fleet.slack.reply(HOOK, Reply(500, "internal_error"), Reply(200, "ok"))
    failed = fleet.job().run(DUE)
    assert (failed.status, failed.detail) == (Status.FAILED, "HTTP 500: internal_error")
    [row] = fleet.rows()
    assert (row.state, row.error, row.sent_at) == ("failed", "HTTP 500: internal_error", None)
    # Another daemon, or this one at its next check, waits out the retry interval.
    waiting = fleet.job("box-2").run(DUE + timedelta(minutes=14))
    assert waiting.status is Status.BUSY and waiting.detail.startswith("failed at 2026-11-30T08")
    assert fleet.job("box-2").run(DUE + timedelta(minutes=15)).status is Status.SENT
    assert len(fleet.slack.requests) == 2
    [row] = fleet.rows()
    assert (row.state, row.claimed_by, row.error) == ("sent", "box-2", None)


def test_failures_are_retried_only_while_the_week_is_due(fleet: Fleet) -> None:
    fleet.slack.reply(HOOK, Reply(500, "internal_error"))
    job = fleet.job(schedule=DigestConfig(grace=timedelta(hours=1)))
    now = DUE
    while now < DUE + timedelta(hours=3):
        job.run(now)
        now += timedelta(minutes=5)
    # At 0, 15, 30 and 45 minutes; then the grace is over and the record stays failed.
    assert len(fleet.slack.requests) == 4
    assert [r.state for r in fleet.rows()] == ["failed"]


def test_a_failed_report_is_recorded_and_retried(fleet: Fleet) -> None:
    fleet.reports.fail = True
    outcome = fleet.job().run(DUE)
    assert outcome.status is Status.FAILED
    assert outcome.detail == "report failed: RuntimeError: rollups unavailable"
    assert fleet.posts() == []
    fleet.reports.fail = False
    assert fleet.job().run(DUE + timedelta(minutes=15)).status is Status.SENT


def test_the_webhook_url_never_reaches_logs_or_the_record(
    fleet: Fleet, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    # A server that quotes the URL back, then a connection refused on a secret URL.
    fleet.slack.reply(HOOK, Reply(400, f"no such hook {fleet.slack.url}{HOOK}"))
    assert fleet.job().run(DUE).status is Status.FAILED
    closed = DigestJob(fleet.engine, "box-1", ZONE, DigestConfig(), fleet.reports,
                       SlackDigestSender(webhook_url=f"http://127.0.0.1:1{HOOK}"))  # fmt: skip
    refused = closed.run(DUE + timedelta(minutes=15))
    assert refused.status is Status.FAILED and refused.detail.startswith("connection error")
    [row] = fleet.rows()
    assert SECRET not in (row.error or "") and SECRET not in refused.detail
    assert SECRET not in caplog.text
    assert "redacted" in caplog.text  # the records were there, scrubbed


def test_send_now_posts_the_last_week_before_its_time_and_the_job_does_not_repeat_it(
    fleet: Fleet,
) -> None:
    sender = SlackDigestSender(webhook_url=fleet.slack.url + HOOK)
    early = DUE - timedelta(hours=1)  # Monday 08:00 local
    first = send_now(fleet.engine, "laptop", ZONE, fleet.reports, sender, early)
    assert (first.status, first.week) == (Status.SENT, WEEK)
    assert fleet.job().run(DUE).status is Status.ALREADY_SENT
    again = send_now(fleet.engine, "laptop", ZONE, fleet.reports, sender, DUE)
    assert again.status is Status.ALREADY_SENT
    assert len(fleet.posts()) == 1


def test_send_now_retries_a_failed_week_at_once(fleet: Fleet) -> None:
    fleet.slack.reply(HOOK, Reply(503, "down"), Reply(200, "ok"))
    assert fleet.job().run(DUE).status is Status.FAILED
    sender = SlackDigestSender(webhook_url=fleet.slack.url + HOOK)
    outcome = send_now(fleet.engine, "laptop", ZONE, fleet.reports, sender, DUE)
    assert outcome.status is Status.SENT
    assert len(fleet.posts()) == 2


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_chat_post_message_with_a_token(fleet: Fleet) -> None:
    fleet.slack.reply("/api/chat.postMessage", Reply(200, {"ok": True}))
    sender = SlackDigestSender(
        token="xoxb-digest-token", channel="#finops", base_url=fleet.slack.url + "/api/"
    )
    job = replace(fleet.job(), sender=sender)
    assert job.run(DUE).status is Status.SENT
    [request] = fleet.slack.requests
    assert request.headers["authorization"] == "Bearer xoxb-digest-token"
    body = request.json()
    assert body["channel"] == "#finops"
    assert body["blocks"][0]["text"]["text"] == "GPU weekly digest: 23–29 Nov 2026"


# -- gpuwatch digest -------------------------------------------------------------------------


def cli(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="gpuwatch")
    add_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(argv)


def test_digest_options() -> None:
    assert (cli(["digest"]).dry_run, cli(["digest"]).send) == (False, False)
    assert cli(["digest", "--send", "--config", "x.toml"]).config == "x.toml"
    with pytest.raises(SystemExit):
        cli(["digest", "--dry-run", "--send"])


def cli_config(url: str, hook: str | None) -> Config:
    slack = SlackConfig(webhook_url=Secret(hook, "test") if hook else None)
    return Config(host="box-1", database_url=url, timezone=ZONE, notify=NotifyConfig(slack=slack))


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_dry_run_prints_the_payload_and_posts_nothing(
    fleet: Fleet, capsys: pytest.CaptureFixture[str]
) -> None:
    config = cli_config(fleet.url, fleet.slack.url + HOOK)
    assert run_cli(cli(["digest", "--dry-run"]), config, DUE, build=fleet.reports) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload == digest_payload(make_report(), make_report(fleet.reports.asked[1]))
    assert fleet.slack.requests == [] and fleet.rows() == []


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_send_posts_once_and_says_so(fleet: Fleet, capsys: pytest.CaptureFixture[str]) -> None:
    config = cli_config(fleet.url, fleet.slack.url + HOOK)
    assert run_cli(cli(["digest", "--send"]), config, DUE, build=fleet.reports) == 0
    assert capsys.readouterr().out == "digest for 2026-W48 posted to Slack\n"
    assert run_cli(cli(["digest", "--send"]), config, DUE, build=fleet.reports) == 0
    assert capsys.readouterr().out == (
        "digest for 2026-W48 not posted: already sent "
        "(sent at 2026-11-30T08:00:00+00:00 by box-1)\n"
    )
    assert len(fleet.posts()) == 1


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_send_fails_with_exit_1_and_without_slack_says_what_to_configure(
    fleet: Fleet, tmp_path: Path
) -> None:
    fleet.slack.reply(HOOK, Reply(500, "x"))
    config = cli_config(fleet.url, fleet.slack.url + HOOK)
    assert run_cli(cli(["digest", "--send"]), config, DUE, build=fleet.reports) == 1
    with pytest.raises(DigestError, match=r"no Slack configured"):
        run_cli(cli(["digest", "--send"]), cli_config(fleet.url, None), DUE, build=fleet.reports)
