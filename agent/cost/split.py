"""Which rollup rows answer a window of time: per host, day rows for its whole UTC days, hour
rows for the other whole hours, minute rows at the edges (:class:`Split`), and the same as
primary-key ranges for a set of series (:func:`series_ranges`). Every month-long reader (the
cost summary, the report, the budget) sums the rows these select, never raw samples.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ARRAY, Integer, Table, any_, bindparam, case, literal, or_, select

from migrations.schema import UtcInstant, rollup_state, rollups

MINUTE, HOUR, DAY = 60, 3600, 86400


@dataclass(frozen=True, slots=True)
class Split:
    """Which rows answer a window: per host, day rows for the whole UTC days its day rollup
    covers, hour rows for the other whole hours its hour rollup covers, minute rows for the
    rest (the window's partial first and last hours, and what is newer than that host's hour
    watermark). The database sums those rows, so a month costs a few aggregate rows per GPU to
    read: about 30 day rows, not ~720 hour rows (or 43,200 minute rows)."""

    start: datetime
    end: datetime
    first_hour: datetime  # the first whole hour in the window
    last_hour_end: datetime  # the end of the last whole hour in the window
    # Every host that has rolled anything up -> the end of its hour rollup (rollup_state
    # "hour"), None before its first hour. Only the rollup job writes rollup rows, and it
    # writes rollup_state as it does, so no other host has rows to read.
    hour_until: Mapping[str, datetime | None]
    first_day: datetime  # the first whole UTC day in the window
    last_day_end: datetime  # the end of the last whole UTC day in the window
    # Host -> the end of its day rollup (rollup_state "day").
    day_until: Mapping[str, datetime]
    # PostgreSQL: a list of ids is one array parameter. An IN list of a fleet's series is
    # thousands of parameters per range, and parsing those cost the report more than the sums.
    arrays: bool = False

    @classmethod
    def read(cls, conn: Any, start: datetime, end: datetime) -> Split:
        hours: dict[str, datetime | None] = {}
        day_marks: dict[str, datetime] = {}
        for host, job, watermark in conn.execute(
            select(rollup_state.c.host, rollup_state.c.job, rollup_state.c.watermark)
        ):
            hours[host] = watermark if job == "hour" else hours.get(host)
            if job == "day":
                day_marks[host] = watermark
        return cls(
            start, end, _ceil(start, HOUR), _floor(end, HOUR), hours,
            _ceil(start, DAY), _floor(end, DAY), day_marks, conn.dialect.name == "postgresql",
        )  # fmt: skip

    def until(self, host: str | None) -> datetime:
        """Where this host's hour rows stop and its minute rows take over."""
        covered = _floor(self.hour_until.get(host) or self.first_hour, HOUR) if host else None
        return max(self.first_hour, min(covered or self.first_hour, self.last_hour_end))

    def day_end(self, host: str | None) -> datetime:
        """Where this host's day rows stop and its hour rows take over again; ``first_day``
        when its day rows answer none of the window."""
        mark = self.day_until.get(host) if host else None
        if mark is None:
            return self.first_day
        return max(self.first_day, min(_floor(mark, DAY), self.last_day_end, self.until(host)))

    def rows(self, table: Any, host_column: Any) -> Any:
        """The rows that answer the window, exactly: each host's day rows before its
        ``day_end``, hour rows of the other hours before its ``until`` and minute rows outside
        the hours those cover, so nothing counts twice and the database can sum them. Each
        part is a (resolution, start) index range with the per-host edges as filters: a
        condition OR-ed over hosts would make the planner scan every row of every host."""
        until = self.per_host(host_column, self.until)
        start = table.c.start
        tail = (table.c.resolution == MINUTE) & (start >= self._tail_low()) & (start <= self._last)
        minutes = (self._head(table), tail & (start >= until))
        if not self._uses_days():
            hours = (
                (table.c.resolution == HOUR)
                & (start >= self.first_hour)
                & (start < self.last_hour_end)
            )
            return or_(hours & (start < until), *minutes)
        day_end = self.per_host(host_column, self.day_end)
        days = (table.c.resolution == DAY) & (start >= self.first_day) & (start < day_end)
        head_hours = (
            (table.c.resolution == HOUR)
            & (start >= self.first_hour)
            & (start < self.first_day)
            & (start < until)
        )
        tail_hours = (
            (table.c.resolution == HOUR)
            & (start >= self._hour_tail_low())
            & (start < self.last_hour_end)
            & (start >= day_end)
            & (start < until)
        )
        return or_(days & (start < self.last_day_end), head_hours, tail_hours, *minutes)

    def ranges(self, table: Any, host: str) -> tuple[Any, ...]:
        """The rows of ``rows`` for one host, as plain (resolution, start) ranges: day rows up
        to its ``day_end``, hour rows around them up to its ``until``, the head minutes, and
        the minutes from its ``until`` on. For lookups by series id, each is a range of the
        rollups' primary key (series_id, resolution, start), so only the wanted series' rows
        are read."""
        until, day_end, start = self.until(host), self.day_end(host), table.c.start
        head, tail = (
            self._head(table),
            (table.c.resolution == MINUTE) & (start >= until) & (start <= self._last),
        )
        if day_end == self.first_day:  # no day rows of this host answer the window
            hours = (table.c.resolution == HOUR) & (start >= self.first_hour) & (start < until)
            return hours, head, tail
        days = (table.c.resolution == DAY) & (start >= self.first_day) & (start < day_end)
        head_hours = (
            (table.c.resolution == HOUR) & (start >= self.first_hour) & (start < self.first_day)
        )
        tail_hours = (table.c.resolution == HOUR) & (start >= day_end) & (start < until)
        return days, head_hours, tail_hours, head, tail

    def edges(self, host: str) -> tuple[datetime, datetime]:
        """What decides ``ranges`` for a host: hosts with equal edges share their ranges."""
        return self.until(host), self.day_end(host)

    @property
    def _last(self) -> datetime:
        """The start of the last minute row inside the window."""
        return self.end - timedelta(seconds=MINUTE)

    def _head(self, table: Any) -> Any:
        # Bounded by the window's end too: a window inside one hour has no whole hour.
        start = table.c.start
        return (
            (table.c.resolution == MINUTE)
            & (start >= self.start)
            & (start < self.first_hour)
            & (start <= self._last)
        )

    def _uses_days(self) -> bool:
        return any(self.day_end(host) > self.first_day for host in self.day_until)

    def per_host(self, host_column: Any, edge: Callable[[str | None], datetime]) -> Any:
        """Each row's host's ``edge``: one branch per distinct value (hosts that keep up share
        their watermarks), each an IN list that PostgreSQL hashes. One branch per host made
        every row walk the fleet's hosts: a fleet-wide window cost hosts x rows."""
        default = edge(None)
        groups: dict[datetime, list[str]] = defaultdict(list)
        for host in sorted(self.hour_until):
            at = edge(host)
            if at != default:
                groups[at].append(host)
        if not groups:
            return literal(default, UtcInstant())
        whens = [
            (host_column.in_(hosts), literal(at, UtcInstant()))
            for at, hosts in sorted(groups.items())
        ]
        return case(*whens, else_=literal(default, UtcInstant()))

    def _tail_low(self) -> datetime:
        # Hosts outside rollup_state have no rollup rows: they need not widen the range.
        return min([self.until(h) for h in self.hour_until], default=self.last_hour_end)

    def _hour_tail_low(self) -> datetime:
        # The hour rows after the day rows start at the earliest host's day_end: where every
        # host keeps up, the last day or so of hour rows, not the window's.
        return min([self.day_end(h) for h in self.hour_until], default=self.first_day)


