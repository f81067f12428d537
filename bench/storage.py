"""Benchmark: how many bytes does a stored sample take, and how large is a box's database at
steady state, next to Prometheus' TSDB on the same samples?

    python bench/storage.py [--hours 2] [--jitter-ms 3] [--keep]
                            [--database-url URL | --postgres-url URL]

The box (bench/box.py): 8 fake GPUs and 2 vLLM 0.33 targets of 2 models x 2 data-parallel
engines, every histogram, ticked by the real ``App`` at the default interval (10 s) over
``--hours`` of simulated time, each tick's instant late by up to ``--jitter-ms`` (as the
daemon's clock after a scheduler wake-up is: timestamps are most of a packed sample, so exact
instants would flatter both stores), with the real rollup job every simulated minute.
Retention comes from the config's defaults. SQLite in a temporary folder unless told;
``--postgres-url`` (a superuser URL) creates and drops a database of its own there.

Measured hourly (thirds of a shorter run) on every table the database has, indexes included
(SQLite's ``dbstat``; PostgreSQL's ``pg_total_relation_size`` after ``VACUUM ANALYZE``): rows
per tick, bytes per raw sample, bytes per rollup row; then each table's size at steady state,
its growth between the first and the last measurement times its retention (a table whose rows
did not grow, such as the head of raw samples emptied of each packed hour, counted as
measured), summed. Targets: at most 1.5 GB per box at steady state; bytes per raw sample at
most 4 x Prometheus'.

Baseline, in the same run: the raw samples read back from the database (``Store.samples``), as
OpenMetrics with timestamps, made into TSDB blocks by Debian's ``promtool tsdb
create-blocks-from openmetrics`` (the 2-hour blocks a Prometheus server cuts, with the same
chunks and index); bytes per sample from the blocks' files and ``meta.json``. Without promtool
the baseline is skipped with a message. Run at least 2 hours to see hour rollups grow.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sqlalchemy import Engine, Integer, func, inspect, select, table, text  # noqa: E402
from sqlalchemy import column as sql_column  # noqa: E402

from agent.config.settings import RetentionConfig  # noqa: E402
from agent.daemon.app import App  # noqa: E402
from agent.storage.db import upgrade_database  # noqa: E402
from agent.storage.store import Store, StoredSample  # noqa: E402
from bench import box  # noqa: E402
from bench.common import drop_database, fresh_database, verdict  # noqa: E402
from migrations.schema import metadata  # noqa: E402

STEADY_TARGET = 1.5e9  # bytes per box at the default retentions
RATIO_TARGET = 4.0  # gpuwatch's bytes per raw sample over Prometheus'
DAY = 86400.0
RAW, MINUTE, HOUR, FIXED = "raw", "minute", "hour", "fixed"
# Words of a table name that mark what it holds; collector_runs is trimmed with raw samples.
RAW_WORDS = frozenset({"sample", "samples", "chunk", "chunks", "raw", "runs"})
RESOLUTION = "resolution"  # the column that tells a minute row from an hour row


# -- what each table holds and costs ----------------------------------------------------------


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


@dataclass(frozen=True)
class Sizes:
    tables: Mapping[str, TableSize]
    file_bytes: int | None  # SQLite: the file after a checkpoint; None on PostgreSQL

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
    return "series" if "series" in words else "other"


def classify(name: str, resolution: int | None) -> str:
    """The retention that keeps rows of ``name`` (at ``resolution`` seconds, when it says)."""
    if resolution is not None:
        return MINUTE if resolution <= 60 else HOUR
    words = set(name.lower().split("_"))
    if "minute" in name or "minutes" in words:
        return MINUTE
    if "hour" in name or "hourly" in words:
        return HOUR
    return RAW if words & RAW_WORDS else FIXED


def measure(engine: Engine) -> Sizes:
    """Every table, the schema's and whatever else the database has (discovered, never named:
    a table added by a new layout is counted the day it lands)."""
    names = sorted(set(metadata.tables) | set(inspect(engine).get_table_names()))
    counts = {name: _rows(engine, name) for name in names}
    if engine.dialect.name == "sqlite":
        pages, file_bytes = _sqlite_bytes(engine)
    else:
        pages, file_bytes = _postgres_bytes(engine, names), None
    tables = {
        name: TableSize(name, counts[name][0], *pages.get(name, (0, 0)), counts[name][1])
        for name in names
    }
    return Sizes(tables, file_bytes)


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


def _sqlite_bytes(engine: Engine) -> tuple[dict[str, tuple[int, int]], int]:
    """(table bytes, index bytes) per table from dbstat, after a WAL checkpoint; the file."""
    with engine.connect() as conn:
        conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
        page_size = conn.exec_driver_sql("PRAGMA page_size").scalar_one()
        page_count = conn.exec_driver_sql("PRAGMA page_count").scalar_one()
        rows = conn.exec_driver_sql(
            "SELECT m.tbl_name, m.type, sum(d.pgsize) FROM dbstat AS d"
            " JOIN sqlite_master AS m ON m.name = d.name GROUP BY m.tbl_name, m.type"
        ).all()
    out: dict[str, tuple[int, int]] = {}
    for name, kind, size in rows:
        heap, index = out.get(name, (0, 0))
        out[name] = (heap, index + int(size)) if kind == "index" else (heap + int(size), index)
    return out, int(page_size) * int(page_count)


def _postgres_bytes(engine: Engine, names: list[str]) -> dict[str, tuple[int, int]]:
    """(table bytes incl. TOAST, index bytes) per table, after VACUUM ANALYZE (as autovacuum
    would have left it: dead rows reusable, statistics fresh)."""
    out = {}
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql("VACUUM ANALYZE")
        for name in names:
            total, indexes = conn.execute(
                text("SELECT pg_total_relation_size(CAST(:t AS regclass)),"
                     " pg_indexes_size(CAST(:t AS regclass))"),
                {"t": f'"{name}"'},
            ).one()  # fmt: skip
            out[name] = (int(total) - int(indexes), int(indexes))
    return out


# -- steady state -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Retention:
    """Days each class is kept, from the config (its defaults here)."""

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
    rows_per_day: float
    steady_bytes: float
    note: str = ""


def project(
    a: TableSize | None, b: TableSize, span: float, elapsed: float, keep: Retention
) -> Projection:
    """A table at steady state, from measurement ``a`` to ``b`` (``span`` s apart, ``b`` at
    ``elapsed`` s after the first tick): what it gains over its retention, plus the part of its
    size that does not grow with time (label text, a head not yet packed, pages kept for
    reuse). A table with a resolution column splits its growth between the minute and the hour
    retention by the rows each gained. Bytes come from the growth, not from bytes per row
    times rows, so a layout packing samples into a few large rows is extrapolated as truly."""
    a_rows, a_bytes, a_res = (a.rows, a.bytes, a.by_resolution) if a else (0, 0, {})
    rows_rate = (b.rows - a_rows) / span
    bytes_rate = max(0.0, (b.bytes - a_bytes) / span)
    gained = _gained_by_kind(b, a_res)
    note = ""
    if set(gained) == {FIXED} and rows_rate > 0:
        gained, note = {HOUR: gained[FIXED]}, "grows; no retention known, counted at hour's"
    if a is not None and b.rows <= a.rows and b.rows:
        # Rows level, bytes up: a churned table of bounded rows (the head of raw samples).
        # PostgreSQL reuses deleted rows' space only after a vacuum, so its file reaches a
        # high-water mark and stays: the size as measured is its steady state.
        bytes_rate, note = 0.0, "rows level: bounded, counted as measured"
    steady, total = float(b.bytes), sum(gained.values())
    if bytes_rate > 0 and FIXED not in gained and total:
        fixed_part = max(0.0, b.bytes - bytes_rate * elapsed)
        steady = fixed_part + sum(
            bytes_rate * n / total * keep.days(k) * DAY for k, n in gained.items()
        )
    kinds = "+".join(k for k in (RAW, MINUTE, HOUR, FIXED) if k in gained) or FIXED
    return Projection(b.name, group(b.name), kinds, b.rows, b.bytes, rows_rate * DAY, steady, note)


def _gained_by_kind(b: TableSize, before: Mapping[int, int]) -> dict[str, int]:
    """Rows gained per retention class; a table without resolutions is all of its name's class."""
    if not b.by_resolution:
        return {classify(b.name, None): 1}
    out: dict[str, int] = defaultdict(int)
    for resolution, rows in b.by_resolution.items():
        out[classify(b.name, resolution)] += max(0, rows - before.get(resolution, 0))
    return dict(out)


