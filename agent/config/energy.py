"""The ``[energy]`` section: what a GPU's joules mean at the facility, for the grid and in money.

    [energy]
    pue = 1.3                          # the facility's power usage effectiveness, >= 1; default 1
    grams_co2_per_kwh = 390            # grid carbon intensity: a number, or a CSV of hours
    usd_per_kwh = 0.12                 # what a kWh costs, shown beside the metered cost

``grams_co2_per_kwh`` as a string is the path of a CSV of hourly intensity (relative to the
configuration file's folder), read and checked whole when the configuration is loaded, so
`check-config` names a bad row by file and line::

    hour,grams_co2_per_kwh
    2026-11-01T00:00:00Z,412.5
    2026-11-01T01:00:00+01:00,398

Each row covers the hour that starts at its ISO 8601 timestamp, which must carry ``Z`` or a UTC
offset (a naive time could be any zone's). Other columns are ignored, so an export from
Electricity Maps, WattTime or a grid operator only needs those two headers. An hour no row
covers, or a row with an empty value, has an unknown intensity: its CO2 is unknown, never 0 and
never the neighbouring hour's (docs/configuration.md, "Energy and carbon").
"""

from __future__ import annotations

import csv
import math
from bisect import bisect_right
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from agent.config.rates import MAX_KWH
from agent.config.reader import Reader, shown

KEY = "energy.grams_co2_per_kwh"
HOUR = 3600.0
MAX_PUE = 10.0  # the worst facilities measured run near 3; past 10 it is a typo
# The dirtiest grids average about 1,000 g/kWh (lignite); past 2,000 it is a typo or kg per MWh.
MAX_GRAMS = 2000.0
# No source of electricity emits under 1 g per kWh over its life cycle: a value between 0 and 1
# is kilograms. 0 itself stays allowed (a supply contracted as carbon-free, market-based).
_KG_BELOW = 1.0
# A year of hours with a few columns beside them is under 2 MiB: past 32 MiB the file is
# something else, and reading it would cost the daemon's memory before saying so.
MAX_CSV_BYTES = 32 * 1024 * 1024
MAX_HOURS = 100_000  # eleven years of hours: about 6 MiB held in memory
MAX_ROW_PROBLEMS = 10  # a file in the wrong unit says so in a few lines, not one per row
HOUR_COLUMN, GRAMS_COLUMN = "hour", "grams_co2_per_kwh"


@dataclass(frozen=True, slots=True)
class Intensity:
    """Grid carbon intensity in grams of CO2 per kWh: one constant, or a table of hours.

    The table is two parallel tuples, sorted by start (epoch seconds, UTC); each entry covers
    [start, start + 1 h). Tuples keep the value immutable and compact enough for years of hours.
    """

    constant: float | None = None
    starts: tuple[float, ...] = ()
    grams: tuple[float, ...] = ()
    source: str | None = None  # the CSV it came from; None for a constant

    def grams_per_kwh(self, at: datetime) -> float | None:
        """The intensity at instant ``at`` (timezone-aware); None where the table has no hour
        covering it."""
        if at.tzinfo is None:
            # A naive datetime's timestamp() is the local zone's: a silent hour shift.
            raise ValueError(f"intensity asked for a naive datetime {at!r}; pass an aware one")
        if self.constant is not None:
            return self.constant
        t = at.timestamp()
        i = bisect_right(self.starts, t) - 1
        if i < 0 or t >= self.starts[i] + HOUR:
            return None
        return self.grams[i]


@dataclass(frozen=True, slots=True)
class EnergyConfig:
    # Facility energy / IT energy: cooling, power conversion and lighting on top of the GPUs'
    # own joules. 1.0 counts the GPUs' energy alone.
    pue: float = 1.0
    intensity: Intensity | None = None  # None: not configured, CO2 is unknown
    usd_per_kwh: Decimal | None = None  # None: energy's cost is not shown


def parse_energy(r: Reader, top: dict[str, Any], config_dir: Path) -> EnergyConfig:
    """The ``[energy]`` section; a CSV path is read relative to ``config_dir``."""
    t = r.sub(top, "energy", {"pue", "grams_co2_per_kwh", "usd_per_kwh"})
    pue = r.number(t, "energy.pue", 1.0, positive=True, minimum=1.0, maximum=MAX_PUE)
    return EnergyConfig(
        pue=pue,
        intensity=_intensity(r, t, config_dir),
        usd_per_kwh=r.money(t, "energy.usd_per_kwh", maximum=MAX_KWH),
    )


def _intensity(r: Reader, t: dict[str, Any], config_dir: Path) -> Intensity | None:
    value = t.get(KEY)
    if value is None:
        return None
    if isinstance(value, str):
        return _table(r, value, config_dir)
    grams = r.number(t, KEY, -1.0, positive=False, minimum=0.0, maximum=MAX_GRAMS, unit=" g")
    if grams < 0:  # refused: the reader said why
        return None
    problem = _grams_problem(grams)
    if problem is not None:
        r.problem(KEY, problem)
        return None
    return Intensity(constant=grams)


def _grams_problem(grams: float) -> str | None:
    if 0 < grams < _KG_BELOW:
        return (f"{grams:g} g/kWh is below any source of electricity; "
                f"did you mean {grams * 1000:g} (grams, not kilograms)?")  # fmt: skip
    return None


