"""How long to wait before trying a remote call again: one Retry-After reader, one backoff policy.

Every client that retries (the billing API client, the alert outbox) uses these, so a server's
Retry-After and the spacing of retries mean the same thing everywhere. The jitter draw is an
argument, not drawn here, so callers choose their random source and tests pin it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime


def parse_retry_after(value: str | None, now: datetime) -> float | None:
    """Seconds to wait from a Retry-After header: delta-seconds ("120") or an HTTP-date.

    None when absent or unreadable, 0 for a date already past; a date without a zone (and a
    naive ``now``) counts as UTC, which is what HTTP-dates are.
    """
    if value is None or not value.strip():
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        seconds = (_utc(when) - _utc(now)).total_seconds()
    return max(seconds, 0.0) if math.isfinite(seconds) else None


def _utc(moment: datetime) -> datetime:
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class Backoff:
    """Exponential backoff with equal jitter, capped.

    Retry ``n`` (1 for the first) has the step ``min(cap, base * 2 ** (n - 1))`` and waits
    half the step plus a random part of the other half: ``step / 2 * (1 + jitter)`` for a
    draw ``jitter`` in [0, 1). A server's Retry-After wins when it asks for more.
    """

    base_seconds: float
    cap_seconds: float

    def __post_init__(self) -> None:
        if not 0 < self.base_seconds <= self.cap_seconds:
            raise ValueError(
                f"need 0 < base <= cap, got base {self.base_seconds} and cap {self.cap_seconds}"
            )

    def wait(self, retry: int, jitter: float, retry_after: float | None = None) -> float:
        """Seconds to wait before retry number ``retry`` (1 for the first)."""
        if retry < 1:
            raise ValueError(f"retries count from 1, got {retry}")
        if not 0.0 <= jitter <= 1.0:
            raise ValueError(f"a jitter draw is between 0 and 1, got {jitter}")
        # The exponent is bounded first: 2.0 ** 1100 raises OverflowError, and any cap is
        # far below 2 ** 64 bases.
        step = min(self.cap_seconds, self.base_seconds * 2.0 ** min(retry - 1, 64))
        # Clients that failed together (one outage, many daemons) must not retry together, or
        # they fail together again: the random half spreads them. The fixed half keeps a retry
        # from ever being immediate, which full jitter (0 to step) allows.
        wait = step / 2 * (1.0 + jitter)
        return wait if retry_after is None else max(wait, retry_after)
