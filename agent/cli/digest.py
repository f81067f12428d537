"""`gpuwatch digest [--dry-run | --send]`: the weekly Slack digest of the last complete week.

``--dry-run`` (the default) prints the Block Kit payload as JSON and posts nothing.
``--send`` posts it now, whatever the schedule and whether or not [digest] is enabled, through
the same send record as the daemon's job: a week already sent is not posted again (exit 0,
saying when and by whom), and the scheduled job will not repeat a manual send.
"""

from __future__ import annotations

import argparse
from datetime import datetime
from typing import TYPE_CHECKING

from agent.reporting import json_text
from foundation.errors import GpuwatchError

if TYPE_CHECKING:
    from agent.config.settings import Config
    from agent.reporting.digest_job import DigestSender, ReportBuilder


class DigestError(GpuwatchError):
    """The digest cannot be sent as asked; the message says what to configure."""


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    digest = sub.add_parser("digest", help="the weekly Slack digest of the last complete week")
    mode = digest.add_mutually_exclusive_group()
    mode.add_argument(
        "--dry-run",
        action="store_true",
        help="print the Slack payload as JSON, post nothing (the default)",
    )
    mode.add_argument(
        "--send",
        action="store_true",
        help="post it now and record it, unless this week's digest was already sent",
    )
    digest.add_argument("--config", metavar="PATH", help="TOML file (default as for `run`)")


def run(
    args: argparse.Namespace,
    config: Config,
    now: datetime,
    *,
    build: ReportBuilder | None = None,
    sender: DigestSender | None = None,
) -> int:
    """``build`` and ``sender`` default to the real report and ``[notify.slack]`` (tests
    pass their own)."""
    # Here, not at the top: slack_sdk is for this command only, and every other command
    # (a report, an alerts listing, `gpuwatch --help`) would load it first; SQLAlchemy too.
    from agent.reporting.digest import digest_payload
    from agent.reporting.digest_job import (
        SlackDigestSender,
        Status,
        report_builder,
        send_now,
        team_senders,
    )
    from agent.reporting.period import last_week_period
    from agent.storage.db import open_database

    if args.send:
        # Checked before the database is touched: nothing to do without somewhere to post.
        sender = sender or SlackDigestSender.from_config(config.notify.slack)
        if sender is None:
            raise DigestError(
                "digest --send: no Slack configured (set [notify.slack] webhook_url_env, "
                "or token_env and channel)"
            )
    engine = open_database(config.database_url)
    try:
        build = build or report_builder(engine, config)
        if not args.send:
            week = last_week_period(now, config.timezone)
            report = build(week, now)
            payload = digest_payload(report, build(report.previous_period, now))
            print(json_text.dumps(payload, indent=2, ensure_ascii=False))
            return 0
        assert sender is not None
        teams = team_senders(config)
        outcome = send_now(engine, config.host, config.timezone, build, sender, now, teams)
    finally:
        engine.dispose()
    label = outcome.week.label if outcome.week else "?"
    if outcome.status is Status.SENT:
        print(f"digest for {label} posted to Slack")
        if outcome.detail:  # a team's digest that failed (the fleet's went out)
            print(f"not posted: {outcome.detail}")
        return 1 if outcome.detail else 0
    detail = f" ({outcome.detail})" if outcome.detail else ""
    print(f"digest for {label} not posted: {outcome.status.value.replace('_', ' ')}{detail}")
    return 0 if outcome.status is Status.ALREADY_SENT else 1
