"""Report periods: months, ISO weeks and ranges cut in the configured time zone, the period
before, local days, and bad arguments named."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest

from agent.reporting.model import Period
from agent.reporting.period import (
    last_month_period,
    last_week_period,
    local_days,
    month_period,
    previous_period,
    range_period,
    week_period,
)
from tests.agent import report_month as M

MID_OCTOBER = datetime(2026, 10, 15, 10, 30, 40, tzinfo=UTC)
OCTOBER = Period(M.OCT_START, M.OCT_END, "2026-10", M.ZONE)


def utc(text: str) -> datetime:
    return M.at(text)


def test_months_are_cut_in_the_configured_zone() -> None:
    now = utc("2026-11-15T10:30:45")
    october = month_period("2026-10", now, M.ZONE)
    assert (october.start, october.end) == (utc("2026-09-30T22:00"), utc("2026-10-31T23:00"))
    assert (october.label, october.timezone) == ("2026-10", M.ZONE)
    march = month_period("2026-03", now, M.ZONE)  # clocks go forward on the 29th: 743 hours
    assert (march.start, march.end - march.start) == (utc("2026-02-28T23:00"), timedelta(hours=743))
    to_date = month_period(None, now, M.ZONE)
    assert (to_date.start, to_date.end) == (utc("2026-10-31T23:00"), utc("2026-11-15T10:30"))
    assert to_date.label == "2026-11"
    assert month_period("2026-11", now, M.ZONE) == to_date  # the current month ends now
    # 23:30 UTC on 31 October is November in Madrid, still October in UTC.
    late = utc("2026-10-31T23:30")
    assert month_period(None, late, M.ZONE).label == "2026-11"
    assert month_period(None, late, "UTC").label == "2026-10"
    assert last_month_period(utc("2027-01-10T00:00"), M.ZONE).label == "2026-12"
    assert last_month_period(now, M.ZONE) == october


def test_weeks_are_iso_weeks_from_monday_local_midnight() -> None:
    sunday = utc("2026-11-15T10:30:45")
    week = week_period(sunday, M.ZONE)
    assert (week.start, week.end, week.label) == (
        utc("2026-11-08T23:00"),
        utc("2026-11-15T10:30"),
        "2026-W46",
    )
    last = last_week_period(sunday, M.ZONE)
    assert (last.start, last.end, last.label) == (
        utc("2026-11-01T23:00"),
        utc("2026-11-08T23:00"),
        "2026-W45",
    )
    assert last_week_period(utc("2027-01-06T12:00"), M.ZONE).label == "2026-W53"
    # Monday 00:30 local is still the new week; Sunday 23:30 local the old one.
    assert week_period(utc("2026-11-08T23:30"), M.ZONE).label == "2026-W46"
    assert week_period(utc("2026-11-08T22:30"), M.ZONE).label == "2026-W45"


def test_ranges_take_dates_or_datetimes_with_end_exclusive() -> None:
    days = range_period("2026-11-03", "2026-11-10", M.ZONE)
    assert (days.start, days.end) == (utc("2026-11-02T23:00"), utc("2026-11-09T23:00"))
    assert days.label == "2026-11-03..2026-11-10"
    times = range_period("2026-11-03T08:00", "2026-11-03T09:30+00:00", M.ZONE)
    assert (times.start, times.end) == (utc("2026-11-03T07:00"), utc("2026-11-03T09:30"))
    assert times.label == "2026-11-03T08:00..2026-11-03T10:30"


NOW = datetime(2026, 11, 15, tzinfo=UTC)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: month_period("2026-13", NOW, M.ZONE), "month: expected YYYY-MM"),
        (lambda: month_period("2026/10", NOW, M.ZONE), "month: expected YYYY-MM"),
        (lambda: month_period("2027-01", NOW, M.ZONE), "month: 2027-01 has not started"),
        (
            lambda: range_period("2026-11-10", "2026-11-03", M.ZONE),
            "end: '2026-11-03' is not after",
        ),
        (
            lambda: range_period("2026-11-03", "2026-11-03", M.ZONE),
            "end: '2026-11-03' is not after",
        ),
        (lambda: range_period("yesterday", "2026-11-03", M.ZONE), "start: expected a date"),
        (lambda: range_period("2026-11-01", "2026-02-30", M.ZONE), "end: expected a date"),
        (lambda: month_period(None, NOW, "Mars/Olympus"), "timezone: unknown time zone"),
        (lambda: week_period(datetime(2026, 11, 15), M.ZONE), "now: naive datetime"),
    ],
)
def test_bad_input_names_the_argument(call: object, message: str) -> None:
    with pytest.raises(ValueError, match="^" + message.replace("(", r"\(")):
        call()  # type: ignore[operator]


def test_the_previous_period_is_the_month_week_or_length_before() -> None:
    now = utc("2026-11-15T10:30")
    march = month_period("2026-03", now, M.ZONE)
    february = previous_period(march)
    assert (february.label, february.start, february.end) == (
        "2026-02",
        utc("2026-01-31T23:00"),
        march.start,
    )
    assert previous_period(month_period("2026-01", now, M.ZONE)).label == "2025-12"
    assert previous_period(month_period(None, now, M.ZONE)).label == "2026-10"  # whole month
    assert previous_period(week_period(now, M.ZONE)).label == "2026-W45"
    days = range_period("2026-11-03", "2026-11-10", M.ZONE)
    before = previous_period(days)
    assert (before.start, before.end, before.label) == (
        utc("2026-10-26T23:00"),
        days.start,
        "2026-10-27..2026-11-03",
    )


def test_local_days_cover_the_period_in_its_zone() -> None:
    days = local_days(OCTOBER)
    assert len(days) == 31
    assert days[24] == (date(2026, 10, 25), utc("2026-10-24T22:00"))  # 25 hours long
    assert days[25] == (date(2026, 10, 26), utc("2026-10-25T23:00"))
    partial = local_days(month_period(None, MID_OCTOBER, M.ZONE))
    assert (len(partial), partial[0][1]) == (15, M.OCT_START)
