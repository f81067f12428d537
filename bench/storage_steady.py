"""A box's steady-state database size, extrapolated per table from two measurements.

Between a measurement ``a`` taken after warm-up and the last one ``b``, each table grew by some
bytes and rows. At steady state a table holds what it gains over its retention: its growth in
bytes per day times the retention days of its class, plus the part of its size that does not
grow with time (its size at ``b`` less the growth rate times the whole run: label text, a head
of samples not yet packed, pages kept for reuse). A table whose rows did not grow from ``a`` to
``b`` (the head of raw samples, emptied of each packed hour) is bounded: counted as measured.
A table with a ``resolution`` column splits
its growth between the per-minute and the per-hour retention by the rows each gained.

The bytes come from the growth, not from a bytes-per-row figure times rows, so a layout that
packs samples into chunks (a few large rows) is extrapolated as truly as one row per sample.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass

from agent.config.settings import RetentionConfig
from bench.storage_sizes import FIXED, HOUR, MINUTE, RAW, Sizes, TableSize, classify, group

DAY = 86400.0


@dataclass(frozen=True)
class Retention:
    """Days each class is kept, from the config (defaults unless a file says otherwise)."""

    raw: float
    minute: float
    hour: float

    @classmethod
    def of(cls, config: RetentionConfig) -> Retention:
        return cls(config.raw_seconds / DAY, config.minute_seconds / DAY, config.hour_seconds / DAY)

    def days(self, kind: str) -> float:
        return {RAW: self.raw, MINUTE: self.minute, HOUR: self.hour}[kind]


@dataclass(frozen=True)
class Projection:
    table: str
    group: str
    kinds: str  # the retention classes of its rows: "raw", "minute+hour", "fixed"...
    rows: int
    bytes: int
    bytes_per_row: float
    rows_per_day: float
    bytes_per_day: float
    steady_bytes: float
    note: str = ""


def project(
    a: Sizes, b: Sizes, span_s: float, elapsed_s: float, keep: Retention
) -> list[Projection]:
    """Per table, from measurement ``a`` to ``b`` (``span_s`` apart, ``b`` at ``elapsed_s``
    after the first tick)."""
    return [
        _project(a.tables.get(name), t, span_s, elapsed_s, keep) for name, t in b.tables.items()
    ]


def _project(
    a: TableSize | None, b: TableSize, span_s: float, elapsed_s: float, keep: Retention
) -> Projection:
    a_rows, a_bytes = (a.rows, a.bytes) if a else (0, 0)
    a_res = a.by_resolution if a else {}
    rows_rate = (b.rows - a_rows) / span_s
    bytes_rate = max(0.0, (b.bytes - a_bytes) / span_s)
    gained = _gained_by_kind(b, a_res)
    note = ""
    if set(gained) == {FIXED} and rows_rate > 0:
        # No retention is known for it: kept as long as anything is (the hour rollups).
        gained, note = {HOUR: gained[FIXED]}, "grows; no retention known, counted at hour's"
    steady = float(b.bytes)
    total = sum(gained.values())
    if a is not None and b.rows <= a.rows and b.rows:
        # Rows level, bytes up: a churned table of bounded rows (the head of raw samples, whose
        # packed hours leave it every hour). PostgreSQL reuses the space of deleted rows only
        # after a vacuum, so its file reaches a high-water mark and stays: the size as measured
        # is its steady state (runs of 4 hours and more show it level from the 2nd hour on).
        bytes_rate, note = 0.0, "rows level: bounded, counted as measured"
    if bytes_rate > 0 and FIXED not in gained and total:
        fixed_part = max(0.0, b.bytes - bytes_rate * elapsed_s)
        grown = sum(bytes_rate * n / total * keep.days(k) * DAY for k, n in gained.items())
        steady = fixed_part + grown
    return Projection(
        b.name, group(b.name), "+".join(sorted(gained, key=_ORDER.index)) or FIXED, b.rows,
        b.bytes, b.bytes_per_row, rows_rate * DAY, bytes_rate * DAY, steady, note,
    )  # fmt: skip


_ORDER = [RAW, MINUTE, HOUR, FIXED]


def _gained_by_kind(b: TableSize, before: Mapping[int, int]) -> dict[str, int]:
    """Rows gained per retention class; a table without resolutions is all of its name's class
    (weight 1). A class that gained nothing still shows when the table has rows of it."""
    if not b.by_resolution:
        return {classify(b.name, None): 1}
    out: dict[str, int] = defaultdict(int)
    for resolution, rows in b.by_resolution.items():
        out[classify(b.name, resolution)] += max(0, rows - before.get(resolution, 0))
    return dict(out)


def total(projections: list[Projection]) -> float:
    return sum(p.steady_bytes for p in projections)
