"""Benchmark: does the hourly packing's step in the daemon's memory level off? (issue 11)

    python bench/packing_memory.py [--minutes 40] [--sample-seconds 5] [--once]

bench/memory.py found the running daemon flat between its hourly jobs, but each hourly packing
(the rollup job packing the head's hour into chunks, 10-15 s at 1 s ticks while the ticks go
on) left RssAnon 0.1-0.4 MB higher: glibc heap pages, not Python objects nor SQLite's caches
(BENCHMARKS.md). Whether that levels off or adds up for as long as the box runs takes one
packing an hour to answer that way. Here the same daemon packs the same hour again about
every minute, with its 1 s ticks going on beside it as in life:

1. A box is prepared in a separate process (bench/storage_scenario.py's: 8 fake GPUs, 2 vLLM
   0.33 targets, 1 s ticks): 3 minutes of real ticks from 00:00, then the hour before 00:00
   filled with those 3 minutes' rows (one row per series and second, as an hour of ticks
   leaves), and a copy of that hour's rows kept aside.
2. This process runs the real daemon (``Daemon.serve``: APScheduler, the ticker, the deadline
   thread, /metrics scraped every 15 s) on the real clock shifted to the box's 00:03, over the
   fake libnvidia-ml.so.1, the targets served from another process. Its minute job packs the
   hour before 00:00 at about 00:13, as a daemon does 13 minutes past every hour.
3. A controller process, after each packing, puts that hour's rows back and deletes the chunks
   and the packing's watermark, so the next minute job packs the same hour again. It writes
   in short transactions, as the daemon's own jobs do; the daemon's memory is not its own.

Every ``--sample-seconds`` a thread of this process reads its RssAnon (and glibc's
``mallinfo2``: the heaps' span and the bytes in use). Reported: the level before the first
packing (the median of the 5 minutes before it: the baseline, measured in the same run), the
median level between each packing and the next, and the least-squares slope per packing over
the second half of the packings, with its standard error. Where the steps level off, that
slope is flat (under 0.01 MB a packing, a quarter of a MB a day in life, or not above twice
its standard error); where they add up, it is their size. Also the slope of RssAnon against
time over the second half of the run (outside the packings): a young daemon still drifts
up for reasons of its own (caches and windows filling), so ``--once`` runs the same daemon
packing the hour only once, and the two drifts side by side (two runs at once, under the
same load) say what the packing again and again adds.

The hour fits about 55 packings: the run stops before the box's 01:10, when the daemon would
pack its own live hour too. MB here means MiB, as in bench/memory.py. Linux only (/proc);
the glibc figures are left out off glibc.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.memory import Fit, free_port, least_squares, proc_kb, scraping  # noqa: E402
from bench.storage_scenario import T0, config_text  # noqa: E402

MINUTE_FILL = 180  # seconds of real ticks copied over the hour before T0
HOUR_US = 3600 * 10**6
FILLED_FROM_US = int(T0.timestamp()) * 10**6 - HOUR_US  # the hour the daemon packs again
LIVE_FROM = T0 + timedelta(seconds=MINUTE_FILL)
MAX_MINUTES = 64  # from the box's 00:03: stop before it packs its own first hour (01:13)
FLAT_MB_PER_PACKING = 0.01  # a quarter of a MB a day at one packing an hour


# -- 1. the box, prepared in its own process ------------------------------------------------


def prepare(folder: Path) -> None:
    """3 minutes of 1 s ticks from T0, the hour before T0 filled with their rows, and a copy
    of that hour kept in ``saved.db``."""
    from agent.storage.db import upgrade_database
    from bench.storage import load_fake_nvml
    from bench.storage_scenario import run_box

    load_fake_nvml(folder)
    url = f"sqlite:///{folder}/gw.db"
    upgrade_database(url)
    run_box(folder, url, MINUTE_FILL / 3600, timedelta(hours=1), lambda *_: None, 0.0, 1)
    start = int(T0.timestamp()) * 10**6
    with sqlite3.connect(folder / "gw.db") as conn:
        for k in range(1, 3600 // MINUTE_FILL + 1):
            conn.execute(
                "INSERT INTO samples SELECT series_id, ts - ?, value FROM samples "
                "WHERE ts >= ? AND ts < ?",
                (k * MINUTE_FILL * 10**6, start, start + MINUTE_FILL * 10**6),
            )
        conn.execute("ATTACH ? AS saved", (str(folder / "saved.db"),))
        conn.execute("CREATE TABLE saved.rows AS SELECT * FROM samples WHERE ts < ?", (start,))


# -- 3. the controller, in its own process ---------------------------------------------------


def control(folder: Path, once: bool) -> None:
    """After each packing of the filled hour, put it back; a line in packings.log each: when
    its first chunk was seen (the packing under way), when its watermark was (done), and
    when the hour was back. ``once``: log the first packing and stop there."""
    conn = sqlite3.connect(folder / "gw.db", timeout=60, isolation_level=None)
    conn.execute("ATTACH ? AS saved", (str(folder / "saved.db"),))
    ids = [sid for (sid,) in conn.execute("SELECT DISTINCT series_id FROM saved.rows")]
    started = None
    with (folder / "packings.log").open("a") as log:
        while True:
            time.sleep(0.5)
            if (
                started is None
                and conn.execute(
                    "SELECT 1 FROM sample_chunks WHERE start = ? LIMIT 1", (FILLED_FROM_US,)
                ).fetchone()
            ):
                started = time.time()
            if conn.execute("SELECT 1 FROM rollup_state WHERE job = 'compact'").fetchone():
                done = time.time()
                if not once:
                    restore(conn, ids)
                print(f"{started or done:.1f} {done:.1f} {time.time():.1f}", file=log, flush=True)
                started = None
                if once:
                    return


def restore(conn: sqlite3.Connection, ids: list[int]) -> None:
    """The filled hour's rows back in the head, its chunks and the packing's watermark gone
    (the daemon then starts packing from the head's first row again)."""
    with_lock(conn, "DELETE FROM sample_chunks WHERE start = ?", (FILLED_FROM_US,))
    for first in range(0, len(ids), 40):  # short transactions: a tick's write never waits long
        part = ",".join(str(sid) for sid in ids[first : first + 40])
        with_lock(conn, f"INSERT OR IGNORE INTO samples SELECT * FROM saved.rows "  # noqa: S608
                  f"WHERE series_id IN ({part})", ())  # fmt: skip
        time.sleep(0.2)
    with_lock(conn, "DELETE FROM rollup_state WHERE job = 'compact'", ())


def with_lock(conn: sqlite3.Connection, sql: str, params: tuple[object, ...]) -> None:
    conn.execute("BEGIN IMMEDIATE")
    conn.execute(sql, params)
    conn.execute("COMMIT")


def serve_engines() -> None:
    """The box's 2 targets; each completes a request and moves its gauges every second."""
    from agent.sim.server import EngineServer
    from agent.sim.traffic import Traffic
    from bench import storage_sim
    from bench.storage_scenario import ENGINES, HOST, MODELS, TARGETS, VERSION, drive

    storage_sim.install()
    servers = [
        EngineServer(VERSION, Traffic(MODELS, ENGINES, hostname=HOST)) for _ in range(TARGETS)
    ]
    for server in servers:
        server.start()
    print(" ".join(s.url for s in servers), flush=True)
    for n in range(10**9):
        time.sleep(1.0)
        for server in servers:
            drive(server.traffic, n)


# -- 2. the daemon, in this process ------------------------------------------------------------


@dataclass(frozen=True)
class Reading:
    at: float  # time.time()
    anon_mb: float
    heap_mb: float  # glibc's heaps' span (mallinfo2 arena); 0 off glibc
    in_use_mb: float  # glibc's bytes allocated (mallinfo2 uordblks)


class MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )  # fmt: skip
    ]


