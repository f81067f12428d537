"""Each week's digest, once: when it is due, who sends it, and the record that it was sent.

Schedule. The digest covers the last complete week, Monday 00:00 to Monday 00:00 in the
configured timezone (so a DST week has 167 or 169 hours), and is due at ``weekday`` ``at``
local time after that week ends (default Monday 09:00). ``due_week`` is pure: the week whose
send time is the latest one not after ``now``, while ``now`` is within ``grace`` of it
(``[send time, send time + grace)``); a digest missed while no daemon ran is sent when one
starts within the grace, and never weeks late. A send time that falls in a DST gap or overlap
is read with ``fold=0`` (the offset before the change), so it is always one instant.

The send record. Slack has no idempotency key, so "exactly once" rests on the ``digests``
table, shared by every daemon on the database and surviving restarts:

1. Claim: insert the week's row (state ``claimed``, claimed_by = host, claimed_at = now) in a
   transaction of its own. The primary key lets one insert win, whichever daemon or restart
   races for it; the losers see an IntegrityError and do nothing.
2. Build the report, and check the claim is still ours just before posting.
3. Post once (no SDK retries), then mark the row ``sent``, or ``failed`` with the redacted
   reason. Both updates name our claim (claimed_by and claimed_at), so a daemon that lost its
   claim cannot overwrite the new owner's record.

Failures, and the trade-off between "twice" and "lost". A posted message cannot be recalled,
but a digest that never arrives is a silent failure nobody notices, so gpuwatch retries
whatever may not have been delivered, and accepts a small window for a duplicate:

- ``failed`` (Slack answered an error, a timeout, no connection, or the report failed) is
  re-claimed after ``RETRY_FAILED`` (15 min) while the week is still due, i.e. within the
  grace; after that the row stays ``failed`` and the log has said why. Every failure is
  retried, even a 4xx: the usual cause (a revoked webhook, a renamed channel) is fixed in
  the config within the day, and one failed request per 15 min costs nothing. A timeout is
  ambiguous (Slack may have posted before the connection dropped); retrying it is the one
  place a duplicate can come from a live daemon.
- ``claimed`` older than ``STALE_CLAIM`` (10 min) belongs to a daemon that died (or hung)
  mid-send, and is re-claimed by a conditional UPDATE that only one daemon can win. The post
  is its last step before the ``sent`` update, so a dead claimant most likely died before
  posting; if it died between Slack's reply and the update, the digest goes out twice. A
  claimant slower than 10 min loses the claim and sees so at step 2, so it does not post too.
- ``sent`` is final. ``gpuwatch digest --send`` (``send_now``) posts the last complete week
  at once, whatever the schedule, and through the same record: a week already sent is not
  posted again, and a manual send counts as the week's send for the scheduled job. It retries
  a ``failed`` week at once, without waiting out ``RETRY_FAILED``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta
from enum import StrEnum
from typing import Any, Protocol
from zoneinfo import ZoneInfo

from sqlalchemy import Engine, and_, insert, or_, select, update
from sqlalchemy.engine import Connection, Row
from sqlalchemy.exc import IntegrityError

from agent.config.digest import DigestConfig
from agent.config.settings import Config, SlackConfig
from agent.reporting.digest import digest_payload
from agent.reporting.model import Period, Report
from agent.reporting.period import last_week_period, previous_period
from agent.reporting.team_digest import team_digest_payload
from alerts.notify import NotifyError, SendResult, shorten
from migrations.schema import digests

log = logging.getLogger(__name__)

CLAIMED, SENT, FAILED = "claimed", "sent", "failed"
STALE_CLAIM = timedelta(minutes=10)  # far beyond a report and one post (10 s timeout)
RETRY_FAILED = timedelta(minutes=15)
# How often the daemon should call ``DigestJob.run``: the delay after the send time, and
# the retry rhythm; the smallest grace the config accepts (10 min) spans two checks.
CHECK_INTERVAL = timedelta(minutes=5)
ERROR_LIMIT = 500  # characters of a failure's reason kept in the record

ReportBuilder = Callable[[Period, datetime], Report]
"""Builds the report of a period as of ``now`` (``agent.reporting.build.build_report``, bound to an
engine and config; tests pass hand-built reports)."""


class Status(StrEnum):
    SENT = "sent"  # posted now, by this call
    NOT_DUE = "not_due"  # no week's send time within the grace
    ALREADY_SENT = "already_sent"  # the week's record says sent
    BUSY = "busy"  # claimed by a live sender, or failed and waiting for its retry
    FAILED = "failed"  # this call's attempt failed; recorded with its reason


@dataclass(frozen=True, slots=True)
class Outcome:
    status: Status
    week: Period | None = None
    detail: str = ""


class DigestSender(Protocol):
    def post(self, payload: Mapping[str, Any], now: datetime) -> SendResult:
        """Post once; classify a failure in the result (redacted), never raise."""
        ...


# A team's digest and where it goes: (team, its channel's sender), from [[budget.teams]].
TeamSenders = Sequence[tuple[str, DigestSender]]


# -- the schedule (pure) ---------------------------------------------------------------------


def send_time(week: Period, weekday: int, at: time) -> datetime:
    """When ``week``'s digest is due: the first ``weekday`` on or after its end, ``at`` local."""
    tz = ZoneInfo(week.timezone)
    end = week.end.astimezone(tz).date()  # a Monday
    return datetime.combine(end + timedelta(days=weekday), at, tzinfo=tz).astimezone(UTC)