# -- the baseline: Prometheus' TSDB on the same samples ---------------------------------------


@dataclass(frozen=True)
class Export:
    path: Path
    samples: int
    series: int


@dataclass(frozen=True)
class Blocks:
    blocks: int
    samples: int
    chunk_bytes: int
    index_bytes: int
    other_bytes: int  # meta.json, tombstones

    @property
    def bytes(self) -> int:
        return self.chunk_bytes + self.index_bytes + self.other_bytes

    @property
    def bytes_per_sample(self) -> float:
        return self.bytes / self.samples if self.samples else math.nan


def export(store: Store, metrics: Iterable[str], path: Path) -> Export:
    """Every stored sample of ``metrics`` as OpenMetrics text, one metric at a time."""
    samples = 0
    series: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
    with path.open("w", encoding="utf-8") as out:
        for metric in sorted(metrics):
            for s in store.samples(metric):
                out.write(_line(s))
                samples += 1
                series.add((s.metric, tuple(sorted(s.labels.items()))))
        out.write("# EOF\n")
    return Export(path, samples, len(series))


def _line(s: StoredSample) -> str:
    def escape(value: str) -> str:
        return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")

    labels = ",".join(f'{k}="{escape(v)}"' for k, v in sorted(s.labels.items()))
    v = s.value
    value = "NaN" if math.isnan(v) else ("+Inf" if v > 0 else "-Inf") if math.isinf(v) else repr(v)
    return f"{s.metric}{{{labels}}} {value} {s.ts.timestamp():.3f}\n"


