"""Silences, as Alertmanager's silence/ package has them: label matchers plus a time window.

A silence mutes every alert whose labels satisfy all of its matchers while ``now`` lies in
``[starts_at, ends_at]``. Silences are values: the agent creates them (and their ids), stores
them and passes them in; nothing here reads a clock.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import Enum

from alerts.regex import Matches, anchored

# Alertmanager's parser (pkg/labels/parse.go) takes colons in names, as metric names have them.
_LABEL_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
# Its expression: "=~" before "=", or the "~" would become part of the value.
_MATCHER = re.compile(r"\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(=~|=|!=|!~)\s*(.*?)\s*", re.S)


class MatchOp(Enum):
    """The four matcher types of Prometheus / Alertmanager (pkg/labels MatchType)."""

    EQUAL = "="
    NOT_EQUAL = "!="
    REGEX = "=~"
    NOT_REGEX = "!~"


@dataclass(frozen=True, slots=True)
class Matcher:
    """One ``name op value`` condition on an alert's labels.

    A missing label reads as "" (Alertmanager does the same), so ``gpu!=""`` means "has a gpu
    label" and ``gpu=""`` means "has none".
    """

    name: str
    value: str
    op: MatchOp = MatchOp.EQUAL

    def __post_init__(self) -> None:
        if not _LABEL_NAME.fullmatch(self.name):
            raise ValueError(f"invalid label name {self.name!r} in matcher")
        if self.op in (MatchOp.REGEX, MatchOp.NOT_REGEX):
            _compile(self.value)

    def matches(self, labels: Mapping[str, str]) -> bool:
        actual = labels.get(self.name, "")
        if self.op is MatchOp.EQUAL:
            return actual == self.value
        if self.op is MatchOp.NOT_EQUAL:
            return actual != self.value
        # Regexes are RE2, anchored at both ends, as Alertmanager anchors them
        # ("^(?:" + re + ")$"): `gpu=~"1"` must not silence GPU 10 and 11.
        found = anchored(self.value)(actual)
        return found if self.op is MatchOp.REGEX else not found

    def matches_empty(self) -> bool:
        """Whether a positive matcher is satisfied by a missing label (silence.go matchesEmpty).

        Negative matchers count as not matching the empty string, as in Alertmanager.
        """
        if self.op in (MatchOp.NOT_EQUAL, MatchOp.NOT_REGEX):
            return False
        return self.matches({})

    def __str__(self) -> str:
        escaped = self.value.replace("\\", "\\\\").replace('"', '\\"')
        return f'{self.name}{self.op.value}"{escaped}"'


def _compile(pattern: str) -> Matches:
    return anchored(pattern)  # RegexError is a ValueError naming the pattern


def parse_matchers(text: str) -> list[Matcher]:
    """Alertmanager's ``ParseMatchers`` (pkg/labels/parse.go, its classic parser, as amtool's
    ``--matcher`` and the web UI use it): ``{a="b", c=~"d.*"}`` or ``a=b,c!=d``; commas inside
    quotes belong to the value. Agrees with its own test table
    (tests/alerts/data/alertmanager_parse_matchers.json)."""
    body = text.removeprefix("{").removesuffix("}")
    tokens: list[str] = []
    token: list[str] = []
    inside_quotes = escaped = False
    for char in body:
        if char == "," and not inside_quotes:
            tokens.append("".join(token))
            token = []
            continue
        if char == '"':
            if not escaped:
                inside_quotes = not inside_quotes
            else:
                escaped = False
        elif char == "\\":
            escaped = not escaped
        else:
            escaped = False
        token.append(char)
    if "".join(token).strip():
        tokens.append("".join(token).strip())
    return [parse_matcher(t) for t in tokens]


def parse_matcher(text: str) -> Matcher:
    """Alertmanager's ``ParseMatcher``: ``k=v``, ``k!=v``, ``k=~re``, ``k!~re``; the value may
    be double-quoted. Inside it ``\\n``, ``\\"`` and ``\\\\`` are escapes, any other backslash is
    literal, and an unescaped quote anywhere but at both ends is an error: a typo must not
    make a silence that quietly matches nothing."""
    found = _MATCHER.fullmatch(text)
    if found is None:
        raise ValueError(
            f"bad matcher format: {text} (expected NAME=VALUE, NAME!=VALUE, NAME=~REGEX or "
            "NAME!~REGEX)"
        )
    name, op, raw = found.groups()
    value = _unescape(raw)
    try:
        return Matcher(name, value, MatchOp(op))
    except ValueError as exc:
        raise ValueError(f"bad matcher {text!r}: {exc}") from None


def _unescape(raw: str) -> str:
    quoted = raw.startswith('"')
    body = raw[1:] if quoted else raw
    out: list[str] = []
    escaped = False
    for i, char in enumerate(body):
        if escaped:
            escaped = False
            out.append({"n": "\n", '"': '"', "\\": "\\"}.get(char, "\\" + char))
        elif char == "\\" and i < len(body) - 1:
            escaped = True
        elif char == '"':
            if not quoted or i < len(body) - 1:
                raise ValueError(f"matcher value contains unescaped double quote: {raw}")
            quoted = False
        else:
            out.append(char)
    if quoted:
        raise ValueError(f"matcher value contains unescaped double quote: {raw}")
    return "".join(out)


class SilenceState(Enum):
    """Alertmanager's silence states, for ``gpuwatch silence list``."""

    PENDING = "pending"  # starts in the future
    ACTIVE = "active"
    EXPIRED = "expired"


