"""The weekly digests' values as text (agent.reporting.digest, team_digest, digest_serving):
percentages, durations, token counts, sparklines and names escaped for mrkdwn and cut to fit."""

from __future__ import annotations

from collections.abc import Sequence
from decimal import ROUND_HALF_UP, Decimal

from alerts.mrkdwn import escape

NAME_LIMIT = 80  # escaped characters of a model, host, GPU or rule name
SPARKS = "▁▂▃▄▅▆▇█"


def sparkline(values: Sequence[Decimal | float | None]) -> str:
    """One bar per value, scaled from the lowest (▁) to the highest (█), halves rounded up; a
    gap (None) is a space, and values that are all equal are a flat middle line."""
    # Decimal, so that a value exactly halfway between two bars rounds the same every time.
    exact = [None if v is None else Decimal(str(v)) for v in values]
    known = [v for v in exact if v is not None]
    if not known:
        return " " * len(values)
    low, high = min(known), max(known)

    def bar(value: Decimal | None) -> str:
        if value is None:
            return " "
        if high == low:
            return SPARKS[3]
        step = (value - low) / (high - low) * (len(SPARKS) - 1)
        return SPARKS[int(step.to_integral_value(ROUND_HALF_UP))]

    return "".join(bar(v) for v in exact)


def percent_change(current: Decimal, before: Decimal | None) -> str | None:
    """ "+12.3%" / "-5.0%" from ``before`` to ``current``; None without a base to compare to."""
    if before is None or before == 0:
        return None
    change = ((current - before) / before * 100).quantize(Decimal("0.1"), ROUND_HALF_UP)
    if change == 0:
        change = abs(change)  # no "-0.0%"
    return f"{change:+}%"


def percent(ratio: float) -> str:
    return f"{ratio * 100:.1f}%"


def seconds(value: float | None) -> str:
    """ "850 ms", "1.24 s", "n/a" (no observations)."""
    if value is None:
        return "n/a"
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:,.2f} s"


def tokens(count: float) -> str:
    """ "1.23B", "456.7M", "12.3k", "950"."""
    for size, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if count >= size:
            return f"{count / size:,.{2 if suffix == 'B' else 1}f}{suffix}"
    return f"{count:.0f}"


def fit(raw: str, limit: int) -> str:
    """``raw`` escaped for mrkdwn in at most ``limit`` characters, cut with "…" between whole
    characters so no entity ("&amp;") is split."""
    text = escape(raw)
    if len(text) <= limit:
        return text
    out: list[str] = []
    size = 0
    for char in raw:
        piece = escape(char)
        if size + len(piece) > limit - 1:
            break
        out.append(piece)
        size += len(piece)
    return "".join(out) + "…"
