"""bench/report_fleet.py's profile of one ``build_report`` call: where Python spends it (cProfile,
top functions by cumulative time) and where PostgreSQL does (every SQL statement timed from
SQLAlchemy's before/after_cursor_execute events, with its row count; ``pg_stat_statements`` is
not loaded in a throwaway server), then EXPLAIN (ANALYZE, BUFFERS) of the slowest few.

The two are separate calls: cProfile's overhead would inflate the statements' share.
"""

from __future__ import annotations

import cProfile
import io
import pstats
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, event


@dataclass(frozen=True, slots=True)
class Statement:
    seconds: float
    rows: int
    sql: str
    parameters: Any


def _short(sql: str, limit: int = 260) -> str:
    flat = re.sub(r"\s+", " ", sql).strip()
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def time_statements(engine: Engine, call: Callable[[], object]) -> tuple[float, list[Statement]]:
    """``call()``'s wall seconds and every statement it ran, slowest first."""
    seen: list[Statement] = []
    started: list[float] = []

    def before(*_: Any) -> None:
        started.append(time.perf_counter())

    def after(_conn: Any, cursor: Any, sql: str, parameters: Any, *_: Any) -> None:
        seconds = time.perf_counter() - started.pop()
        seen.append(Statement(seconds, cursor.rowcount, sql, parameters))

    event.listen(engine, "before_cursor_execute", before)
    event.listen(engine, "after_cursor_execute", after)
    try:
        t = time.perf_counter()
        call()
        wall = time.perf_counter() - t
    finally:
        event.remove(engine, "before_cursor_execute", before)
        event.remove(engine, "after_cursor_execute", after)
    return wall, sorted(seen, key=lambda s: -s.seconds)


def explain(engine: Engine, statement: Statement) -> list[str]:
    with engine.connect() as conn:
        plan = conn.exec_driver_sql(
            "EXPLAIN (ANALYZE, BUFFERS) " + statement.sql, statement.parameters
        )
        return [str(line) for (line,) in plan]


def profile(
    engine: Engine, call: Callable[[], object], *, top: int = 25, slowest: int = 15
) -> None:
    wall, statements = time_statements(engine, call)
    in_sql = sum(s.seconds for s in statements)
    print(
        f"profile: build_report {wall:.3f} s wall; {len(statements)} SQL statements "
        f"{in_sql:.3f} s ({in_sql / wall:.0%}), {sum(max(s.rows, 0) for s in statements):,} rows; "
        f"Python (rows to objects, figures, sections) {wall - in_sql:.3f} s"
    )
    print(f"profile: the slowest {slowest} statements (execute + fetch, rows returned)")
    for s in statements[:slowest]:
        print(f"  {s.seconds * 1e3:8.1f} ms {s.rows:>9,} rows  {_short(s.sql)}")
    for s in statements[:3]:
        print(f"profile: EXPLAIN ANALYZE of the {s.seconds * 1e3:.0f} ms statement")
        for line in explain(engine, s)[:40]:
            print(f"    {_short(line, 300)}")
    profiler = cProfile.Profile()
    profiler.enable()
    call()
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(top)
    print(f"profile: cProfile, top {top} by cumulative time")
    for line in out.getvalue().splitlines():
        if line.strip():
            print(f"  {line.rstrip()}")