@dataclass(frozen=True, slots=True)
class Silence:
    id: str
    matchers: tuple[Matcher, ...]
    starts_at: datetime
    ends_at: datetime
    created_by: str
    comment: str

    def __post_init__(self) -> None:
        # The checks of silence.go validateSilence, so a bad silence is refused when it is made
        # instead of quietly muting nothing (or everything).
        if not self.id:
            raise ValueError("silence id missing")
        if not self.matchers:
            raise ValueError("a silence needs at least one matcher")
        if all(m.matches_empty() for m in self.matchers):
            # e.g. only `host=~".*"`: it would silence every alert, which is never what was meant.
            raise ValueError("at least one matcher must not match the empty string")
        if self.ends_at < self.starts_at:
            raise ValueError("a silence cannot end before it starts")

    @classmethod
    def starting(
        cls,
        id: str,
        matchers: Iterable[Matcher],
        now: datetime,
        duration: timedelta,
        created_by: str,
        comment: str,
    ) -> Silence:
        """A silence from ``now`` for ``duration`` (``silence add --duration 2h``)."""
        if duration <= timedelta(0):
            raise ValueError(f"silence duration must be positive, got {duration}")
        return cls(id, tuple(matchers), now, now + duration, created_by, comment)

    def state(self, now: datetime) -> SilenceState:
        if now < self.starts_at:
            return SilenceState.PENDING
        # The end instant itself still mutes, as on Alertmanager's muting path (silence.go:
        # expired only once EndsAt is before now).
        return SilenceState.ACTIVE if now <= self.ends_at else SilenceState.EXPIRED

    def active(self, now: datetime) -> bool:
        return self.state(now) is SilenceState.ACTIVE

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(m.matches(labels) for m in self.matchers)

    def expire(self, now: datetime) -> Silence:
        """This silence ended at ``now`` (``silence expire ID``), as Alertmanager's Expire
        (silence.go expire): a pending silence gets its start moved to ``now`` too, and an
        expired one comes back unchanged (the same object: expiring is idempotent, and history
        is never rewritten).
        """
        state = self.state(now)
        if state is SilenceState.EXPIRED:
            return self
        starts_at = now if state is SilenceState.PENDING else self.starts_at
        return replace(self, starts_at=starts_at, ends_at=now)


def silenced_by(
    labels: Mapping[str, str], silences: Iterable[Silence], now: datetime
) -> tuple[str, ...]:
    """Ids of the silences active at ``now`` that match ``labels``, in the order given."""
    return tuple(s.id for s in silences if s.active(now) and s.matches(labels))
