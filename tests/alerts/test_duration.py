"""The one duration grammar: Prometheus' model.ParseDuration, and its inverse for messages."""

from __future__ import annotations

import pytest

from alerts.duration import DurationError, format_duration, parse_duration
from foundation.errors import GpuwatchError

EXPECTED = (
    'expected a duration like "90s", "5m", "2h" or "1h30m"'
    " (integers, units ms s m h d w y, largest first)"
)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("0", 0),
        ("0s", 0),
        ("90s", 90),
        ("5m", 300),
        ("1h30m", 5400),
        ("2d", 172800),
        ("1w", 604800),
        ("1y", 31536000),
        ("500ms", 0.5),
        ("1h0m5s250ms", 3605.25),
        ("1y2w3d4h5m6s7ms", 31536000 + 2 * 604800 + 3 * 86400 + 4 * 3600 + 5 * 60 + 6.007),
        ("90m", 5400),  # a unit may exceed the next one up, as in Prometheus
    ],
)
def test_prometheus_durations_are_accepted(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds, abs=1e-9)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "5",  # no unit: seconds? minutes? Prometheus refuses it too
        "1.5h",  # integers only: "1h30m"
        "5m5m",  # each unit at most once
        "1m1h",  # largest first
        "30m1h",
        "1d1y",
        "-5m",
        "5mm",
        "5 m",
        " 10m ",
        "h",
        "00",  # only "0" itself may go without a unit
        "5M",
        "٥m",  # another script's digit, which Python's \d would accept
    ],
)
def test_what_prometheus_refuses_is_refused_with_the_accepted_forms(text: str) -> None:
    with pytest.raises(DurationError) as raised:
        parse_duration(text)
    assert str(raised.value) == f"{EXPECTED}, got {text!r}"


@pytest.mark.parametrize("value", [300, 1.5, True, None, ["5m"]])
def test_a_non_string_is_refused_with_the_same_message(value: object) -> None:
    with pytest.raises(DurationError, match=r"^expected a duration like .*, got "):
        parse_duration(value)


def test_a_duration_past_prometheus_range_is_refused() -> None:
    assert parse_duration("292y") == 292 * 31536000
    with pytest.raises(DurationError, match="^expected a duration of at most 292y, got '293y'$"):
        parse_duration("293y")


def test_the_error_is_a_gpuwatch_error_and_a_value_error() -> None:
    # ValueError: callers that validate several kinds of values catch them alike.
    assert issubclass(DurationError, GpuwatchError)
    assert issubclass(DurationError, ValueError)


def test_format_duration_is_the_inverse_for_messages() -> None:
    assert format_duration(0) == "0s"
    assert format_duration(5400) == "1h30m"
    assert format_duration(0.5) == "500ms"
    assert parse_duration(format_duration(694861.5)) == 694861.5
    assert parse_duration(format_duration(31536000 + 7)) == 31536007