def _floor(at: datetime, size: int) -> datetime:
    return at.replace(hour=0 if size == DAY else at.hour, minute=0, second=0, microsecond=0)


def _ceil(at: datetime, size: int) -> datetime:
    floor = _floor(at, size)
    return floor if floor == at else floor + timedelta(seconds=size)


def series_ranges(split: Split, hosts: Mapping[int, str], table: Table = rollups) -> list[Any]:
    """Conditions on ``table`` (``rollups`` or ``histogram_rollups``) that together select,
    once each, the rows answering the split's window for the series ``hosts`` names (series
    id -> its host): per group of hosts sharing their watermarks, its ranges over their ids.
    Each is a range of the primary key (series_id, resolution, start): the cost follows the
    series asked for, not every series of the fleet (a vLLM target alone stores hundreds),
    which a scan of the (resolution, start) index joined to ``series`` would read."""
    ids: dict[tuple[datetime, datetime], list[int]] = defaultdict(list)
    host_of: dict[tuple[datetime, datetime], str] = {}
    for sid, host in hosts.items():
        edges = split.edges(host)
        ids[edges].append(sid)
        host_of[edges] = host
    return [
        among(table.c.series_id, group, split.arrays) & condition
        for edges, group in sorted(ids.items())
        for condition in split.ranges(table, host_of[edges])
    ]


def among(column: Any, ids: Iterable[int], arrays: bool) -> Any:
    if arrays:
        return column == any_(bindparam(None, sorted(ids), type_=ARRAY(Integer)))
    return column.in_(sorted(ids))
