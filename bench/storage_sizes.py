"""What each table of a gpuwatch database holds, and costs, for bench/storage.py.

Tables are discovered, never named: those of ``migrations.schema.metadata`` and any other the
database has, so a table added by a new layout is counted the day it lands. Sizes are the
database's own accounting, indexes included:

- SQLite: the ``dbstat`` virtual table (pages of each table and of each of its indexes), after
  a WAL checkpoint; page counts from ``PRAGMA page_count`` when this SQLite lacks ``dbstat``
  (then only the file's total is known);
- PostgreSQL: ``pg_total_relation_size`` (heap, indexes, TOAST) after ``VACUUM ANALYZE``.

Each table is put in a retention class by its name and columns (see :func:`classify`): raw,
per-minute, per-hour, or fixed (does not grow with time).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from sqlalchemy import Engine, Integer, func, inspect, select, table, text
from sqlalchemy import column as sql_column

from migrations.schema import metadata

RAW, MINUTE, HOUR, FIXED = "raw", "minute", "hour", "fixed"
# Words of a table name that mark what it holds; collector_runs is trimmed with raw samples.
RAW_WORDS = frozenset({"sample", "samples", "chunk", "chunks", "raw", "runs"})
RESOLUTION = "resolution"  # the column that tells a minute row from an hour row


@dataclass(frozen=True)
class TableSize:
    name: str
    rows: int
    table_bytes: int  # the rows themselves (heap or b-tree), TOAST and free-space maps
    index_bytes: int
    by_resolution: Mapping[int, int]  # rows per resolution; empty without that column

    @property
    def bytes(self) -> int:
        return self.table_bytes + self.index_bytes

    @property
    def bytes_per_row(self) -> float:
        return self.bytes / self.rows if self.rows else 0.0


@dataclass(frozen=True)
class Sizes:
    tables: Mapping[str, TableSize]
    file_bytes: int | None  # SQLite: the database file after a checkpoint; None on PostgreSQL
    exact: bool  # False: SQLite without dbstat, per-table bytes unknown (counted as 0)

    @property
    def total(self) -> int:
        return sum(t.bytes for t in self.tables.values())


def group(name: str) -> str:
    """What a table is for, by its name: raw, rollup, ledger, series, or other."""
    words = set(name.lower().split("_"))
    if words & (RAW_WORDS - {"runs"}):
        return "raw"
    if "rollup" in name or "rollups" in words:
        return "rollup"
    if words & {"usage", "allocations", "ledger", "cost", "billing"}:
        return "ledger"
    if "series" in words:
        return "series"
    return "other"


def classify(name: str, resolution: int | None) -> str:
    """The retention that keeps rows of ``name`` (at ``resolution`` seconds, when it says)."""
    if resolution is not None:
        return MINUTE if resolution <= 60 else HOUR
    words = set(name.lower().split("_"))
    if "minute" in name or "minutes" in words:
        return MINUTE
    if "hour" in name or "hourly" in words:
        return HOUR
    if words & RAW_WORDS:
        return RAW
    return FIXED


def discover(engine: Engine) -> list[str]:
    """Every table: the schema's and whatever else the database has (Alembic's included)."""
    names = set(metadata.tables) | set(inspect(engine).get_table_names())
    return sorted(names)


def measure(engine: Engine) -> Sizes:
    names = discover(engine)
    counts = {name: _rows(engine, name) for name in names}
    if engine.dialect.name == "sqlite":
        pages, file_bytes, exact = _sqlite_bytes(engine)
    else:
        pages, file_bytes, exact = _postgres_bytes(engine, names), None, True
    tables = {
        name: TableSize(name, counts[name][0], *pages.get(name, (0, 0)), counts[name][1])
        for name in names
    }
    return Sizes(tables, file_bytes, exact)


def _rows(engine: Engine, name: str) -> tuple[int, dict[int, int]]:
    columns = {c["name"] for c in inspect(engine).get_columns(name)}
    t = table(name)
    with engine.connect() as conn:
        total = conn.execute(select(func.count()).select_from(t)).scalar_one()
        if RESOLUTION not in columns:
            return int(total), {}
        res = sql_column(RESOLUTION, Integer)
        query = select(res, func.count()).select_from(t).group_by(res)
        return int(total), {int(r): int(n) for r, n in conn.execute(query)}


def _sqlite_bytes(engine: Engine) -> tuple[dict[str, tuple[int, int]], int, bool]:
    """(table bytes, index bytes) per table from dbstat; the file's size."""
    with engine.connect() as conn:
        conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
        page_size = conn.exec_driver_sql("PRAGMA page_size").scalar_one()
        page_count = conn.exec_driver_sql("PRAGMA page_count").scalar_one()
        file_bytes = int(page_size) * int(page_count)
        try:
            rows = conn.exec_driver_sql(
                "SELECT m.tbl_name, m.type, sum(d.pgsize) FROM dbstat AS d"
                " JOIN sqlite_master AS m ON m.name = d.name GROUP BY m.tbl_name, m.type"
            ).all()
        except Exception:  # sqlite3 built without SQLITE_ENABLE_DBSTAT_VTAB
            return {}, file_bytes, False
    out: dict[str, tuple[int, int]] = {}
    for name, kind, size in rows:
        heap, index = out.get(name, (0, 0))
        out[name] = (heap, index + int(size)) if kind == "index" else (heap + int(size), index)
    return out, file_bytes, True


def _postgres_bytes(engine: Engine, names: list[str]) -> dict[str, tuple[int, int]]:
    """(table bytes incl. TOAST, index bytes) per table, after VACUUM ANALYZE (as autovacuum
    would have left it: dead rows reusable, statistics fresh)."""
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql("VACUUM ANALYZE")
        out = {}
        for name in names:
            total, indexes = conn.execute(
                text("SELECT pg_total_relation_size(CAST(:t AS regclass)),"
                     " pg_indexes_size(CAST(:t AS regclass))"),
                {"t": f'"{name}"'},
            ).one()  # fmt: skip
            out[name] = (int(total) - int(indexes), int(indexes))
    return out
