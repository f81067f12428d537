"""Day rows in a report whose local days are not UTC days.

Day rows are UTC days (:mod:`agent.storage.buckets`). In a zone with an offset, a UTC day
belongs to two local days: most of its hours to one, the rest to its neighbour. The report
still reads the day row, counted in the local day that holds the UTC day's noon, and moves the
few hours that belong to the neighbour with two hour-row reads: each such hour added to its own
local day and taken away from the day row's. Berlin moves one hour a day (23:00 UTC), New York
five (00:00-05:00 UTC); a month of a 1,024-GPU fleet is then ~30 day rows and ~30-150 hour rows
per GPU, where reading every hour row was 720. An hour counts in the local day its start is in,
as without day rows (in a zone whose offset is not whole hours, the half hour around midnight
goes with its hour).
"""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta

from agent.cost.split import Split

DAY, HOUR = timedelta(days=1), timedelta(hours=1)
NOON = timedelta(hours=12)

Range = tuple[datetime, datetime]  # [start, end)


@dataclass(frozen=True, slots=True)
class LocalDays:
    """How a window's rows map to the report's local days (``day_starts``: each local day's
    start, the first at the window's start)."""

    day_starts: tuple[datetime, ...]
    # What a day row's start is bucketed by: its noon's local day.
    row_bounds: tuple[datetime, ...]
    # Days between an hour's local day and its day row's (+1: the next day) -> the hour rows,
    # as ranges of their starts, within the window's whole UTC days.
    moved: Mapping[int, tuple[Range, ...]]

    @classmethod
    def of(cls, day_starts: Sequence[datetime], split: Split) -> LocalDays:
        starts = tuple(day_starts)
        if len(starts) < 2 or all(at.astimezone(UTC).time() == time(0) for at in starts[1:]):
            return cls(starts, starts, {})  # one day, or local days that are UTC days
        moved: dict[int, list[datetime]] = defaultdict(list)
        day = split.first_day
        while day < split.last_day_end:
            home = _index(starts, day + NOON)
            for hour in (day + HOUR * k for k in range(24)):
                if (delta := _index(starts, hour) - home) != 0:
                    moved[delta].append(hour)
            day += DAY
        return cls(
            starts,
            tuple(at - NOON for at in starts),
            {delta: _ranges(hours) for delta, hours in sorted(moved.items())},
        )

    @property
    def aligned(self) -> bool:
        """Day rows fall in one local day each: nothing to move."""
        return self.row_bounds == self.day_starts


def _index(starts: Sequence[datetime], at: datetime) -> int:
    """The local day ``at`` falls in, as the database's ``width_bucket`` counts it."""
    return bisect_right(starts, at, lo=1) - 1


def _ranges(hours: Sequence[datetime]) -> tuple[Range, ...]:
    out: list[list[datetime]] = []
    for hour in hours:  # ascending
        if out and out[-1][1] == hour:
            out[-1][1] = hour + HOUR
        else:
            out.append([hour, hour + HOUR])
    return tuple((a, b) for a, b in out)
