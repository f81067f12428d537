"""Regular expressions as Prometheus and Alertmanager read them: RE2, anchored at both ends.

A matcher's regex comes from the user (``silence add --match``, inhibition rules) and must mean
what it means to Alertmanager: RE2's syntax and semantics, not Python's. They differ in places
a user does reach: ``(?i)`` inside a group (``((?i)PRO).*``) is RE2 and an error to Python;
``\\d`` and ``\\w`` are ASCII to RE2 and Unicode to Python; POSIX classes (``[[:alpha:]]``)
and ``\\pL`` exist only in RE2; Python's ``$`` also matches before a final newline.

So a pattern goes to google-re2 (the RE2 library itself) unless it uses only the plain
subset in which both engines agree character for character: letters, digits, ``. * + ? | ( )``
and a few punctuation marks, no escapes, classes, bounds, anchors or flags. That subset
(``Gpu.*|Vram.*``, ``5..``, ``box-(a|b)``) covers the built-in rules and most silences, and
keeps RE2 (3 MB of a daemon's memory) unloaded until a pattern needs it;
tests/alerts/test_regex.py checks the subset against RE2 itself.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import cache
from typing import Any

# Characters that mean the same thing to both engines, with no escapes, classes, bounds,
# anchors or flags among them (each of those differs somewhere).
_PLAIN = re.compile(r"[A-Za-z0-9_\-.*+?|() :/=,@#%&!<>;'\"~]*")

# Within those: flags and groups with "(?", and Python 3.11's possessive quantifiers (an
# error to RE2).
_DIFFERS = re.compile(r"\(\?|[*+?]\+")

Matches = Callable[[str], bool]


class RegexError(ValueError):
    """A pattern RE2 refuses; the message is RE2's (or Python's, for the plain subset)."""


@cache
def anchored(pattern: str) -> Matches:
    """A predicate: does the whole string match ``pattern``? RegexError when it is invalid."""
    if _PLAIN.fullmatch(pattern) and not _DIFFERS.search(pattern):
        try:
            plain = re.compile(pattern)
        except re.error as exc:
            raise RegexError(f"invalid regular expression {pattern!r}: {exc}") from None
        return lambda text: plain.fullmatch(text) is not None
    compiled = _re2_compile(pattern)
    return lambda text: compiled.fullmatch(text) is not None


def _re2_compile(pattern: str) -> Any:
    re2 = _re2()
    options = re2.Options()
    options.log_errors = False  # RE2 would print its own line to stderr for a bad pattern
    try:
        return re2.compile(pattern, options)
    except re2.error as exc:
        reason = exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else exc
        raise RegexError(f"invalid regular expression {pattern!r}: {reason}") from None


@cache
def _re2() -> Any:
    import re2  # type: ignore[import-untyped]  # google-re2: only past the plain subset

    return re2