def due_week(
    now: datetime,
    zone: str,
    weekday: int = 0,
    at: time = time(9, 0),
    grace: timedelta = timedelta(hours=24),
) -> Period | None:
    """The week whose digest is due at ``now`` (aware), or None.

    Due: the latest send time not after ``now`` is at most ``grace`` ago (half-open: at
    exactly send time + grace it is no longer due).
    """
    week = last_week_period(now, zone)
    if send_time(week, weekday, at) > now:
        # Send times are seven days apart and this week's is still ahead: the week before's
        # is the latest one passed.
        week = previous_period(week)
    return week if now - send_time(week, weekday, at) < grace else None


def digest_enabled(digest: DigestConfig, slack: SlackConfig) -> bool:
    """[digest] enabled as set, else on exactly when Slack is configured."""
    if digest.enabled is not None:
        return digest.enabled
    return slack.webhook_url is not None or slack.token is not None


# -- the send record -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Claim:
    """Our hold on a week's row: the update that finishes it names all three."""

    week_start: datetime
    claimed_by: str
    claimed_at: datetime


def claim_week(
    engine: Engine, week_start: datetime, by: str, now: datetime, *, retry_failed_after: timedelta
) -> Claim | None:
    """The week's claim for ``by``, or None when another sender has it (see the module doc)."""
    mine = Claim(week_start, by, now)
    with engine.connect() as conn:
        row = _row(conn, week_start)
    if row is None:
        try:
            with engine.begin() as conn:
                conn.execute(
                    insert(digests).values(
                        week_start=week_start, state=CLAIMED, claimed_by=by, claimed_at=now
                    )
                )
            return mine
        except IntegrityError:
            return None  # another daemon's insert won between our read and our insert
    if row.state == SENT:
        return None
    # Conditional: of several daemons re-claiming the same row, one UPDATE matches (the others
    # find it already claimed afresh: PostgreSQL re-checks the row after the winner's commit,
    # SQLite runs one writer at a time).
    stale = and_(digests.c.state == CLAIMED, digests.c.claimed_at <= now - STALE_CLAIM)
    retry = and_(digests.c.state == FAILED, digests.c.claimed_at <= now - retry_failed_after)
    with engine.begin() as conn:
        result = conn.execute(
            update(digests)
            .where(digests.c.week_start == week_start, or_(stale, retry))
            .values(state=CLAIMED, claimed_by=by, claimed_at=now, sent_at=None, error=None)
        )
    return mine if result.rowcount == 1 else None


def still_claimed(engine: Engine, claim: Claim) -> bool:
    with engine.connect() as conn:
        return conn.execute(select(digests.c.week_start).where(*_ours(claim))).first() is not None


