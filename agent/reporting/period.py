"""The periods a report covers, cut in the configured time zone.

A month or a week is the users' calendar, not UTC's: "2026-10" in Europe/Madrid runs from
1 October 00:00 CEST (30 September 22:00 UTC) to 1 November 00:00 CET (31 October 23:00 UTC),
745 hours, because the clocks go back on the 25th. Every function returns a
:class:`agent.reporting.model.Period`: [start, end) as UTC instants, the label the user would
write, and the zone. Periods "to date" end at ``now`` floored to the minute, the edge up to
which the minute rollups are exact.

Bad input raises ValueError whose message starts with the argument's name ("month: ...",
"start: ...", "end: ..."), so the CLI can show it as is.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, time, timedelta, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from agent.reporting.model import Period

_MONTH = re.compile(r"^(\d{4})-(\d{2})$")
_WEEK = re.compile(r"^(\d{4})-W(\d{2})$")
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def zone_of(name: str) -> ZoneInfo:
    """The IANA zone ``name``; ValueError naming it when unknown."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        hint = "an IANA name such as 'Europe/Madrid'"
        raise ValueError(f"timezone: unknown time zone {name!r} ({hint})") from None


def month_period(month: str | None, now: datetime, zone: str) -> Period:
    """The calendar month "YYYY-MM" in ``zone``; None: the current month to date.

    The current month, named or not, ends at ``now`` floored to the minute: a report never
    claims time that has not happened. A month that has not started is an error.
    """
    tz = zone_of(zone)
    current = _to_minute(_aware(now, "now"))
    if month is None:
        local = current.astimezone(tz)
        year, number = local.year, local.month
    else:
        year, number = _parse_month(month)
    start, end = _month_bounds(year, number, tz)
    if start > current:
        raise ValueError(f"month: {month} has not started yet (it is {_local_label(now, tz)})")
    return Period(start, min(end, current), f"{year:04d}-{number:02d}", zone)


def last_month_period(now: datetime, zone: str) -> Period:
    """The last complete calendar month before ``now``'s, in ``zone``."""
    tz = zone_of(zone)
    local = _aware(now, "now").astimezone(tz)
    year, number = (local.year, local.month - 1) if local.month > 1 else (local.year - 1, 12)
    start, end = _month_bounds(year, number, tz)
    return Period(start, end, f"{year:04d}-{number:02d}", zone)


def week_period(now: datetime, zone: str) -> Period:
    """The current ISO week to date: Monday 00:00 local to ``now`` floored to the minute."""
    tz = zone_of(zone)
    current = _to_minute(_aware(now, "now"))
    monday = _monday(current.astimezone(tz).date())
    return Period(_utc(monday, tz), current, _week_label(monday), zone)


def last_week_period(now: datetime, zone: str) -> Period:
    """The last complete ISO week: the Monday-to-Monday week before ``now``'s (the digest's)."""
    tz = zone_of(zone)
    this_monday = _monday(_aware(now, "now").astimezone(tz).date())
    monday = this_monday - timedelta(days=7)
    return Period(_utc(monday, tz), _utc(this_monday, tz), _week_label(monday), zone)


def range_period(start: str, end: str, zone: str) -> Period:
    """[start, end) from dates "YYYY-MM-DD" (local midnight) or ISO datetimes (local when they
    carry no offset). ``end`` is exclusive: "2026-11-03".."2026-11-10" is seven whole days."""
    tz = zone_of(zone)
    low = _parse_instant(start, "start", tz)
    high = _parse_instant(end, "end", tz)
    if high <= low:
        raise ValueError(f"end: {end!r} is not after start {start!r} (end is exclusive)")
    return Period(low, high, f"{_instant_label(low, tz)}..{_instant_label(high, tz)}", zone)


def month_bounds(at: datetime, zone: str) -> tuple[datetime, datetime]:
    """The calendar month in ``zone`` that the instant ``at`` falls in, as [start, end) UTC
    instants (the FOCUS export's billing period)."""
    tz = zone_of(zone)
    local = _aware(at, "at").astimezone(tz)
    return _month_bounds(local.year, local.month, tz)


