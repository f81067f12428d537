"""The one place where report figures are rounded and spelled, shared by every format.

A figure is a :class:`Cell`: a value and its :class:`Kind`. :func:`rounded` applies the kind's
rounding (half up, on the decimal value, never on a binary float), and the three spellings start
from that rounded value, so JSON, CSV and the human formats cannot disagree:

- :func:`json_value`: what ``--format json`` holds (money as a fixed-decimal string);
- :func:`plain`: what CSV holds (no thousands separators, no units, "" for unknown);
- :func:`text`: what people read (table, markdown, HTML: "$1,234.56", "45.67%", "n/a").
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime
from decimal import ROUND_HALF_UP, Decimal
from enum import Enum
from typing import Any

from foundation.printable import printable

GIB = 2**30


class Kind(Enum):
    """What a figure is, which fixes its rounding and its spellings."""

    TEXT = "text"  # a string from the data (model, host, summary)
    LABEL = "label"  # a (json_key, human label) pair: the key in CSV, the label for people
    USD = "usd"  # Decimal dollars, to the cent
    USD_PER_M = "usd_per_m"  # Decimal dollars per million tokens, to 1/100 of a cent
    COUNT = "count"  # tokens, requests, alert counts: whole numbers
    HOURS = "hours"  # GPU hours, to 1/100 h (36 s)
    RATIO = "ratio"  # 0-1, to 4 decimals (shown to people as a percentage with 2 decimals)
    CHANGE = "change"  # a relative change (0.1234 = +12.34 %), with a trend arrow for people
    SECONDS = "seconds"  # latency, to the millisecond
    DURATION = "duration"  # how long something lasted: whole seconds, "2h 05m" for people
    BYTES = "bytes"  # whole bytes, GiB with one decimal for people
    MEASURE = "measure"  # a physical quantity in the unit its key names (kWh, J, g): 3 decimals
    TIME = "time"  # an aware datetime, already in the report's timezone
    DAY = "day"  # a calendar date in the report's timezone


_STEPS: dict[Kind, Decimal] = {
    Kind.USD: Decimal("0.01"),
    Kind.USD_PER_M: Decimal("0.0001"),
    Kind.COUNT: Decimal("1"),
    Kind.HOURS: Decimal("0.01"),
    Kind.RATIO: Decimal("0.0001"),
    Kind.CHANGE: Decimal("0.0001"),
    Kind.SECONDS: Decimal("0.001"),
    Kind.DURATION: Decimal("1"),
    Kind.BYTES: Decimal("1"),
    Kind.MEASURE: Decimal("0.001"),
}


@dataclass(frozen=True, slots=True)
class Cell:
    """One figure; ``missing`` is what people read when the value is unknown (None)."""

    kind: Kind
    value: Any
    missing: str = "n/a"


def to_decimal(value: float | int | Decimal) -> Decimal | None:
    """A float through its shortest repr (0.1 stays 0.1, not 0.1000000000000000055...);
    NaN and infinities are unknown, like None."""
    if isinstance(value, Decimal):
        return value if value.is_finite() else None
    if isinstance(value, int):
        return Decimal(value)
    if not math.isfinite(value):
        return None
    return Decimal(repr(float(value)))


def rounded(kind: Kind, value: Any) -> Any:
    """The value as every format shows it: numbers quantized half up, others unchanged."""
    if value is None:
        return None
    step = _STEPS.get(kind)
    if step is None:
        return value
    exact = to_decimal(value)
    if exact is None:
        return None
    result = exact.quantize(step, rounding=ROUND_HALF_UP)
    return result if result else abs(result)  # -0.001 is "0.00", not "-0.00"


def json_value(cell: Cell) -> Any:
    """Money as a fixed-decimal string (exact for any reader), counts and bytes as integers,
    other measures as numbers with the kind's decimals, times as ISO 8601 with offset."""
    value = rounded(cell.kind, cell.value)
    if value is None:
        return None
    if cell.kind in (Kind.USD, Kind.USD_PER_M):
        return str(value)
    if cell.kind in (Kind.COUNT, Kind.DURATION, Kind.BYTES):
        return int(value)
    if cell.kind in (Kind.HOURS, Kind.RATIO, Kind.CHANGE, Kind.SECONDS, Kind.MEASURE):
        # float(Decimal("12.34")) prints back as 12.34: the shortest repr round-trips.
        return float(value)
    if cell.kind is Kind.LABEL:
        return str(value[0])
    if isinstance(value, datetime):
        return value.isoformat(timespec="seconds")
    if isinstance(value, date):
        return value.isoformat()
    return value


def plain(cell: Cell) -> str:
    """The CSV spelling: JSON's figure without quotes; "" for unknown."""
    value = json_value(cell)
    if value is None:
        return ""
    if cell.kind is Kind.TEXT:
        return printable(str(value), keep="\n\t")
    if isinstance(value, float):
        # Through Decimal so that 1e-05 reads 0.0000 as the other formats do, never exponent form.
        return format(rounded(cell.kind, cell.value), "f")
    return str(value)


def text(cell: Cell) -> str:
    """The spelling people read in the table, markdown and HTML."""
    value = rounded(cell.kind, cell.value)
    if value is None:
        return cell.missing
    if cell.kind is Kind.TEXT:
        # Strings from the data (scraped model names) may hold NUL or a bidi override; every
        # human format shows them escaped (JSON keeps them, in JSON's own escapes).
        return printable(str(value), keep="\n\t")
    speller = _TEXT.get(cell.kind)
    return speller(value) if speller else str(value)


def _usd(value: Decimal, places: int) -> str:
    sign = "-" if value < 0 else ""
    return f"{sign}${abs(value):,.{places}f}"


def _change(value: Decimal) -> str:
    arrow = "↑" if value > 0 else "↓" if value < 0 else "→"
    return f"{arrow} {value * 100:+.2f}%"


def duration_text(seconds: int | Decimal) -> str:
    """ "45s", "12m 05s", "3h 20m", "2d 04h": two units are enough to read a length."""
    total = int(seconds)
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours:02d}h"
    if hours:
        return f"{hours}h {minutes:02d}m"
    if minutes:
        return f"{minutes}m {secs:02d}s"
    return f"{secs}s"


_TEXT: dict[Kind, Callable[[Any], str]] = {
    Kind.LABEL: lambda v: str(v[1]),
    Kind.USD: lambda v: _usd(v, 2),
    Kind.USD_PER_M: lambda v: _usd(v, 4),
    Kind.COUNT: lambda v: f"{v:,}",
    Kind.HOURS: lambda v: f"{v:,.2f}",
    Kind.RATIO: lambda v: f"{v * 100:.2f}%",
    Kind.CHANGE: _change,
    Kind.SECONDS: lambda v: f"{v:.3f}",
    Kind.MEASURE: lambda v: f"{v:,.3f}",
    Kind.DURATION: duration_text,
    Kind.BYTES: lambda v: f"{(v / GIB).quantize(Decimal('0.1'), ROUND_HALF_UP):,} GiB",
    Kind.TIME: lambda v: v.strftime("%Y-%m-%d %H:%M"),
    Kind.DAY: lambda v: v.isoformat(),
}


def change_ratio(current: Decimal | None, previous: Decimal | None) -> Decimal | None:
    """current / previous - 1 on the exact figures; unknown without a positive previous."""
    if current is None or previous is None or previous <= 0:
        return None
    return current / previous - 1