def glibc_heap() -> Callable[[], tuple[float, float]]:
    try:
        mallinfo2 = ctypes.CDLL("libc.so.6").mallinfo2
    except (OSError, AttributeError):
        return lambda: (0.0, 0.0)
    mallinfo2.restype = MallInfo2
    return lambda: (mallinfo2().arena / 2**20, mallinfo2().uordblks / 2**20)


def read_now(heap: Callable[[], tuple[float, float]]) -> Reading:
    return Reading(time.time(), proc_kb("/proc/self/status", "RssAnon"), *heap())


def run_daemon(folder: Path, urls: list[str], minutes: float, every: float) -> list[Reading]:
    from agent.collect.clock import utc_now
    from agent.config.settings import load_config
    from agent.daemon.service import Daemon
    from bench.storage import load_fake_nvml

    load_fake_nvml(folder)
    port = free_port()
    text = config_text(f"sqlite:///{folder}/gw.db", urls, 1)
    path = folder / "gpuwatch.toml"
    path.write_text(text.replace('metrics_listen = ""', f'metrics_listen = "127.0.0.1:{port}"'))
    offset = LIVE_FROM - utc_now()
    daemon = Daemon(None, load_config(str(path), {"HOME": "/nonexistent"}),
                    clock=lambda: utc_now() + offset)  # fmt: skip
    readings: list[Reading] = []
    heap = glibc_heap()

    def sample() -> None:
        began = time.monotonic()
        while time.monotonic() - began < minutes * 60:
            readings.append(read_now(heap))
            if len(readings) % 30 == 0:
                print(f"  {(time.monotonic() - began) / 60:5.1f} min  RssAnon "
                      f"{readings[-1].anon_mb:6.2f} MB  packings {len(read_marks(folder))}",
                      flush=True)  # fmt: skip
            time.sleep(every)
        daemon.request_stop()

    with scraping(port, threading.Event()):  # bench/memory.py's: GET /metrics every 15 s
        threading.Thread(target=sample, daemon=True).start()
        daemon.serve()
    return readings


@dataclass(frozen=True)
class Packing:
    started: float  # time.time() the controller saw its first chunk
    done: float  # ... its watermark
    restored: float  # ... the hour back in the head


