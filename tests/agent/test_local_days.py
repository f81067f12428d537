"""Which hours of a UTC day row belong to a neighbouring local day (agent/reporting/local_days.py),
in zones east, west and half an hour off UTC, across a DST change."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from agent.cost.split import Split
from agent.reporting.local_days import LocalDays
from agent.reporting.period import month_period


def days(zone: str, month: str = "2026-10") -> LocalDays:
    period = month_period(month, datetime(2026, 12, 1, tzinfo=UTC), zone)
    starts, at = [], period.start
    local = ZoneInfo(zone)
    while at < period.end:
        starts.append(at)
        at = (at.astimezone(local) + timedelta(days=1)).replace(hour=0).astimezone(UTC)
    split = Split(period.start, period.end, period.start, period.end, {}, *_days(period), {})
    return LocalDays.of(starts, split)


def _days(period: object) -> tuple[datetime, datetime]:
    start, end = period.start, period.end  # type: ignore[attr-defined]
    first = start.replace(hour=0, minute=0) + (
        timedelta(days=1) if start.hour or start.minute else timedelta(0)
    )
    return first, end.replace(hour=0, minute=0)


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def test_utc_days_move_nothing() -> None:
    assert days("UTC").aligned
    assert days("UTC").moved == {}


def test_berlin_moves_each_days_last_hours_to_the_next_day() -> None:
    moved = days("Europe/Berlin").moved
    assert set(moved) == {1}
    ranges = moved[1]
    # Summer time (+2) until October 25th: 22:00 and 23:00 UTC are the next local day.
    assert ranges[0] == (at("2026-10-01T22:00"), at("2026-10-02T00:00"))
    # Winter time (+1) after it: only 23:00 UTC.
    assert ranges[-1] == (at("2026-10-30T23:00"), at("2026-10-31T00:00"))


def test_new_york_moves_each_days_first_hours_to_the_day_before() -> None:
    moved = days("America/New_York").moved
    assert set(moved) == {-1}
    first = moved[-1][0]
    # The month starts at 04:00 UTC (EDT, -4): the first whole UTC day is October 2nd.
    assert first == (at("2026-10-02T00:00"), at("2026-10-02T04:00"))


def test_kolkata_counts_the_half_hour_with_the_hour_it_starts() -> None:
    moved = days("Asia/Kolkata").moved
    assert set(moved) == {1}
    # Local midnight is 18:30 UTC: the 18:00 hour starts at 23:30 local, the same day.
    assert moved[1][0] == (at("2026-10-01T19:00"), at("2026-10-02T00:00"))


@pytest.mark.parametrize("zone", ["Europe/Berlin", "America/New_York", "Asia/Kolkata"])
def test_every_moved_hour_is_in_a_whole_utc_day_of_the_window(zone: str) -> None:
    d = days(zone)
    for ranges in d.moved.values():
        for start, end in ranges:
            assert d.day_starts[0] <= start < end <= d.day_starts[-1] + timedelta(days=1)
