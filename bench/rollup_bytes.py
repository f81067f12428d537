"""Benchmark: how many bytes do the rollups of the inter-token and queue-time histograms and of
the KV-cache and waiting-request gauges add per serving target, next to the rollups without
them?

    python bench/rollup_bytes.py [--hours 1.1] [--database-url URL | --postgres-url URL]

Those four were added to the rollups for the objectives ([[slo]] itl and queue thresholds) and
the serving efficiency (KV-cache and queue peaks): a histogram row per minute, hour and day per
histogram series (``histogram_rollups``), a series row per minute, hour and day per gauge series
(``rollups``), per engine series of a target. The box of bench/storage.py (bench/box.py: 2 vLLM
0.33 targets of 2 models x 2 data-parallel engines, 8 fake GPUs) is ticked by the real ``App``
every 10 s over ``--hours`` of simulated time with the real rollup job every minute. Then both
rollup tables are compacted (SQLite ``VACUUM``, PostgreSQL ``VACUUM FULL``) and measured (table
and index bytes: SQLite's ``dbstat``, PostgreSQL's ``pg_total_relation_size``), the rows of the
four metrics are deleted, the tables compacted and measured again: the difference is what those
rows take, the second measurement the baseline (the rollups without them), in the same run; then
the rest is deleted, so the pages an empty table has count for neither.

From bytes per row, per target: what a day adds (1,440 minute rows, 24 hour rows and one day
row per series) and the steady state at the default retentions (minute rows 62 days, hour and
day rows 730 days), and a year of operation (62 days of minute rows, 365 of hour and day rows).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sqlalchemy import Engine, delete, func, select  # noqa: E402

from agent.config.settings import RetentionConfig  # noqa: E402
from agent.storage.db import open_database, upgrade_database  # noqa: E402
from agent.storage.rolled_up import ITL, KV_CACHE_USAGE, QUEUE, REQUESTS_WAITING  # noqa: E402
from bench import box  # noqa: E402
from bench.common import drop_database, fresh_database, postgres_or_skip  # noqa: E402
from bench.storage import measure  # noqa: E402
from migrations.schema import histogram_rollups, rollups, series  # noqa: E402

NEW = {histogram_rollups.name: (ITL, QUEUE), rollups.name: (KV_CACHE_USAGE, REQUESTS_WAITING)}
MINUTE, HOUR, DAY = 60, 3600, 86400
PER_DAY = {MINUTE: 1440, HOUR: 24, DAY: 1}  # rows a series adds a day, per resolution
DAYS = 86400.0


@dataclass(frozen=True)
class Part:
    """One class of rollup rows: how many series, and the bytes of a row."""

    series: int
    rows: int
    bytes: int  # table and index bytes of those rows

    @property
    def per_row(self) -> float:
        return self.bytes / self.rows if self.rows else 0.0


def compact(engine: Engine) -> None:
    """Both rollup tables rewritten without free pages, so a measurement is of the rows."""
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        if engine.dialect.name == "sqlite":
            conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
            conn.exec_driver_sql("VACUUM")
        else:
            for name in NEW:
                conn.exec_driver_sql(f"VACUUM FULL {name}")


def table_bytes(engine: Engine) -> dict[str, int]:
    sizes = measure(engine).tables
    return {name: sizes[name].table_bytes + sizes[name].index_bytes for name in NEW}


def census(engine: Engine, name: str, metrics: tuple[str, ...]) -> tuple[int, int, int, int]:
    """(series of ``metrics``, their rows, other series, their rows) in the table ``name``."""
    t = histogram_rollups if name == histogram_rollups.name else rollups
    new = series.c.metric.in_(metrics)
    with engine.connect() as conn:
        counts = {}
        for key, where in (("new", new), ("old", ~new)):
            ids = select(series.c.id).where(where)
            rows = conn.execute(
                select(func.count(), func.count(t.c.series_id.distinct())).where(
                    t.c.series_id.in_(ids)
                )
            ).one()
            counts[key] = (int(rows[1]), int(rows[0]))
    return counts["new"][0], counts["new"][1], counts["old"][0], counts["old"][1]


def targets(engine: Engine) -> int:
    with engine.connect() as conn:
        wanted = series.c.metric.in_((ITL, f"{ITL}_bucket"))  # raw, or rolled up
        labels = conn.execute(select(series.c.labels).where(wanted)).scalars()
        return len({text.split('"target":"')[1].split('"')[0] for text in labels})


def split(engine: Engine) -> dict[str, tuple[Part, Part]]:
    """Per rollup table, (the four metrics' rows, the other rows), measured as described."""
    compact(engine)
    full = table_bytes(engine)
    counts = {name: census(engine, name, metrics) for name, metrics in NEW.items()}
    with engine.begin() as conn:
        for name, metrics in NEW.items():
            t = histogram_rollups if name == histogram_rollups.name else rollups
            ids = select(series.c.id).where(series.c.metric.in_(metrics))
            conn.execute(delete(t).where(t.c.series_id.in_(ids)))
    compact(engine)
    base = table_bytes(engine)
    # And empty: the pages a table has whatever its rows (its root, its indexes' roots, on
    # PostgreSQL its free-space and visibility maps) belong to no row.
    with engine.begin() as conn:
        for name in NEW:
            conn.execute(delete(histogram_rollups if name == histogram_rollups.name else rollups))
    compact(engine)
    empty = table_bytes(engine)
    out = {}
    for name, (new_series, new_rows, old_series, old_rows) in counts.items():
        out[name] = (
            Part(new_series, new_rows, full[name] - base[name]),
            Part(old_series, old_rows, base[name] - empty[name]),
        )
    return out


def rows_kept() -> dict[str, float]:
    """Rows a series has: added in a day, kept after a year, kept at steady state."""
    r = RetentionConfig()
    minutes, hours = r.minute_seconds / DAYS, r.hour_seconds / DAYS
    coarse = PER_DAY[HOUR] + PER_DAY[DAY]
    return {
        "a day": float(sum(PER_DAY.values())),
        "a year": min(365.0, minutes) * PER_DAY[MINUTE] + min(365.0, hours) * coarse,
        "steady": minutes * PER_DAY[MINUTE] + hours * coarse,
    }


def report(backend: str, parts: Mapping[str, tuple[Part, Part]], n_targets: int) -> None:
    kept = rows_kept()
    print(f"{backend}: the box's {n_targets} targets; bytes per row from the rows measured")
    print(f"  {'rows':58} {'series':>6} {'B/row':>6} " + " ".join(f"{k:>10}" for k in kept))
    totals: dict[str, dict[str, float]] = {"new": dict.fromkeys(kept, 0.0),
                                           "old": dict.fromkeys(kept, 0.0)}  # fmt: skip
    for name, (new, old) in parts.items():
        metrics = " + ".join(m.removeprefix("gpuwatch_engine_") for m in NEW[name])
        for key, part, what, per in (
            ("old", old, f"{name}, the others, the box", 1),
            ("new", new, f"{name}, {metrics}, a target", n_targets),
        ):
            figures = {k: part.series * n * part.per_row / per for k, n in kept.items()}
            for k, value in figures.items():
                totals[key][k] += value * (n_targets if key == "new" else 1)
            print(f"  {what:58} {part.series / per:6.1f} {part.per_row:6.1f} "
                  + " ".join(f"{_size(v):>10}" for v in figures.values()))  # fmt: skip
    base, added = totals["old"], totals["new"]
    share = f"+{added['steady'] / base['steady']:.1%}" if base["steady"] else "n/a (no rows yet)"
    print(f"baseline: {backend}: the box's rollups without the four: "
          + ", ".join(f"{k} {_size(v)}" for k, v in base.items()))  # fmt: skip
    print(
        f"{backend}: the four add per target: "
        + ", ".join(f"{k} {_size(v / n_targets)}" for k, v in added.items())
        + f"; the box's {n_targets} targets: {share} of its rollups at steady state"
    )


def _size(n: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n:.0f} B"


def bench(folder: Path, url: str, hours: float) -> None:
    box.load_box_nvml(folder)
    upgrade_database(url)
    began = time.perf_counter()
    box.run_box(folder, url, hours, timedelta(hours=hours + 1), lambda *_: None, 3.0)
    print(f"ticked the box for {hours:g} simulated hours in {time.perf_counter() - began:.0f} s")
    engine = open_database(url)
    try:
        n_targets = targets(engine)
        backend = "SQLite" if engine.dialect.name == "sqlite" else "PostgreSQL"
        report(backend, split(engine), n_targets)
    finally:
        engine.dispose()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hours", type=float, default=1.1, help="simulated hours of ticks")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--database-url", help="an empty database to fill (default: SQLite)")
    where.add_argument("--postgres-url", help="a superuser URL: a database of our own there")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-rollup-bytes-") as tmp:
        folder = Path(tmp)
        if args.postgres_url is None:
            bench(folder, args.database_url or f"sqlite:///{folder / 'box.db'}", args.hours)
            return 0
        admin = postgres_or_skip(args.postgres_url, "the PostgreSQL run")
        name = f"bench_rollup_bytes_{uuid.uuid4().hex[:8]}"
        try:
            bench(folder, fresh_database(admin, name), args.hours)
        finally:
            drop_database(admin, name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
