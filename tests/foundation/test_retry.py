"""The one Retry-After reader and the one backoff policy (equal jitter, capped)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest

from foundation.retry import Backoff, parse_retry_after

NOW = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("120", 120.0),
        (" 7 ", 7.0),
        ("1.5", 1.5),
        ("0", 0.0),
        ("-5", 0.0),  # a negative delay means "now"
        (None, None),
        ("", None),
        ("soon", None),
        ("nan", None),
        ("inf", None),
    ],
)
def test_retry_after_in_seconds(value: str | None, seconds: float | None) -> None:
    assert parse_retry_after(value, NOW) == seconds


def test_retry_after_as_an_http_date() -> None:
    later = format_datetime(NOW + timedelta(seconds=90), usegmt=True)
    assert later == "Mon, 30 Nov 2026 12:01:30 GMT"
    assert parse_retry_after(later, NOW) == 90.0


def test_a_past_http_date_means_now() -> None:
    assert parse_retry_after("Mon, 30 Nov 2026 11:00:00 GMT", NOW) == 0.0


def test_a_date_without_a_zone_and_a_naive_now_count_as_utc() -> None:
    # "-0000" is RFC 5322's "zone unknown": parsedate_to_datetime returns it naive.
    assert parse_retry_after("Mon, 30 Nov 2026 12:00:30 -0000", NOW) == 30.0
    naive_now = NOW.replace(tzinfo=None)
    assert parse_retry_after("Mon, 30 Nov 2026 12:00:30 GMT", naive_now) == 30.0


OUTBOX = Backoff(base_seconds=10.0, cap_seconds=300.0)


def test_the_step_doubles_from_the_base_up_to_the_cap() -> None:
    tops = [OUTBOX.wait(n, 1.0) for n in range(1, 9)]
    assert tops == [10, 20, 40, 80, 160, 300, 300, 300]
    assert OUTBOX.wait(10_000, 1.0) == 300  # no overflow however long it fails


def test_equal_jitter_keeps_half_the_step_and_spreads_the_other_half() -> None:
    assert OUTBOX.wait(3, 0.0) == 20  # never sooner than half the step
    assert OUTBOX.wait(3, 0.5) == 30
    assert 39.99 < OUTBOX.wait(3, 0.9999) < 40  # never later than the step
    assert OUTBOX.wait(50, 0.0) == 150  # at the cap, still spread over its upper half


def test_retry_after_wins_only_when_it_asks_for_more() -> None:
    assert OUTBOX.wait(1, 0.0, retry_after=120.0) == 120
    assert OUTBOX.wait(3, 0.5, retry_after=1.0) == 30
    assert OUTBOX.wait(1, 0.0, retry_after=0.0) == 5
    # The cap bounds our own backoff, not what the server asks for.
    assert OUTBOX.wait(1, 0.0, retry_after=3600.0) == 3600


@pytest.mark.parametrize(
    ("retry", "jitter"), [(0, 0.5), (-1, 0.5), (1, -0.1), (1, 1.5), (1, float("nan"))]
)
def test_misuse_is_refused(retry: int, jitter: float) -> None:
    with pytest.raises(ValueError):
        OUTBOX.wait(retry, jitter)


@pytest.mark.parametrize(("base", "cap"), [(0.0, 10.0), (-1.0, 10.0), (20.0, 10.0)])
def test_a_backoff_needs_a_positive_base_below_its_cap(base: float, cap: float) -> None:
    with pytest.raises(ValueError, match="need 0 < base <= cap"):
        Backoff(base, cap)
