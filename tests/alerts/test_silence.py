"""Silences: matchers with each operator, parsing errors, the time window and expiry."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from alerts.silence import (
    Matcher,
    MatchOp,
    Silence,
    SilenceState,
    parse_matcher,
    parse_matchers,
    silenced_by,
)

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
GPU1 = {"alertname": "GpuHot", "host": "box-a", "gpu": "1"}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("host=box-a", Matcher("host", "box-a", MatchOp.EQUAL)),
        ("host!=box-a", Matcher("host", "box-a", MatchOp.NOT_EQUAL)),
        ("gpu=~1|2", Matcher("gpu", "1|2", MatchOp.REGEX)),
        ("gpu!~1|2", Matcher("gpu", "1|2", MatchOp.NOT_REGEX)),
        (' alertname = "Gpu Hot" ', Matcher("alertname", "Gpu Hot", MatchOp.EQUAL)),
        ("gpu=", Matcher("gpu", "", MatchOp.EQUAL)),
        ("a==b", Matcher("a", "=b", MatchOp.EQUAL)),
    ],
)
def test_parse_matcher_reads_each_operator(text: str, expected: Matcher) -> None:
    assert parse_matcher(text) == expected


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("host", "bad matcher format: host (expected NAME=VALUE"),
        ("=box-a", "bad matcher format: =box-a"),
        ("1host=a", "bad matcher format: 1host=a"),
        ("", "bad matcher format:  (expected"),
        ("gpu=~(", "invalid regular expression"),
    ],
)
def test_parse_matcher_names_the_bad_text(text: str, needle: str) -> None:
    with pytest.raises(ValueError) as caught:
        parse_matcher(text)
    assert needle in str(caught.value) and text in str(caught.value)


AM_CASES = json.loads((Path(__file__).parent / "data" / "alertmanager_parse_matchers.json")
                      .read_text(encoding="utf-8"))  # fmt: skip


@pytest.mark.parametrize("case", AM_CASES["cases"], ids=[c["input"] for c in AM_CASES["cases"]])
def test_matchers_parse_as_alertmanager_parses_them(case: dict[str, Any]) -> None:
    # Alertmanager's own table (pkg/labels/parse_test.go TestMatchers); its regex errors come
    # from Go's regexp, so only their presence is compared, not their text.
    if case["err"] is None:
        got = [(m.op.value, m.name, m.value) for m in parse_matchers(case["input"])]
        assert got == [tuple(w) for w in case["want"]]
        return
    with pytest.raises(ValueError) as caught:
        parse_matchers(case["input"])
    if not case["err"].startswith("error parsing regexp"):
        assert str(caught.value).startswith(case["err"])


@pytest.mark.parametrize(
    ("matcher", "matches"),
    [
        (Matcher("gpu", "1"), True),
        (Matcher("gpu", "2"), False),
        (Matcher("gpu", "2", MatchOp.NOT_EQUAL), True),
        (Matcher("gpu", "1", MatchOp.NOT_EQUAL), False),
        (Matcher("gpu", "1|2", MatchOp.REGEX), True),
        (Matcher("gpu", "3|4", MatchOp.NOT_REGEX), True),
        (Matcher("gpu", "1|2", MatchOp.NOT_REGEX), False),
        (Matcher("missing", ""), True),  # a missing label reads as ""
        (Matcher("missing", "", MatchOp.NOT_EQUAL), False),
    ],
)
def test_matcher_ops(matcher: Matcher, matches: bool) -> None:
    assert matcher.matches(GPU1) is matches


def test_regex_is_anchored_at_both_ends() -> None:
    # gpu=~"1" must not catch GPU 10 or 11, nor box-a1 match "box".
    assert not Matcher("gpu", "1", MatchOp.REGEX).matches({"gpu": "11"})
    assert not Matcher("host", "box", MatchOp.REGEX).matches({"host": "box-a"})
    assert Matcher("gpu", "1", MatchOp.NOT_REGEX).matches({"gpu": "10"})


def test_matcher_rejects_bad_label_name_and_regex() -> None:
    with pytest.raises(ValueError, match="invalid label name"):
        Matcher("bad-name", "x")
    with pytest.raises(ValueError, match="invalid regular expression"):
        Matcher("gpu", "[", MatchOp.REGEX)


def test_matcher_renders_as_amtool_writes_it() -> None:
    assert str(Matcher("gpu", '1|"2"', MatchOp.REGEX)) == 'gpu=~"1|\\"2\\""'
    assert parse_matcher(str(Matcher("c", 'a"b'))) == Matcher("c", 'a"b')


def _silence(*matchers: str, start: datetime = T0, hours: int = 2) -> Silence:
    ms = tuple(parse_matcher(m) for m in matchers)
    return Silence("s1", ms, start, start + timedelta(hours=hours), "ops", "driver upgrade")


def test_silence_matches_when_all_matchers_do() -> None:
    assert _silence("host=box-a", "gpu=~1|2").matches(GPU1)
    assert not _silence("host=box-a", "gpu=3").matches(GPU1)


def test_silence_window_includes_both_ends_as_alertmanager_does() -> None:
    # silence.go getState: pending while now is before StartsAt, expired once after EndsAt.
    s = _silence("host=box-a")
    assert s.state(T0 - timedelta(seconds=1)) is SilenceState.PENDING
    assert s.active(T0)
    assert s.active(T0 + timedelta(hours=2))
    assert s.state(T0 + timedelta(hours=2, microseconds=1)) is SilenceState.EXPIRED


def test_silenced_by_lists_only_active_matching_ids() -> None:
    active = _silence("host=box-a")
    other_host = Silence("s2", (Matcher("host", "box-b"),), T0, T0 + timedelta(hours=1), "", "")
    later = Silence(
        "s3", (Matcher("gpu", "1"),), T0 + timedelta(hours=1), T0 + timedelta(hours=3), "", ""
    )
    both = Silence("s4", (Matcher("gpu", "1"),), T0, T0 + timedelta(minutes=5), "", "")
    silences = (active, other_host, later, both)
    assert silenced_by(GPU1, silences, T0) == ("s1", "s4")
    assert silenced_by(GPU1, silences, T0 + timedelta(minutes=90)) == ("s1", "s3")
    assert silenced_by(GPU1, silences, T0 + timedelta(hours=5)) == ()


def test_starting_spans_the_duration() -> None:
    s = Silence.starting("s9", [Matcher("host", "box-a")], T0, timedelta(hours=2), "me", "why")
    assert (s.starts_at, s.ends_at, s.created_by, s.comment) == (
        T0,
        T0 + timedelta(hours=2),
        "me",
        "why",
    )
    with pytest.raises(ValueError, match="duration must be positive"):
        Silence.starting("s9", [Matcher("host", "a")], T0, timedelta(0), "me", "why")


def test_expire_ends_an_active_silence_now() -> None:
    now = T0 + timedelta(minutes=10)
    expired = _silence("host=box-a").expire(now)
    assert (expired.starts_at, expired.ends_at) == (T0, now)
    later = now + timedelta(microseconds=1)  # the end instant itself still mutes
    assert not expired.active(later)
    assert silenced_by(GPU1, (expired,), later) == ()


def test_expire_a_pending_silence_moves_its_start_too() -> None:
    pending = _silence("host=box-a", start=T0 + timedelta(hours=1))
    expired = pending.expire(T0)
    assert (expired.starts_at, expired.ends_at) == (T0, T0)
    assert expired.state(T0 + timedelta(microseconds=1)) is SilenceState.EXPIRED


AM_SILENCES = json.loads(
    (Path(__file__).parent / "data" / "alertmanager_silences.json").read_text(encoding="utf-8")
)


def _from_case(case: dict[str, Any], id: str = "s1") -> Silence:
    matchers = tuple(parse_matcher(m) for m in case["matchers"])
    at = [T0 + timedelta(seconds=case[k]) for k in ("starts_at", "ends_at")]
    return Silence(id, matchers, at[0], at[1], "", "")


def test_expire_as_alertmanagers_own_test_expires() -> None:
    """TestSilenceExpire: a pending silence ends (and starts) now, an active one ends now, and
    an expired one is left as it was; expiring it again is no error (Alertmanager: a no-op)."""
    case = AM_SILENCES["TestSilenceExpire"]
    now = T0 + timedelta(seconds=case["expire_at"])
    for given in case["silences"]:
        silence = _from_case(given, given["id"])
        ended = silence.expire(now)
        after = given["upstream_after"]
        assert (ended.starts_at, ended.ends_at) == (
            T0 + timedelta(seconds=after["starts_at"]),
            T0 + timedelta(seconds=after["ends_at"]),
        ), given["id"]
        assert ended.expire(now) == ended  # and once more: still nothing changes
        checked = T0 + timedelta(seconds=case["checked_at"])
        assert ended.state(checked) is SilenceState.EXPIRED


@pytest.mark.parametrize(
    "case", AM_SILENCES["TestValidateSilence"], ids=lambda c: c["upstream_error"] or "valid"
)
def test_silences_alertmanager_refuses_are_refused(case: dict[str, Any]) -> None:
    if not case["upstream_error"]:
        assert _from_case(case).matches({"a": "b"})
        return
    with pytest.raises(ValueError):
        _from_case(case)


@pytest.mark.parametrize(
    ("matchers", "needle"),
    [
        ((), "at least one matcher"),
        ((Matcher("host", ".*", MatchOp.REGEX),), "must not match the empty string"),
        ((Matcher("host", ""), Matcher("gpu", "")), "must not match the empty string"),
    ],
)
def test_silence_refuses_matchers_that_would_mute_everything(
    matchers: tuple[Matcher, ...], needle: str
) -> None:
    with pytest.raises(ValueError, match=needle):
        Silence("s1", matchers, T0, T0 + timedelta(hours=1), "", "")


def test_a_negative_matcher_alone_is_a_valid_silence() -> None:
    # silence.go matchesEmpty counts only = and =~ as matching the empty string.
    s = Silence(
        "s1", (Matcher("host", "box-b", MatchOp.NOT_EQUAL),), T0, T0 + timedelta(hours=1), "", ""
    )
    assert s.matches(GPU1)


def test_silence_refuses_missing_id_and_reversed_window() -> None:
    with pytest.raises(ValueError, match="id missing"):
        Silence("", (Matcher("host", "a"),), T0, T0, "", "")
    with pytest.raises(ValueError, match="end before it starts"):
        Silence("s1", (Matcher("host", "a"),), T0, T0 - timedelta(seconds=1), "", "")
