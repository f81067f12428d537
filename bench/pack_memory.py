"""Benchmark: what packing an hour of 1 s ticks leaves in the daemon's memory.

    python bench/pack_memory.py [--minutes 60]

The box of bench/storage.py (8 fake GPUs, 2 vLLM 0.33 targets of 2 models x 2 data-parallel
engines, every histogram) ticked by the daemon's own App at 1 s for 3 minutes of simulated
time on SQLite (bench/storage_scenario.py); then its head is extended by SQL to ``--minutes``
(the 3 minutes copied forward, values nudged), as a 1 s daemon holds it when the hour's packing
starts. Each variant then runs in a fresh process on its own copy of that database, with the
daemon's allocator settings (agent.daemon.malloc): one read of the latency windows (5 minutes
of every series, as a tick does), ``malloc_trim``, then the rollup's packing of the block
(``Rollup._compact``, batches of ``COMPACT_ROWS``, no pauses), and ``malloc_trim`` again.

- streamed (the daemon now): ``raw.compact`` encodes each series' run of rows as it ends;
- baseline, rows held: the batch's rows fetched at once and grouped into per-series lists of
  tuples before encoding (the code before this change, kept here).

Printed per variant: seconds to pack, Python's allocator arenas (1 MiB each; an arena is
returned only when wholly free) and RssAnon before, at the peak and after the final trim.
And what reading a tick's 5-minute window costs from the head (before the packing) and from
the hour's chunks (after it): why the daemon packs an hour only once its alert windows have
left it.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

BOX_MINUTES = 3.0  # simulated by the real App; the rest of the head is copied forward
VARIANTS = ("streamed", "held")


def make_box(folder: Path, minutes: float) -> tuple[Path, int]:
    """The box's database with ``minutes`` of head rows; (path, rows)."""
    from bench.storage import load_fake_nvml
    from bench.storage_scenario import run_box

    load_fake_nvml(folder)
    db = folder / "box.db"
    run_box(folder, f"sqlite:///{db}", BOX_MINUTES / 60, timedelta(hours=1), _ignore, 50.0, 1.0)
    conn = sqlite3.connect(db)
    lo, hi = conn.execute("SELECT min(ts), max(ts) FROM samples").fetchone()
    span = hi - lo + 1_000_000  # UtcInstant: integer microseconds on SQLite
    for k in range(1, int(minutes / BOX_MINUTES) + 1):
        conn.execute(
            "INSERT OR IGNORE INTO samples SELECT series_id, ts + ?, value * (1 + 0.001 * ?) "
            "FROM samples WHERE ts <= ?",
            (k * span, k, hi),
        )
    conn.commit()
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    (rows,) = conn.execute("SELECT count(*) FROM samples").fetchone()
    conn.close()
    return db, rows


def _ignore(*_: Any) -> None:
    pass


def child(db: Path, variant: str) -> dict[str, float]:
    """One packing in this (fresh) process; its figures."""
    from agent.daemon.malloc import limit_arenas, trim

    limit_arenas()
    from sqlalchemy import text

    from agent.storage import raw
    from agent.storage.db import create_engine
    from agent.storage.rollup import Rollup
    from migrations.schema import from_micros

    if variant == "held":
        raw.compact = _compact_held
    work = db.with_name(f"work-{variant}.db")
    for stale in glob.glob(f"{work}*"):
        os.unlink(stale)
    shutil.copy(db, work)
    engine = create_engine(f"sqlite:///{work}", 5.0)
    with engine.connect() as conn:
        ids = list(conn.execute(text("SELECT DISTINCT series_id FROM samples")).scalars())
        last = from_micros(conn.execute(text("SELECT max(ts) FROM samples")).scalar_one())
        head_read = _timed_read(conn, ids, last)  # as a tick reads the latency windows
    trim()
    before = {"arenas": _arenas(), "anon": _anon()}
    peak = [before["anon"]]
    done = threading.Event()
    sampler = threading.Thread(target=_sample, args=(peak, done), daemon=True)
    sampler.start()
    rollup = Rollup(engine, "bench-box", 1.0)
    began = time.perf_counter()
    rollup._compact(raw.block_of(last) + timedelta(seconds=rollup.max_gap + 1))
    seconds = time.perf_counter() - began
    done.set()
    sampler.join()
    trim()
    after = {"arenas": _arenas(), "anon": _anon()}
    with engine.connect() as conn:  # the same window once the hour it reaches is packed
        chunk_read = _timed_read(conn, ids, last)
    trim()
    engine.dispose()
    return {"seconds": seconds, "arenas_before": before["arenas"], "arenas_after": after["arenas"],
            "anon_before": before["anon"], "anon_peak": max(peak), "anon_after": after["anon"],
            "head_read": head_read, "chunk_read": chunk_read,
            "chunk_read_kept": _anon() - after["anon"]}  # fmt: skip


