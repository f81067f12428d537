"""When the weekly digest is due: the last complete local week, its send time across DST in
Madrid, the grace, and the [digest] config section that sets them."""

from __future__ import annotations

from datetime import date, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from agent.config.digest import DigestConfig, parse_digest
from agent.config.reader import Reader
from agent.config.secret import Secret
from agent.config.settings import SlackConfig
from agent.reporting.digest_job import digest_enabled, due_week
from tests.agent.digest_helpers import WEEK, ZONE, utc, week_period

# -- the schedule --------------------------------------------------------------------------


# Madrid: CET (UTC+1) until Sunday 29 March 2026 02:00, CEST (UTC+2) until 25 October 03:00.
@pytest.mark.parametrize(
    ("now", "monday", "hours"),
    [
        # Spring: the week of 23 March has 167 hours; Monday 30 March 09:00 CEST is 07:00 UTC.
        (utc(2026, 3, 30, 6, 59, 59), None, 0),  # the week before's send was a week ago
        (utc(2026, 3, 30, 7, 0), date(2026, 3, 23), 167),
        (utc(2026, 3, 31, 6, 59, 59), date(2026, 3, 23), 167),  # within the 24 h grace
        (utc(2026, 3, 31, 7, 0), None, 0),  # the grace is half-open
        # The week in which the clocks went forward: its send time was still CET.
        (utc(2026, 3, 23, 8, 0), date(2026, 3, 16), 168),
        (utc(2026, 3, 23, 7, 59), None, 0),
        # Autumn: the week of 19 October has 169 hours; Monday 26 October 09:00 CET = 08:00 UTC.
        (utc(2026, 10, 26, 7, 59), None, 0),
        (utc(2026, 10, 26, 8, 0), date(2026, 10, 19), 169),
        (utc(2026, 10, 27, 7, 59, 59), date(2026, 10, 19), 169),
        (utc(2026, 10, 27, 8, 0), None, 0),
        # Mid-week: nothing due.
        (utc(2026, 11, 25, 12, 0), None, 0),
    ],
)
def test_due_week_in_madrid_across_dst(now: datetime, monday: date | None, hours: int) -> None:
    week = due_week(now, ZONE)
    if monday is None:
        assert week is None
        return
    assert week == week_period(monday, ZONE)
    assert week.start.astimezone(ZoneInfo(ZONE)).time() == time(0)
    assert week.end - week.start == timedelta(hours=hours)


def test_due_week_on_another_day_and_in_a_dst_gap() -> None:
    # Sunday 02:30 does not exist on 29 March in Madrid; it is read with the winter offset
    # (01:30 UTC) and is one instant. The week covered is still the last complete one.
    at, sunday = time(2, 30), 6
    assert due_week(utc(2026, 3, 29, 1, 29), ZONE, sunday, at) is None
    assert due_week(utc(2026, 3, 29, 1, 30), ZONE, sunday, at) == week_period(
        date(2026, 3, 16), ZONE
    )


def test_a_long_grace_still_sends_a_week_missed_for_days_but_never_the_one_before() -> None:
    grace = timedelta(days=6)
    assert due_week(utc(2026, 12, 5, 12, 0), ZONE, grace=grace) == WEEK
    assert due_week(utc(2026, 12, 6, 8, 0), ZONE, grace=grace) is None


def test_the_week_is_the_last_complete_one_in_the_zone() -> None:
    # Monday 00:00 CET is Sunday 23:00 UTC: a due week is always a complete local week.
    assert due_week(utc(2026, 11, 30, 8, 0), ZONE) == WEEK
    assert (WEEK.start, WEEK.end) == (utc(2026, 11, 22, 23), utc(2026, 11, 29, 23))
    assert WEEK.label == "2026-W48"
    assert due_week(utc(2026, 11, 30, 8, 0), "UTC") is None  # 09:00 UTC is still ahead
    assert due_week(utc(2026, 11, 30, 9, 0), "UTC") == week_period(date(2026, 11, 23), "UTC")


# -- the [digest] section ------------------------------------------------------------------


def parse(
    table: dict[str, Any], notify: dict[str, Any] | None = None
) -> tuple[DigestConfig, list[str]]:
    reader = Reader({})
    top: dict[str, Any] = {"digest": table}
    if notify is not None:
        top["notify"] = notify
    return parse_digest(reader, top), reader.problems


def test_digest_config_defaults_and_values() -> None:
    assert parse({}) == (DigestConfig(None, 0, time(9, 0), timedelta(hours=24)), [])
    slack = {"slack": {"webhook_url_env": "HOOK"}}
    table = {"enabled": True, "weekday": "Friday", "at": "17:30", "grace": "2h"}
    assert parse(table, slack) == (DigestConfig(True, 4, time(17, 30), timedelta(hours=2)), [])
    assert parse({"enabled": False}) == (DigestConfig(enabled=False), [])


@pytest.mark.parametrize(
    ("table", "problem"),
    [
        ({"weekday": "lundi"}, "digest.weekday: expected a day name like 'monday', got 'lundi'"),
        ({"at": "9am"}, "digest.at: expected a 24-hour local time like '09:00', got '9am'"),
        ({"at": "24:00"}, "digest.at: expected a 24-hour local time like '09:00', got '24:00'"),
        ({"grace": "5m"}, "digest.grace: must be at least 10m and less than 7d, got '5m'"),
        ({"grace": "7d"}, "digest.grace: must be at least 10m and less than 7d, got '7d'"),
        ({"grace": "soon"}, "digest.grace: expected a duration"),
        ({"enabled": "yes"}, "digest.enabled: expected true or false"),
        (
            {"enabled": True},
            "digest.enabled: the digest is posted to Slack: configure [notify.slack]",
        ),
        ({"when": "monday"}, "digest.when: unknown key"),
    ],
)
def test_digest_config_problems_name_their_key(table: dict[str, Any], problem: str) -> None:
    config, problems = parse(table)
    assert len(problems) == 1 and problems[0].startswith(problem)
    assert config.weekday == 0 and config.at == time(9, 0)


def test_the_digest_is_on_by_default_exactly_when_slack_is_configured() -> None:
    hook = SlackConfig(webhook_url=Secret("https://hooks.slack.com/x", "test"))
    assert digest_enabled(DigestConfig(), hook)
    assert not digest_enabled(DigestConfig(), SlackConfig())
    assert not digest_enabled(DigestConfig(enabled=False), hook)