def finish(engine: Engine, claim: Claim, now: datetime, error: str | None) -> bool:
    """Mark the claimed week sent (``error`` None) or failed; False when the claim was lost."""
    values: dict[str, Any] = {"state": SENT, "sent_at": now, "error": None}
    if error is not None:
        values = {"state": FAILED, "error": shorten(error, ERROR_LIMIT)}
    with engine.begin() as conn:
        return conn.execute(update(digests).where(*_ours(claim)).values(**values)).rowcount == 1


def describe(engine: Engine, week_start: datetime) -> tuple[Status, str]:
    """Why a week could not be claimed, from its row."""
    with engine.connect() as conn:
        row = _row(conn, week_start)
    if row is None:  # the claimant's row vanished: only a hand-edited table does that
        return Status.BUSY, "no record"
    if row.state == SENT:
        return Status.ALREADY_SENT, f"sent at {_iso(row.sent_at)} by {row.claimed_by}"
    if row.state == FAILED:
        retry = row.claimed_at + RETRY_FAILED
        return (
            Status.BUSY,
            f"failed at {_iso(row.claimed_at)} ({row.error}); retried from {_iso(retry)}",
        )
    return Status.BUSY, f"being sent by {row.claimed_by} since {_iso(row.claimed_at)}"


def _row(conn: Connection, week_start: datetime) -> Row[Any] | None:
    return conn.execute(select(digests).where(digests.c.week_start == week_start)).first()


def _ours(claim: Claim) -> tuple[Any, ...]:
    return (
        digests.c.week_start == claim.week_start,
        digests.c.state == CLAIMED,
        digests.c.claimed_by == claim.claimed_by,
        digests.c.claimed_at == claim.claimed_at,
    )


def _iso(moment: datetime | None) -> str:
    return moment.astimezone(UTC).isoformat(timespec="seconds") if moment else "?"


# -- the job ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DigestJob:
    """The scheduled digest of one daemon; call ``run`` every ``CHECK_INTERVAL``. Any number
    of daemons (and restarts) may run it over the same database: the record decides who posts.
    """

    engine: Engine
    host: str
    timezone: str
    schedule: DigestConfig
    build: ReportBuilder
    sender: DigestSender
    teams: TeamSenders = ()

    @classmethod
    def from_config(
        cls,
        engine: Engine,
        config: Config,
        schedule: DigestConfig,
        *,
        build: ReportBuilder | None = None,
        sender: DigestSender | None = None,
    ) -> DigestJob | None:
        """The job for ``config`` (its ``[digest]`` section as ``schedule``), None when the
        digest is off. Raises NotifyError on unusable Slack settings."""
        if not digest_enabled(schedule, config.notify.slack):
            return None
        sender = sender or SlackDigestSender.from_config(config.notify.slack)
        if sender is None:
            raise NotifyError("digest: enabled, but [notify.slack] is not configured")
        build = build or report_builder(engine, config)
        teams = team_senders(config)
        return cls(engine, config.host, config.timezone, schedule, build, sender, teams)

    def run(self, now: datetime) -> Outcome:
        """Send the due week's digest unless it is sent or being sent; never raises for a
        failed post (it is recorded, and retried as the module doc says)."""
        s = self.schedule
        week = due_week(now, self.timezone, s.weekday, s.at, s.grace)
        if week is None:
            return Outcome(Status.NOT_DUE)
        return send_week(
            self.engine, self.host, week, self.build, self.sender, now, RETRY_FAILED, self.teams
        )


def send_now(
    engine: Engine,
    host: str,
    zone: str,
    build: ReportBuilder,
    sender: DigestSender,
    now: datetime,
    teams: TeamSenders = (),
) -> Outcome:
    """`gpuwatch digest --send`: the last complete week's digest now, through the record."""
    week = last_week_period(now, zone)
    return send_week(engine, host, week, build, sender, now, timedelta(0), teams)


