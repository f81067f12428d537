"""Prometheus-style durations ("90s", "5m", "2h", "1h30m", "7d", "500ms"); numbers are seconds."""

from __future__ import annotations

import re

from collectors.base import GpuwatchError

_UNITS = {
    "ms": 0.001,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
    "d": 86400.0,
    "w": 604800.0,
    "y": 31536000.0,
}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w|y)")


class DurationError(GpuwatchError, ValueError):
    """Not a duration gpuwatch understands."""


def parse_duration(value: str | int | float) -> float:
    """Seconds in ``value``; raises DurationError naming the accepted forms."""
    if isinstance(value, bool):
        raise DurationError(f'expected a duration like "5m", got {value!r}')
    if isinstance(value, int | float):
        return float(value)
    text = value.strip()
    pos, total = 0, 0.0
    for match in _PART.finditer(text):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    if not text or pos != len(text):
        raise DurationError(f'expected a duration like "90s", "5m", "2h" or "1h30m", got {value!r}')
    return total