def create_blocks(promtool: str, source: Path, out: Path) -> Blocks:
    out.mkdir(parents=True, exist_ok=True)
    command = [promtool, "tsdb", "create-blocks-from", "openmetrics", "--quiet", str(source)]
    done = subprocess.run([*command, str(out)], capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"{' '.join(command)} failed: {done.stderr.strip()}")
    metas = sorted(out.glob("*/meta.json"))
    samples = chunks = index = other = 0
    for meta in metas:
        samples += int(json.loads(meta.read_text())["stats"]["numSamples"])
        for f in meta.parent.rglob("*"):
            if f.is_file():
                size = f.stat().st_size
                if f.parent.name == "chunks":
                    chunks += size
                elif f.name == "index":
                    index += size
                else:
                    other += size
    return Blocks(len(metas), samples, chunks, index, other)


# -- the run and its report -------------------------------------------------------------------


@dataclass
class Recorder:
    """The run's hook: sizes at every checkpoint; at the end, the raw samples exported."""

    folder: Path
    points: list[tuple[box.Checkpoint, Sizes]] = field(default_factory=list)
    export: Export | None = None

    def __call__(self, app: App, run: box.Run, point: box.Checkpoint) -> None:
        self.points.append((point, measure(app.engine)))
        print(f"  {point.at:%H:%M} simulated: {self.points[-1][1].total / 1e6:8.1f} MB",
              flush=True)  # fmt: skip
        if point.final:
            self.export = export(app.store, run.metrics, self.folder / "samples.om")