def previous_period(period: Period) -> Period:
    """The period to compare with: the previous calendar month for a month (whole or to
    date: a month to date is compared with the whole month before, as "vs last month" reads),
    the previous ISO week for a week, else the same length just before."""
    tz = zone_of(period.timezone)
    month = _MONTH.match(period.label)
    if month and _is_month_start(period.start, tz):
        year, number = int(month.group(1)), int(month.group(2))
        year, number = (year, number - 1) if number > 1 else (year - 1, 12)
        start, end = _month_bounds(year, number, tz)
        return Period(start, end, f"{year:04d}-{number:02d}", period.timezone)
    if _WEEK.match(period.label) and _is_monday_start(period.start, tz):
        this_monday = period.start.astimezone(tz).date()
        monday = this_monday - timedelta(days=7)
        return Period(_utc(monday, tz), period.start, _week_label(monday), period.timezone)
    length = period.end - period.start
    start = period.start - length
    label = f"{_instant_label(start, tz)}..{_instant_label(period.start, tz)}"
    return Period(start, period.start, label, period.timezone)


def local_days(period: Period) -> list[tuple[date, datetime]]:
    """Each local day the period touches, with the UTC instant it starts at (the first day's
    is the period's start when that is not a midnight): the edges of the daily series."""
    tz = zone_of(period.timezone)
    last = (period.end - timedelta(microseconds=1)).astimezone(tz).date()
    day = period.start.astimezone(tz).date()
    out = [(day, period.start)]
    while day < last:
        day += timedelta(days=1)
        out.append((day, _utc(day, tz)))
    return out


# -- helpers ------------------------------------------------------------------------------------


def _parse_month(text: str) -> tuple[int, int]:
    match = _MONTH.match(text.strip())
    if not match or not 1 <= int(match.group(2)) <= 12:
        raise ValueError(f"month: expected YYYY-MM (e.g. 2026-11), got {text!r}")
    return int(match.group(1)), int(match.group(2))


def _parse_instant(text: str, name: str, tz: tzinfo) -> datetime:
    value = text.strip()
    try:
        if _DATE.match(value):
            return _utc(date.fromisoformat(value), tz)
        parsed = datetime.fromisoformat(value)
    except ValueError:
        parsed = None
    if parsed is None:
        raise ValueError(
            f"{name}: expected a date YYYY-MM-DD or an ISO datetime (2026-11-03T08:00, with an "
            f"optional offset), got {text!r}"
        )
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=tz)
    return parsed.astimezone(UTC)


def _aware(at: datetime, name: str) -> datetime:
    if at.tzinfo is None:
        raise ValueError(f"{name}: naive datetime {at!r}; periods need an aware instant")
    return at.astimezone(UTC)


def _to_minute(at: datetime) -> datetime:
    return at.replace(second=0, microsecond=0)


def _utc(day: date, tz: tzinfo) -> datetime:
    """Local midnight of ``day`` as a UTC instant."""
    return datetime.combine(day, time(0), tzinfo=tz).astimezone(UTC)


def _month_bounds(year: int, month: int, tz: tzinfo) -> tuple[datetime, datetime]:
    following = date(year + month // 12, month % 12 + 1, 1)
    return _utc(date(year, month, 1), tz), _utc(following, tz)


def _monday(day: date) -> date:
    return day - timedelta(days=day.weekday())


def _week_label(monday: date) -> str:
    year, week, _ = monday.isocalendar()
    return f"{year:04d}-W{week:02d}"


def _is_month_start(at: datetime, tz: tzinfo) -> bool:
    local = at.astimezone(tz)
    return local.day == 1 and _utc(local.date(), tz) == at


def _is_monday_start(at: datetime, tz: tzinfo) -> bool:
    local = at.astimezone(tz)
    return local.weekday() == 0 and _utc(local.date(), tz) == at


def _instant_label(at: datetime, tz: tzinfo) -> str:
    local = at.astimezone(tz)
    if _utc(local.date(), tz) == at:
        return local.date().isoformat()
    return f"{local:%Y-%m-%dT%H:%M}"


def _local_label(at: datetime, tz: tzinfo) -> str:
    return f"{at.astimezone(tz):%Y-%m-%d %H:%M %Z}"