def read_marks(folder: Path) -> list[Packing]:
    log = folder / "packings.log"
    lines = log.read_text().splitlines() if log.exists() else []
    return [Packing(*map(float, line.split())) for line in lines if line]


# -- the report ----------------------------------------------------------------------------------


def levels(readings: list[Reading], marks: list[Packing]) -> list[float]:
    """The median RssAnon of the 5 minutes before the first packing, then of each stretch
    from one packing's hour being back to the next packing's start (the last: to the end)."""
    first = marks[0].started - 2  # a batch or two may be done before its chunk is seen
    before = [r.anon_mb for r in readings if first - 300 <= r.at < first]
    out = [statistics.median(before)]
    nexts = [m.started - 2 for m in marks[1:]] + [readings[-1].at + 1]
    for mark, next_start in zip(marks, nexts, strict=True):
        stretch = [r.anon_mb for r in readings if mark.restored <= r.at < next_start]
        if stretch:
            out.append(statistics.median(stretch))
    return out


def report(readings: list[Reading], marks: list[Packing]) -> None:
    if not marks:
        print("no packing happened: nothing to report")
        return
    lv = levels(readings, marks)
    print(f"\nRssAnon before the first packing (median of 5 min): {lv[0]:.2f} MB  (baseline)")
    for n, level in enumerate(lv[1:], 1):
        print(f"  after packing {n:2d}: {level:6.2f} MB  ({level - lv[0]:+.2f} on the baseline)")
    half = lv[len(lv) // 2 :]
    fit = least_squares([(3600.0 * i, y) for i, y in enumerate(half)])  # per-"hour" = per packing
    flat = fit.slope < FLAT_MB_PER_PACKING or fit.slope <= 2 * fit.stderr
    verdict = "levelled off" if flat else "still adding up"
    print(f"second half ({len(half)} levels): {fit.slope:+.3f} MB per packing "
          f"(stderr {fit.stderr:.3f}): {verdict}")  # fmt: skip
    drift = time_slope(readings, marks)
    print(f"RssAnon over the second half of the time after the first packing: "
          f"{drift.slope:+.2f} MB/h (stderr {drift.stderr:.2f})")  # fmt: skip
    first, last = readings[0], readings[-1]
    if first.heap_mb:
        print(f"glibc heaps' span {first.heap_mb:.2f} -> {last.heap_mb:.2f} MB, in use "
              f"{first.in_use_mb:.2f} -> {last.in_use_mb:.2f} MB")  # fmt: skip
    print(f"highest RssAnon read: {max(r.anon_mb for r in readings):.2f} MB; "
          f"{len(marks)} packings")  # fmt: skip


def time_slope(readings: list[Reading], marks: list[Packing]) -> Fit:
    """RssAnon against time over the second half of the run after the first packing, outside
    the packings themselves: with ``--once``, the drift a run has without packing again."""
    after = [
        r
        for r in readings
        if r.at >= marks[0].restored and not any(m.started - 2 <= r.at < m.restored for m in marks)
    ]
    if not after:
        return Fit(0.0, float("inf"), 0.0)
    middle = (after[0].at + after[-1].at) / 2
    return least_squares([(r.at, r.anon_mb) for r in after if r.at >= middle])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=40.0)
    parser.add_argument("--sample-seconds", type=float, default=5.0)
    parser.add_argument("--prepare", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--control", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--engines", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--json", type=Path, help="also write every reading, as JSON lines")
    parser.add_argument(
        "--once",
        action="store_true",
        help="pack the hour once only (the run's drift without packings, to compare)",
    )
    args = parser.parse_args()
    if args.prepare:
        prepare(args.prepare)
        return 0
    if args.control:
        control(args.control, args.once)
        return 0
    if args.engines:
        serve_engines()
        return 0
    if not 15 <= args.minutes <= MAX_MINUTES:
        parser.error(f"--minutes from 15 (the first packing is 10-11 minutes in) to "
                     f"{MAX_MINUTES} (the box's own hour is packed at 01:13)")  # fmt: skip
    return bench(args.minutes, args.sample_seconds, args.json, args.once)


def bench(minutes: float, every: float, json_path: Path | None, once: bool) -> int:
    me = [sys.executable, str(Path(__file__).resolve())]
    folder = Path(tempfile.mkdtemp(prefix="packing-memory-"))
    try:
        print(f"preparing the box in {folder} (3 minutes of 1 s ticks, then the hour filled)")
        subprocess.run([*me, "--prepare", str(folder)], check=True)
        engines = subprocess.Popen([*me, "--engines"], stdout=subprocess.PIPE, text=True)
        controller = subprocess.Popen(
            [*me, "--control", str(folder), *(["--once"] if once else [])]
        )
        try:
            assert engines.stdout is not None
            urls = engines.stdout.readline().split()
            print(f"the daemon from the box's {LIVE_FROM:%H:%M}, for {minutes:g} min")
            readings = run_daemon(folder, urls, minutes, every)
        finally:
            controller.kill()
            engines.kill()
        marks = read_marks(folder)
        if json_path:
            json_path.write_text("".join(json.dumps(r.__dict__) + "\n" for r in readings))
        report(readings, marks)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