def _timed_read(conn: Any, ids: list[int], last: datetime) -> float:
    from agent.storage import raw

    began = time.perf_counter()
    window = raw.read(conn, ids, last - timedelta(minutes=5), last)
    seconds = time.perf_counter() - began
    del window
    return seconds


def _compact_held(conn: Any, ids: Any, start: datetime, until: datetime) -> datetime:
    """The baseline: ``raw.compact`` as it was, the batch's rows held as objects at once."""
    from sqlalchemy import delete, insert, select

    from agent.storage import raw
    from agent.storage.chunk_codec import encode
    from migrations.schema import from_micros, sample_chunks, samples

    begin = raw.block_of(start)
    end = min(raw.block_of(until), begin + raw.MAX_BLOCKS_PER_RUN * raw.BLOCK)
    if end <= begin:
        return begin
    c = samples.c
    in_range = c.series_id.in_(ids) & (c.ts >= begin) & (c.ts < end)
    query = select(c.series_id, raw._micros(conn, c.ts), c.value).where(in_range)
    rows = conn.execute(query.order_by(c.series_id, c.ts)).all()
    packed: dict[tuple[int, int], list[tuple[int, float]]] = defaultdict(list)
    for sid, micros, value in rows:
        packed[(sid, micros - micros % raw.BLOCK_MICROS)].append((micros, value))
    del rows
    if packed:
        chunks = [{"series_id": sid, "start": from_micros(block), "count": len(points),
                   "data": encode(points)} for (sid, block), points in packed.items()]  # fmt: skip
        conn.execute(delete(sample_chunks).where(raw._chunk_keys(packed)))
        conn.execute(insert(sample_chunks), chunks)
        conn.execute(delete(samples).where(in_range))
    return end


def _sample(peak: list[float], done: threading.Event) -> None:
    while not done.wait(0.05):
        peak.append(_anon())


def _anon() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no RssAnon in /proc/self/status")


def _arenas() -> float:
    """Python's allocator arenas in use (sys._debugmallocstats writes them to stderr)."""
    read, write = os.pipe()
    saved = os.dup(2)
    os.dup2(write, 2)
    try:
        sys._debugmallocstats()
    finally:
        os.dup2(saved, 2)
        os.close(write)
        os.close(saved)
    with os.fdopen(read) as out:
        for line in out:
            if line.startswith("# arenas allocated current"):
                return float(line.split("=")[-1].strip().replace(",", ""))
    raise RuntimeError("no arena count in sys._debugmallocstats()")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--child", nargs=2, metavar=("DB", "VARIANT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(Path(args.child[0]), args.child[1])))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        db, rows = make_box(Path(tmp), args.minutes)
        results = {v: _run_child(db, v) for v in VARIANTS}
    print(
        f"packing {rows:,} head rows ({args.minutes:g} minutes of a 1 s box), fresh process each:"
    )
    for variant, r in results.items():
        name = "streamed (the daemon now)" if variant == "streamed" else "baseline: rows held"
        print(
            f"  {name:26s} {r['seconds']:5.1f} s   arenas {r['arenas_before']:.0f} -> "
            f"{r['arenas_after']:.0f}   RssAnon {r['anon_before']:.1f} MB, peak "
            f"{r['anon_peak']:.1f}, after trim {r['anon_after']:.1f} "
            f"({r['anon_after'] - r['anon_before']:+.1f} MB)"
        )
    r = results["streamed"]
    print(
        f"a tick's 5-minute read of every series: {r['head_read'] * 1e3:.0f} ms from the head, "
        f"{r['chunk_read'] * 1e3:.0f} ms once the hour it reaches is packed (RssAnon kept "
        f"after it: {r['chunk_read_kept']:+.1f} MB); the daemon packs an hour only once its "
        "alert windows have left it (Rollup.head_reach)"
    )
    return 0


def _run_child(db: Path, variant: str) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, __file__, "--child", str(db), variant],
        capture_output=True, text=True, check=True, env=os.environ,
    )  # fmt: skip
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


if __name__ == "__main__":
    sys.exit(main())
