"""The ``[digest]`` section: when the weekly Slack digest goes out.

    [digest]
    enabled = true          # default: on when [notify.slack] is configured
    weekday = "monday"      # the day after the week (Monday 00:00 to Monday 00:00) it covers
    at = "09:00"            # local time in the top-level ``timezone``
    grace = "24h"           # a digest missed while no daemon ran is still sent this long after

The week covered is always the last complete Monday-to-Monday week in the configured timezone;
``weekday`` and ``at`` only say when it is posted. ``grace`` is at least 10 minutes (the daemon
checks every few minutes, so a shorter window could fall between two checks) and under 7 days
(longer would reach the next week's send time).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import time, timedelta
from typing import Any

from agent.config.reader import Reader

WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
MIN_GRACE = timedelta(minutes=10)
MAX_GRACE = timedelta(days=7)
_SLACK_KEYS = ("webhook_url_env", "webhook_url_file", "token_env", "token_file")


@dataclass(frozen=True, slots=True)
class DigestConfig:
    """``enabled`` None means "as Slack is": on exactly when [notify.slack] is configured
    (resolved by :func:`agent.reporting.digest_job.digest_enabled`, which sees the whole config)."""

    enabled: bool | None = None
    weekday: int = 0  # Monday, as datetime.weekday() counts
    at: time = time(9, 0)
    grace: timedelta = timedelta(hours=24)


def parse_digest(r: Reader, top: dict[str, Any]) -> DigestConfig:
    t = r.sub(top, "digest", {"enabled", "weekday", "at", "grace"})
    default = DigestConfig()
    enabled: bool | None = None
    if "digest.enabled" in t:
        # A non-boolean is reported by the reader; False then adds no second problem.
        enabled = r.boolean(t, "digest.enabled", False)
        if enabled and not _slack_configured(top):
            r.problem("digest.enabled", "the digest is posted to Slack: configure [notify.slack]")
    return DigestConfig(
        enabled=enabled,
        weekday=_weekday(r, t, default.weekday),
        at=_at(r, t, default.at),
        grace=_grace(r, t, default.grace),
    )


def _slack_configured(top: dict[str, Any]) -> bool:
    # [notify] is parsed (and its problems reported) elsewhere; here only "is a Slack
    # credential named at all" matters, so the raw table is enough.
    notify = top.get("notify")
    slack = notify.get("slack") if isinstance(notify, dict) else None
    return isinstance(slack, dict) and any(key in slack for key in _SLACK_KEYS)


def _weekday(r: Reader, t: dict[str, Any], default: int) -> int:
    name = r.optional_string(t, "digest.weekday")
    if name is None:
        return default
    if name.strip().lower() not in WEEKDAYS:
        r.problem("digest.weekday", f"expected a day name like 'monday', got {name!r}")
        return default
    return WEEKDAYS.index(name.strip().lower())


def _at(r: Reader, t: dict[str, Any], default: time) -> time:
    text = r.optional_string(t, "digest.at")
    if text is None:
        return default
    hours, sep, minutes = text.strip().partition(":")
    ok = sep and len(minutes) == 2 and hours.isdigit() and minutes.isdigit()
    if not ok or not (0 <= int(hours) < 24 and 0 <= int(minutes) < 60):
        r.problem("digest.at", f"expected a 24-hour local time like '09:00', got {text!r}")
        return default
    return time(int(hours), int(minutes))


def _grace(r: Reader, t: dict[str, Any], default: timedelta) -> timedelta:
    seconds = r.duration(t, "digest.grace", default.total_seconds())
    grace = timedelta(seconds=seconds)
    if not MIN_GRACE <= grace < MAX_GRACE:
        r.problem(
            "digest.grace", f"must be at least 10m and less than 7d, got {t['digest.grace']!r}"
        )
        return default
    return grace
