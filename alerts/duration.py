"""The one duration grammar of gpuwatch: Prometheus' (``model.ParseDuration``).

Every duration a user writes (a config key, a command-line flag, a rule's ``for``) goes through
``parse_duration``, so one string means one thing everywhere, and the same thing as in the
Prometheus rule files and Alertmanager configs users copy from: integer amounts, units ``ms s
m h d w y`` from largest to smallest, each at most once; "0" alone is allowed. "1.5h", "5m5m",
"1m1h", "" and a bare "5" are refused, as Prometheus refuses them.
"""

from __future__ import annotations

import re

from foundation.errors import GpuwatchError

# Largest first: the order the grammar demands and the one ``format_duration`` writes.
_UNIT_SECONDS = {
    "y": 31536000.0,
    "w": 604800.0,
    "d": 86400.0,
    "h": 3600.0,
    "m": 60.0,
    "s": 1.0,
    "ms": 0.001,
}
# [0-9], not \d: \d also matches other scripts' digits, which Prometheus does not read.
_DURATION = re.compile("".join(f"(?:(?P<{u}>[0-9]+){u})?" for u in _UNIT_SECONDS))
# Prometheus keeps a duration in a Go time.Duration (int64 nanoseconds): about 292 years.
_MAX_MILLIS = (2**63 - 1) // 1_000_000
_FORMS = '"90s", "5m", "2h" or "1h30m" (integers, units ms s m h d w y, largest first)'


class DurationError(GpuwatchError, ValueError):
    """Not a duration in Prometheus' grammar (or outside its range)."""


def parse_duration(value: object) -> float:
    """Seconds in a Prometheus duration ("5m", "1h30m", "500ms", "0").

    Anything else, a non-string included, raises DurationError naming the value and the
    accepted forms; callers that allow plain numbers as seconds check for them first.
    """
    if isinstance(value, str) and value == "0":
        return 0.0
    match = _DURATION.fullmatch(value) if isinstance(value, str) else None
    if match is None or not any(match.groupdict().values()):
        raise DurationError(f"expected a duration like {_FORMS}, got {value!r}")
    millis = sum(int(n) * round(_UNIT_SECONDS[u] * 1000) for u, n in match.groupdict().items() if n)
    if millis > _MAX_MILLIS:
        raise DurationError(f"expected a duration of at most 292y, got {value!r}")
    return millis / 1000


def format_duration(seconds: float) -> str:
    """The shortest Prometheus duration for ``seconds`` (for messages): 5400 -> "1h30m"."""
    millis = round(seconds * 1000)
    if millis == 0:
        return "0s"
    parts = []
    for unit, size in _UNIT_SECONDS.items():
        count, millis = divmod(millis, round(size * 1000))
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)
