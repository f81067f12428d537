"""Benchmark: bytes per stored sample and a box's steady-state database size, next to
Prometheus' TSDB on the same series (issue 11).

    python bench/storage.py [--hours 2] [--database-url URL | --postgres-url URL] [--keep]
    scripts/with-postgres sh -c \
        '.venv/bin/python bench/storage.py --postgres-url "$GPUWATCH_TEST_DB_URL"'

The box (bench/storage_scenario.py): 8 fake GPUs and 2 vLLM 0.33 targets of 2 models x 2
data-parallel engines each, every histogram, ticked by the real ``App`` at the default interval
over ``--hours`` of simulated time (each tick's instant late by up to ``--jitter-ms``, as the
daemon's ``datetime.now()`` after a scheduler wake-up is; timestamps cost most of a packed
sample, so exact instants would flatter the figure), with the real rollup job every simulated
minute as the daemon schedules it. Retention comes from the config's defaults, read at run time.

Measured on the database (SQLite in a temporary folder unless told; ``--postgres-url`` creates
and drops a fresh database on that server), every simulated hour and at the end, per table and
its indexes (bench/storage_sizes.py): rows per tick; bytes per raw sample (all raw-sample
storage over the samples stored, and its growth over the samples added after the first hour);
bytes per rollup row per resolution; the ledger; then each table's size at steady state, its
growth over its retention (bench/storage_steady.py), summed against the 1.5 GB target.

The baseline, in the same run (bench/storage_prom.py): the raw samples read back from the
database, as OpenMetrics, made into TSDB blocks by Debian's promtool; bytes per sample from the
blocks' files and ``meta.json``. Target: gpuwatch's bytes per raw sample at most 4 x that.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


from agent.daemon.app import App  # noqa: E402
from agent.storage.db import upgrade_database  # noqa: E402
from bench import storage_prom as prom  # noqa: E402
from bench.pg import drop_database, fresh_database  # noqa: E402
from bench.storage_report import report  # noqa: E402
from bench.storage_scenario import Checkpoint, Run, hardware, run_box  # noqa: E402
from bench.storage_sizes import Sizes, measure  # noqa: E402
from bench.tick import fake_library  # noqa: E402
from tests.fakenvml.build import LIB_NAME, write_config  # noqa: E402


@dataclass
class Recorder:
    """The run's hook: sizes at every checkpoint; at the end, the raw samples exported."""

    folder: Path
    points: list[tuple[Checkpoint, Sizes]] = field(default_factory=list)
    export: prom.Export | None = None
    export_seconds: float = 0.0

    def __call__(self, app: App, run: Run, point: Checkpoint) -> None:
        self.points.append((point, measure(app.engine)))
        print(f"  {point.at:%H:%M} simulated: {self.points[-1][1].total / 1e6:8.1f} MB",
              flush=True)  # fmt: skip
        if point.final:
            began = time.perf_counter()
            self.export = prom.export(app.store, run.metrics, self.folder / "samples.om")
            self.export_seconds = time.perf_counter() - began


@contextlib.contextmanager
def fresh_postgres(admin_url: str, keep: bool) -> Iterator[str]:
    """A new database on the server of ``admin_url``; dropped afterwards unless kept."""
    name = f"gw_bench_storage_{uuid.uuid4().hex[:8]}"
    try:
        yield fresh_database(admin_url, name)
    finally:
        if keep:
            print(f"kept PostgreSQL database {name}")
        else:
            drop_database(admin_url, name)


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


def load_fake_nvml(folder: Path) -> None:
    """The fake libnvidia-ml.so.1 loaded into this process, reading its hardware file."""
    libdir = fake_library(folder)
    os.environ["FAKE_NVML_CONFIG"] = str(write_config(folder / "hardware.txt", hardware(0, 10)))
    ctypes.CDLL(str(libdir / LIB_NAME))  # pynvml's dlopen by soname now finds the fake


def checkpoint_every(hours: float) -> timedelta:
    """Hourly; for a short run, thirds of it (to the minute)."""
    if hours >= 2:
        return timedelta(hours=1)
    return timedelta(minutes=max(1, int(hours * 60 / 3)))


def bench(folder: Path, url: str, hours: float, jitter_ms: float) -> None:
    promtool = prom.available()
    if promtool is None:
        raise SystemExit(
            "promtool not found: install Debian's prometheus (apt-get install prometheus)"
        )
    load_fake_nvml(folder)
    upgrade_database(url)
    recorder = Recorder(folder)
    print(f"ticking the box for {hours:g} simulated hours; database size at each checkpoint:")
    began = time.perf_counter()
    run = run_box(folder, url, hours, checkpoint_every(hours), recorder, jitter_ms)
    wall = time.perf_counter() - began
    assert recorder.export is not None
    blocks = prom.create_blocks(promtool, recorder.export.path, folder / "tsdb")
    report(url, run, recorder.points, recorder.export, blocks, wall)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    hours = "simulated hours (default 2; at least 2 to see hour rollups grow)"
    parser.add_argument("--hours", type=float, default=2.0, help=hours)
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--database-url", help="an empty database to use (default: SQLite in a "
                       "temporary folder)")  # fmt: skip
    where.add_argument("--postgres-url", help="a PostgreSQL server (superuser URL): the bench "
                       "creates its own database there and drops it afterwards")  # fmt: skip
    parser.add_argument("--keep", action="store_true", help="keep the files and the database")
    parser.add_argument("--jitter-ms", type=float, default=3.0, help="each tick's instant is "
                        "late by up to this much, as a real scheduler's wake-up is (default 3; "
                        "0: ticks exactly on the interval)")  # fmt: skip
    args = parser.parse_args()
    with work_folder(args.keep) as folder:
        if args.postgres_url:
            with fresh_postgres(args.postgres_url, args.keep) as url:
                bench(folder, url, args.hours, args.jitter_ms)
        else:
            url = args.database_url or f"sqlite:///{folder / 'gpuwatch.db'}"
            bench(folder, url, args.hours, args.jitter_ms)
    return 0


if __name__ == "__main__":
    sys.exit(main())