def _table(r: Reader, name: str, config_dir: Path) -> Intensity | None:
    """The CSV at ``name``; every bad row is a problem naming file:line, up to a few."""
    if not name.strip() or "\0" in name:
        r.problem(KEY, f"expected a number or the path of a CSV file, got {shown(name)}")
        return None
    path = config_dir / Path(name).expanduser()
    text = _read(r, path, name)
    if text is None:
        return None
    rows = _Rows(r, str(path))
    reader = csv.reader(text.splitlines(keepends=True))
    try:
        header = next(reader, None)
        columns = rows.columns(header)
        if columns is None:
            return None
        for fields in reader:
            rows.add(reader.line_num, fields, *columns)
    except csv.Error as exc:
        rows.bad(reader.line_num, f"not CSV ({exc})")
    return rows.intensity()


def _read(r: Reader, path: Path, name: str) -> str | None:
    try:
        # Read capped: a path such as /dev/zero must not fill the memory.
        with path.open("rb") as fh:
            raw = fh.read(MAX_CSV_BYTES + 1)
    except OSError as exc:
        hint = ""
        if _is_number(name):
            hint = f" (a number is written without quotes: grams_co2_per_kwh = {name.strip()})"
        r.problem(KEY, f"cannot read {path}: {exc.strerror or exc}{hint}")
        return None
    if len(raw) > MAX_CSV_BYTES:
        r.problem(KEY, f"{path} is larger than 32 MiB: not a table of hourly intensity")
        return None
    if b"\0" in raw:
        where = raw.index(b"\0")
        r.problem(KEY, f"{path} is a binary file (a NUL byte at byte {where}), not CSV")
        return None
    try:
        return raw.decode("utf-8-sig")  # spreadsheets save UTF-8 with a byte-order mark
    except UnicodeDecodeError as exc:
        r.problem(KEY, f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start})")
        return None


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


class _Rows:
    """The hours read so far, and the problems of the rows that are not one."""

    def __init__(self, r: Reader, source: str) -> None:
        self.r = r
        self.source = source
        self.hours: list[tuple[float, float, int]] = []  # (start, grams, line)
        self.problems = 0

    def bad(self, line: int, message: str) -> None:
        self.problems += 1
        if self.problems <= MAX_ROW_PROBLEMS:
            self.r.problem(KEY, f"{self.source}:{line}: {message}")

    def columns(self, header: list[str] | None) -> tuple[int, int] | None:
        names = [h.strip().lower() for h in header or []]
        if HOUR_COLUMN in names and GRAMS_COLUMN in names:
            return names.index(HOUR_COLUMN), names.index(GRAMS_COLUMN)
        self.r.problem(KEY, f"{self.source}:1: expected a header naming the columns "
                            f"{HOUR_COLUMN!r} and {GRAMS_COLUMN!r}, got "
                            f"{shown(','.join(header or []))}")  # fmt: skip
        return None

    def add(self, line: int, fields: list[str], hour_at: int, grams_at: int) -> None:
        if not any(f.strip() for f in fields):
            return  # a blank line (a trailing one, most often)
        if len(fields) <= max(hour_at, grams_at):
            self.bad(line, f"expected {max(hour_at, grams_at) + 1} fields, got {len(fields)}")
            return
        start = self._start(line, fields[hour_at].strip())
        grams = self._grams(line, fields[grams_at].strip())
        if start is not None and grams is not None:
            if len(self.hours) >= MAX_HOURS:
                self.bad(line, f"more than {MAX_HOURS:,} hours: keep the years reports need")
                return
            self.hours.append((start, grams, line))

    def _start(self, line: int, text: str) -> float | None:
        try:
            at = datetime.fromisoformat(text)  # Python 3.11 reads "Z" and offsets
        except ValueError:
            self.bad(line, f"{HOUR_COLUMN} {shown(text)} is not an ISO 8601 time such as "
                           "2026-11-01T00:00:00Z")  # fmt: skip
            return None
        if at.tzinfo is None:
            self.bad(line, f"{HOUR_COLUMN} {shown(text)} has no UTC offset: write it as "
                           f"{text}Z (UTC) or with its offset, e.g. +01:00")  # fmt: skip
            return None
        return at.timestamp()

    def _grams(self, line: int, text: str) -> float | None:
        if not text:
            return None  # an hour the source left empty: unknown, as a missing row
        try:
            grams = float(text)
        except ValueError:
            self.bad(line, f"{GRAMS_COLUMN} {shown(text)} is not a number")
            return None
        if not math.isfinite(grams) or not 0 <= grams <= MAX_GRAMS:
            self.bad(line, f"{GRAMS_COLUMN} must be from 0 to {MAX_GRAMS:g} g, got {shown(text)}")
            return None
        problem = _grams_problem(grams)
        if problem is not None:
            self.bad(line, problem)
            return None
        return grams

    def intensity(self) -> Intensity | None:
        self.hours.sort()
        for (start, _, line), (after, _, later) in zip(self.hours, self.hours[1:], strict=False):
            if after < start + HOUR:
                # Sub-hourly or repeated rows: which value holds would be a guess.
                self.bad(max(line, later), f"its hour overlaps the hour of line "
                                           f"{min(line, later)}")  # fmt: skip
        if self.problems > MAX_ROW_PROBLEMS:
            more = self.problems - MAX_ROW_PROBLEMS
            self.r.problem(KEY, f"{self.source}: and {more:,} more bad row(s)")
        if not self.hours and not self.problems:
            self.r.problem(KEY, f"{self.source} has no hour with a value")
        if self.problems or not self.hours:
            return None
        return Intensity(
            starts=tuple(h[0] for h in self.hours),
            grams=tuple(h[1] for h in self.hours),
            source=self.source,
        )