def report(backend: str, run: box.Run, rec: Recorder, blocks: Blocks | None, wall: float) -> None:
    (pa, a), (pb, b) = rec.points[0], rec.points[-1]
    assert rec.export is not None
    step = run.config.daemon.interval_seconds
    span, elapsed = (pb.ticks - pa.ticks) * step, pb.ticks * step
    keep = Retention.of(run.config.retention)
    projections = [project(a.tables.get(n), t, span, elapsed, keep) for n, t in b.tables.items()]
    print(f"\nbox: {box.GPUS} GPUs (fake NVML), {box.TARGETS} x {box.VERSION} targets of "
          f"{len(box.MODELS)} models x {box.ENGINES} engines; {backend}; {run.ticks} ticks every "
          f"{step:g} s, {run.rollups} "
          f"rollup runs, {wall:.0f} s wall; retention raw {keep.raw:g} d, minute "
          f"{keep.minute:g} d, hour {keep.hour:g} d")  # fmt: skip
    print(f"{'table':<22}{'group':<8}{'kept':<13}{'rows':>10}{'bytes':>13}{'rows/tick':>11}"
          f"{'steady state':>15}")  # fmt: skip
    per_day_ticks = DAY / step
    for p in sorted(projections, key=lambda p: -p.steady_bytes):
        if p.rows:
            print(f"{p.table:<22}{p.group:<8}{p.kinds:<13}{p.rows:>10,}{p.bytes:>13,}"
                  f"{p.rows_per_day / per_day_ticks:>11.1f}{p.steady_bytes / 1e6:>12,.1f} MB"
                  + (f"  ({p.note})" if p.note else ""))  # fmt: skip
    rows_per_tick = sum(p.rows_per_day for p in projections) / per_day_ticks
    print(f"rows per tick, all tables: {rows_per_tick:.1f}")
    for t in b.tables.values():
        if t.by_resolution:
            counts = ", ".join(f"{n:,} at {r} s" for r, n in sorted(t.by_resolution.items()))
            print(f"  {t.name}: {counts}; {t.bytes / max(t.rows, 1):.1f} bytes a row")
    # Raw samples: the raw tables' steady size over the samples a raw retention holds.
    raw_tables = [p for p in projections if p.group == RAW]
    stored_a = rec.export.samples * pa.samples_written / max(pb.samples_written, 1)
    held = (rec.export.samples - stored_a) / (span / DAY / keep.raw) if span else 0.0
    ours = sum(p.steady_bytes for p in raw_tables) / held if held else math.nan
    overall = sum(p.bytes for p in raw_tables) / max(rec.export.samples, 1)
    print(f"\nraw samples: {rec.export.samples:,} stored over {rec.export.series:,} series")
    print(f"  bytes per raw sample now, raw tables / samples stored: {overall:6.2f}")
    print(f"  bytes per raw sample at steady state: {ours:6.2f}")
    size = sum(p.steady_bytes for p in projections)
    print(f"target: steady state per box <= {STEADY_TARGET / 1e9:.1f} GB -> {size / 1e9:.2f} GB, "
          f"{verdict(size <= STEADY_TARGET)}")  # fmt: skip
    if blocks is None:
        print("baseline skipped: promtool not found (Debian's prometheus package has it)")
        return
    print(f"baseline: Prometheus TSDB (promtool), the same {rec.export.samples:,} samples in "
          f"{blocks.blocks} blocks: chunks {blocks.chunk_bytes:,} + index "
          f"{blocks.index_bytes:,} + meta {blocks.other_bytes:,} bytes = "
          f"{blocks.bytes_per_sample:.2f} bytes a sample")  # fmt: skip
    if blocks.samples != rec.export.samples:
        print(f"  WARNING: the blocks hold {blocks.samples:,} samples")
    ratio = ours / blocks.bytes_per_sample
    print(f"target: bytes per raw sample <= {RATIO_TARGET:g} x Prometheus' -> {ratio:.2f} x, "
          f"{verdict(ratio <= RATIO_TARGET)}")  # fmt: skip


def bench(folder: Path, url: str, hours: float, jitter_ms: float) -> None:
    box.load_box_nvml(folder)
    upgrade_database(url)
    rec = Recorder(folder)
    every = timedelta(hours=1) if hours >= 2 else timedelta(minutes=max(1, int(hours * 20)))
    print(f"ticking the box for {hours:g} simulated hours; database size at each checkpoint:")
    began = time.perf_counter()
    run = box.run_box(folder, url, hours, every, rec, jitter_ms)
    wall = time.perf_counter() - began
    assert rec.export is not None
    promtool = shutil.which("promtool")
    blocks = create_blocks(promtool, rec.export.path, folder / "tsdb") if promtool else None
    report("SQLite" if url.startswith("sqlite") else "PostgreSQL", run, rec, blocks, wall)


@contextlib.contextmanager
def work_folder(keep: bool) -> Iterator[Path]:
    folder = Path(tempfile.mkdtemp(prefix="gpuwatch-bench-storage-"))
    try:
        yield folder
    finally:
        if keep:
            print(f"kept {folder} (database, samples.om, TSDB blocks)")
        else:
            shutil.rmtree(folder, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--hours", type=float, default=2.0, help="simulated hours (default 2)")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--database-url", help="an empty database (default: SQLite, temporary)")
    where.add_argument("--postgres-url", help="a PostgreSQL server (superuser URL): a database "
                       "of the bench's own is created there and dropped afterwards")  # fmt: skip
    parser.add_argument("--keep", action="store_true", help="keep the files and the database")
    parser.add_argument("--jitter-ms", type=float, default=3.0, help="each tick late by up to "
                        "this much (default 3; 0: exactly on the interval)")  # fmt: skip
    args = parser.parse_args()
    with work_folder(args.keep) as folder:
        if not args.postgres_url:
            url = args.database_url or f"sqlite:///{folder / 'gpuwatch.db'}"
            bench(folder, url, args.hours, args.jitter_ms)
            return 0
        name = f"gw_bench_storage_{uuid.uuid4().hex[:8]}"
        try:
            bench(folder, fresh_database(args.postgres_url, name), args.hours, args.jitter_ms)
        finally:
            if args.keep:
                print(f"kept PostgreSQL database {name}")
            else:
                drop_database(args.postgres_url, name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