def send_week(
    engine: Engine,
    host: str,
    week: Period,
    build: ReportBuilder,
    sender: DigestSender,
    now: datetime,
    retry_failed_after: timedelta,
    teams: TeamSenders = (),
) -> Outcome:
    claim = claim_week(engine, week.start, host, now, retry_failed_after=retry_failed_after)
    if claim is None:
        status, detail = describe(engine, week.start)
        return Outcome(status, week, detail)
    try:
        report = build(week, now)
        payload = digest_payload(report, build(report.previous_period, now))
    except Exception as exc:  # a database or report error: recorded, retried like a failed post
        log.exception("digest for %s: building the report failed", week.label)
        reason = f"report failed: {type(exc).__name__}: {exc}"
        finish(engine, claim, now, reason)
        return Outcome(Status.FAILED, week, shorten(reason, ERROR_LIMIT))
    if not still_claimed(engine, claim):
        log.warning("digest for %s: claim taken over while building; not posting", week.label)
        return Outcome(Status.BUSY, week, "claim taken over while the report was built")
    result = sender.post(payload, now)
    if not result.ok:
        log.warning("digest for %s: Slack post failed: %s", week.label, result.reason)
        finish(engine, claim, now, result.reason)
        return Outcome(Status.FAILED, week, result.reason)
    if not finish(engine, claim, now, None):
        # Only a claim older than STALE_CLAIM is taken over, and ours was checked before
        # posting: this needs a post slower than that, so say it plainly.
        log.warning(
            "digest for %s: posted, but re-claimed meanwhile; it may go out twice", week.label
        )
    log.info("digest for %s posted to Slack", week.label)
    return Outcome(Status.SENT, week, _post_teams(report, teams, now, week.label))


def _post_teams(report: Report, teams: TeamSenders, now: datetime, label: str) -> str:
    """Each team's digest to its channel, once, after the fleet's went out (the week's record
    covers the fleet's post: a failed team post is logged and said, not retried)."""
    failed = []
    for team, sender in teams:
        result = sender.post(team_digest_payload(report, team), now)
        if result.ok:
            log.info("digest for %s: team %s's posted to Slack", label, team)
        else:
            log.warning("digest for %s: team %s's post failed: %s", label, team, result.reason)
            failed.append(f"team {team}: {result.reason}")
    return "; ".join(failed)


def team_senders(config: Config, base_url: str | None = None) -> list[tuple[str, DigestSender]]:
    """A sender per ``[[budget.teams]]`` team with a ``slack_channel``, through the Slack token
    of ``[notify.slack]`` (the config refuses a team channel without one)."""
    token = config.notify.slack.token
    if token is None:
        return []
    return [
        (
            b.team,
            SlackDigestSender(token=token.reveal(), channel=b.slack_channel, base_url=base_url),
        )
        for b in config.budget.teams
        if b.slack_channel is not None
    ]


def report_builder(engine: Engine, config: Config) -> ReportBuilder:
    """The production builder: every host and model of the database."""
    from agent.reporting.build import (
        build_report,  # reports pull in the cost engine; only when used
    )

    def build(period: Period, now: datetime) -> Report:
        return build_report(engine, config, period, now=now)

    return build


# -- Slack -------------------------------------------------------------------------------------


class SlackDigestSender:
    """Posts a digest through ``[notify.slack]``: the alerts' Slack client (an incoming
    webhook or chat.postMessage), so both share its secret handling and failure classes.

    Once per call: the SDK's retry handlers are off, because retries are the record's to
    decide (a retry inside the SDK would bypass it). Neither secret appears in results or logs.
    """

    __slots__ = ("_slack",)

    def __init__(
        self,
        *,
        webhook_url: str | None = None,
        token: str | None = None,
        channel: str | None = None,
        base_url: str | None = None,
        timeout_seconds: int = 10,
    ) -> None:
        from alerts.slack import SlackNotifier  # slack_sdk only where Slack is configured

        self._slack = SlackNotifier(
            "digest", webhook_url=webhook_url, token=token, channel=channel,
            base_url=base_url, timeout_seconds=timeout_seconds,
        )  # fmt: skip

    @classmethod
    def from_config(cls, slack: SlackConfig) -> SlackDigestSender | None:
        """The sender for ``[notify.slack]``; None when it is not configured."""
        if slack.webhook_url is not None:
            return cls(webhook_url=slack.webhook_url.reveal())
        if slack.token is not None:
            return cls(token=slack.token.reveal(), channel=slack.channel)
        return None

    def __repr__(self) -> str:
        return f"SlackDigestSender({self._slack!r})"

    def post(self, payload: Mapping[str, Any], now: datetime) -> SendResult:
        return self._slack.post(payload["text"], payload["blocks"], now)
