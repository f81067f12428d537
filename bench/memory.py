"""Benchmark: how much memory does the running daemon hold, and does it stay flat?

    python bench/memory.py [--minutes 60] [--warmup-minutes M] [--sample-seconds 5] [--csv PATH]

The real daemon (``gpuwatch run``, a subprocess with a temporary state directory, SQLite at its
default place, migrated beforehand by ``gpuwatch db upgrade`` as on every start but a box's
first) at ``interval_seconds = 1``, the shortest the configuration takes, over the fake
libnvidia-ml.so.1 with 8 busy H100s (GPM's gauges too) and 2 vLLM 0.33 targets served by the
engine simulator from this process (each 2 models x 2 data-parallel engines, every histogram;
gauges moving every 5 s, a request completing per engine a minute); this process scrapes the
daemon's /metrics every 15 s, as Prometheus would. Every ``--sample-seconds`` it reads the
daemon's RSS, PSS and the highest RSS since the reading before (VmHWM, reset after each reading
through /proc/PID/clear_refs: a 1 s tick holds about a megabyte more for its first tenth of a
second, which a reading at an instant misses).

Printed: RSS at the first stored tick, after the warm-up and at the end; the peak (the highest
VmHWM); the least-squares slopes of RSS and of the interval peaks after the warm-up, overall
and per whole hour; the median of each 10 minutes. The warm-up (default 15 minutes, a quarter
of shorter runs) is where caches, allocator pools and the alert windows fill. The hourly jobs
(the hour rollup, packing the head's hour into chunks about 13 minutes past the hour) first
run 60-75 minutes in and step the level by a few tenths of a MiB in a young daemon's first
hours: ``--minutes 165 --warmup-minutes 75`` measures the hour after the second packing.

Baselines, in the same run: a bare Python that imported pynvml and initialised NVML, and a
Python that imported what `gpuwatch run` imports and initialised NVML, without ticking (what
the code costs before any data).

MB here are MiB (/proc's kB over 1024, as ps, top and systemd's ``MemoryMax=`` count); the
target line also gives the peak in MB of 10**6 bytes. Targets: RSS at most 70 MiB, and flat:
a slope under 0.5 MiB/hour, or not above twice its own standard error (RSS moves in pages and
allocator chunks, so a perfectly level line is not expected).
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TextIO

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from agent.sim.render import content_type, render  # noqa: E402
from agent.sim.traffic import Traffic  # noqa: E402
from bench.common import busy_gpus, free_port, nvml_env  # noqa: E402

RSS_TARGET_MB = 70.0
MB_PER_MIB = 2**20 / 10**6  # the bench's MB are MiB; the target line also gives SI MB
FLAT_MB_PER_HOUR = 0.5  # below this a slope is noise whatever its standard error
MODELS = ("llama-3.1-8b", "qwen2.5-7b")
SCRAPE_SECONDS = 15.0  # how often Prometheus would scrape the daemon's /metrics
DAEMON = Path(sys.executable).parent / "gpuwatch"  # the console script of this environment

FLOOR_BARE = "import pynvml; pynvml.nvmlInit()"
FLOOR_IMPORTS = (
    "import pynvml; pynvml.nvmlInit(); "
    "import agent.cli.main, agent.daemon.service, collectors.nvml, collectors.scrape"
)
PRINT_RSS = "; print(open('/proc/self/status').read().split('VmRSS:')[1].split()[0])"


@dataclass(frozen=True)
class Reading:
    seconds: float  # since the daemon started
    rss_mb: float
    pss_mb: float
    anon_mb: float = 0.0  # RssAnon: heap, arenas, thread stacks, anonymous mappings
    file_mb: float = 0.0  # RssFile: mapped libraries and files (libpython, libsqlite3, ...)
    shmem_mb: float = 0.0  # RssShmem: shared mappings (SQLite's -shm file is RssFile)
    threads: int = 0
    peak_mb: float = 0.0  # the most RSS since the reading before (VmHWM; see the docstring)


@dataclass(frozen=True)
class Fit:
    slope: float  # MB per hour
    stderr: float  # of the slope, MB per hour
    residual: float  # standard deviation of the samples around the line, MB

    @property
    def flat(self) -> bool:
        return self.slope < FLAT_MB_PER_HOUR or self.slope <= 2 * self.stderr


def least_squares(points: list[tuple[float, float]]) -> Fit:
    """Slope (per hour) of y over x (seconds), its standard error, and the residual spread."""
    n = len(points)
    if n < 3:
        return Fit(0.0, math.inf, 0.0)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    slope = sum((x - mx) * (y - my) for x, y in points) / sxx
    sse = sum((y - my - slope * (x - mx)) ** 2 for x, y in points)
    stderr = math.sqrt(sse / (n - 2) / sxx)
    return Fit(slope * 3600, stderr * 3600, math.sqrt(sse / n))


def proc_kb(path: str, field: str) -> float:
    for line in Path(path).read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in {path}")


def read(pid: int, started: float) -> Reading:
    status = f"/proc/{pid}/status"
    rss = proc_kb(status, "VmRSS")
    pss = proc_kb(f"/proc/{pid}/smaps_rollup", "Pss")
    anon, file, shmem = (proc_kb(status, f) for f in ("RssAnon", "RssFile", "RssShmem"))
    threads = int(proc_kb(status, "Threads") * 1024)
    peak = max(rss, proc_kb(status, "VmHWM"))
    reset_peak(pid)
    return Reading(time.monotonic() - started, rss, pss, anon, file, shmem, threads, peak)


def reset_peak(pid: int) -> bool:
    """Start the process's VmHWM over from its RSS now (Linux 4.0+: ``5`` to clear_refs), so
    the next reading's VmHWM is the peak of the interval between. False where not allowed:
    the next peak is then the highest since start, or since the last reset."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def smaps_summary(pid: int) -> dict[str, float]:
    """Rss (MB) per kind of mapping: [heap], [stack], anonymous, and each mapped file."""
    out: dict[str, float] = {}
    name = "?"
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        head = line.split()
        if head and "-" in head[0] and ":" not in head[0]:
            name = head[5] if len(head) > 5 else "[anon]"
        elif line.startswith("Rss:"):
            out[name] = out.get(name, 0.0) + int(head[1]) / 1024
    return out


def floor_mb(code: str, env: dict[str, str]) -> float:
    done = subprocess.run(
        [sys.executable, "-c", code + PRINT_RSS],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    return int(done.stdout) / 1024


def traffic() -> Traffic:
    t = Traffic(models=MODELS, engines=2)
    for model in MODELS:
        for engine in t.engines:
            t.serve(24, model=model, engine=engine)
            t.set_gauges(model=model, engine=engine, running=7, waiting=3, kv_usage=0.62)
    return t


class Engine:
    """One vLLM target: the simulator's exposition, re-rendered in the background and served as
    ready bytes, the way an engine answers from its registry.

    The simulator keeps every request and a render reads them all (seconds at a few thousand),
    so requests complete slowly (one per engine a minute) while the gauges move every render;
    rendering off the request path keeps each scrape well inside the daemon's timeout for the
    whole hour, on a small machine shared with the daemon."""

    def __init__(self) -> None:
        self.traffic = traffic()
        self.body = render("vllm-0.33", self.traffic).encode()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/metrics"

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        engine = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                body = engine.body
                self.send_response(200)
                self.send_header("Content-Type", content_type("vllm-0.33"))
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: object) -> None:
                pass

        return Handler

    def step(self, n: int) -> None:
        t = self.traffic
        for model in MODELS:
            for engine in t.engines:
                if n % 12 == 0:
                    t.serve(1, model=model, engine=engine)
                t.set_gauges(model=model, engine=engine, running=n % 9, waiting=n % 4,
                             kv_usage=(n % 100) / 100)  # fmt: skip
        self.body = render("vllm-0.33", t).encode()


@contextmanager
def serving(engines: list[Engine], stop: threading.Event) -> Iterator[None]:
    """The targets' HTTP servers, and their state moving every 5 s."""

    def move() -> None:
        n = 0
        while not stop.wait(5.0):
            n += 1
            for e in engines:
                e.step(n)

    threads = [threading.Thread(target=e.server.serve_forever, daemon=True) for e in engines]
    threads.append(threading.Thread(target=move, daemon=True))
    for thread in threads:
        thread.start()
    try:
        yield
    finally:
        stop.set()
        for e in engines:
            e.server.shutdown()
            e.server.server_close()
        for thread in threads:
            thread.join()


@contextmanager
def scraping(port: int, stop: threading.Event) -> Iterator[list[int]]:
    """GET the daemon's /metrics every 15 s, like Prometheus; yields the count of answers."""
    answered = [0]

    def scrape() -> None:
        while not stop.wait(SCRAPE_SECONDS):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                    r.read()
                answered[0] += 1
            except OSError:
                pass

    thread = threading.Thread(target=scrape, daemon=True)
    thread.start()
    try:
        yield answered
    finally:
        stop.set()
        thread.join()


def write_daemon_config(work: Path, urls: list[str], metrics_port: int) -> Path:
    targets = "".join(
        f'[[targets]]\nname = "vllm-{i}"\nurl = "{url}"\nengine = "vllm"\n\n'
        for i, url in enumerate(urls)
    )
    config = work / "gpuwatch.toml"
    config.write_text(
        'host = "bench"\n'
        f'[daemon]\ninterval_seconds = 1\nmetrics_listen = "127.0.0.1:{metrics_port}"\n\n' + targets
    )
    return config


def ticks_stored(state: Path) -> int:
    db = next(state.glob("*.db"), None)
    if db is None:
        return 0
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
            query = "SELECT count(*) FROM collector_runs WHERE collector = 'nvml'"
            (count,) = conn.execute(query).fetchone()
    except sqlite3.Error:
        return -1  # the schema changed under the bench: the count is a courtesy, not a figure
    return int(count)


def wait_first_tick(proc: subprocess.Popen[bytes], state: Path) -> None:
    """The clock starts at the first stored tick: start-up (imports, migrations) is not drift."""
    deadline = time.monotonic() + 120
    while ticks_stored(state) < 1:
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("the daemon did not tick")
        time.sleep(0.2)


CSV_HEADER = "utc,seconds,rss_mb,pss_mb,anon_mb,file_mb,shmem_mb,threads,peak_mb"


def csv_line(r: Reading) -> str:
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return (f"{at},{r.seconds:.1f},{r.rss_mb:.2f},{r.pss_mb:.2f},{r.anon_mb:.2f},"
            f"{r.file_mb:.2f},{r.shmem_mb:.2f},{r.threads},{r.peak_mb:.2f}")  # fmt: skip


def sample_daemon(
    proc: subprocess.Popen[bytes], seconds: float, every: float, sink: TextIO | None
) -> list[Reading]:
    """Readings every ``every`` s for ``seconds``; each also goes to ``sink`` as it is taken,
    so a long run's readings survive the run being stopped, and can be read while it runs."""
    started = time.monotonic()
    readings: list[Reading] = []
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"the daemon exited with {proc.returncode}")
        readings.append(read(proc.pid, started))
        if sink is not None:
            print(csv_line(readings[-1]), file=sink, flush=True)
        elapsed = time.monotonic() - started
        if elapsed >= seconds:
            return readings
        if len(readings) % 60 == 0:
            last = readings[-1]
            mins = elapsed / 60
            print(
                f"  {mins:5.1f} min  RSS {last.rss_mb:6.1f} MB  PSS {last.pss_mb:6.1f} MB  "
                f"anon {last.anon_mb:6.1f}  file {last.file_mb:5.1f}  shmem {last.shmem_mb:4.1f}"
                f"  threads {last.threads}  peak {last.peak_mb:6.1f} MB",
                flush=True,
            )
        time.sleep(min(every, max(0.0, seconds - elapsed)))


def row(name: str, rss: float, extra: str = "") -> None:
    print(f"{name:<58} RSS {rss:6.1f} MB{extra}")


def report(readings: list[Reading], warmup: float, floors: dict[str, float], ticks: int) -> None:
    after = [r for r in readings if r.seconds >= warmup]
    start, end = readings[0], readings[-1]
    warm = after[0] if after else end
    peak = max(readings, key=lambda r: r.peak_mb)
    fit = least_squares([(r.seconds, r.rss_mb) for r in after])
    peaks = least_squares([(r.seconds, r.peak_mb) for r in after])
    pss = least_squares([(r.seconds, r.pss_mb) for r in after])
    print()
    for name, value in floors.items():
        row(f"floor: {name}", value)
    row("daemon at its first stored tick", start.rss_mb)
    row(f"daemon after warm-up ({warm.seconds / 60:.1f} min)", warm.rss_mb)
    row(f"daemon at the end ({end.seconds / 60:.1f} min, {ticks} ticks)", end.rss_mb,
        f"  PSS {end.pss_mb:6.1f} MB")  # fmt: skip
    row(f"daemon peak (VmHWM, the interval ending at {peak.seconds / 60:.1f} min)", peak.peak_mb)
    row("daemon's highest RSS read at a sampling instant", max(r.rss_mb for r in readings))
    print(
        f"at the end: RssAnon {end.anon_mb:.1f} MB, RssFile {end.file_mb:.1f} MB, "
        f"RssShmem {end.shmem_mb:.1f} MB, {end.threads} threads "
        f"(first tick: anon {start.anon_mb:.1f}, file {start.file_mb:.1f}, "
        f"{start.threads} threads; most threads {max(r.threads for r in readings)})"
    )
    anon = least_squares([(r.seconds, r.anon_mb) for r in after])
    print(f"slope after warm-up: RssAnon {anon.slope:+.2f} MB/h (stderr {anon.stderr:.2f})")
    print(f"slope after warm-up ({len(after)} samples): RSS {fit.slope:+.2f} MB/h "
          f"(stderr {fit.stderr:.2f}, residual {fit.residual:.2f} MB); "
          f"PSS {pss.slope:+.2f} MB/h (stderr {pss.stderr:.2f})")  # fmt: skip
    print(f"slope after warm-up: peak RSS of each interval {peaks.slope:+.2f} MB/h "
          f"(stderr {peaks.stderr:.2f}, residual {peaks.residual:.2f} MB)")  # fmt: skip
    for first, fit_h in hourly_fits(after, "rss_mb"):
        print(f"  the hour from {first / 60:.0f} min: RSS {fit_h.slope:+.2f} MB/h "
              f"(stderr {fit_h.stderr:.2f})")  # fmt: skip
    for first, fit_h in hourly_fits(after, "peak_mb"):
        print(f"  the hour from {first / 60:.0f} min: interval peaks {fit_h.slope:+.2f} MB/h "
              f"(stderr {fit_h.stderr:.2f})")  # fmt: skip
    print("median RSS per 10 minutes (MB):", levels(readings, "rss_mb"))
    print("median interval peak per 10 minutes (MB):", levels(readings, "peak_mb"))
    size = "OK" if peak.peak_mb <= RSS_TARGET_MB else "OVER TARGET"
    flat = "OK" if fit.flat and peaks.flat else "RISING"
    print(f"target: RSS <= {RSS_TARGET_MB:.0f} MB (MiB, as throughout; the peak "
          f"{peak.peak_mb:.1f}, or {peak.peak_mb * MB_PER_MIB:.1f} in MB of 10**6 bytes) "
          f"-> {size}")  # fmt: skip
    if end.seconds - warm.seconds < 1800:  # a slope over minutes is the warm-up's, not a leak's
        flat = "not judged: under 30 minutes after the warm-up"
    print(f"target: flat (slope < {FLAT_MB_PER_HOUR} MB/h or <= 2 x stderr) -> {flat}")


def hourly_fits(after: list[Reading], field: str) -> list[tuple[float, Fit]]:
    """The slope over each whole hour after warm-up: the daemon's hourly jobs (the hour
    rollup, the packing) first run in its first hour, and what they allocate once for good
    shows there; a leak rises in every hour."""
    fits = []
    start = after[0].seconds if after else 0.0
    while after and start + 3600 <= after[-1].seconds + 1:
        hour = [(r.seconds, getattr(r, field)) for r in after if start <= r.seconds < start + 3600]
        fits.append((start, least_squares(hour)))
        start += 3600
    return fits


def levels(readings: list[Reading], field: str) -> str:
    """The median of each 10 minutes of ``field``: the level, without short bumps."""
    by_ten: dict[int, list[float]] = {}
    for r in readings:
        by_ten.setdefault(int(r.seconds // 600), []).append(getattr(r, field))
    full = max((len(v) for v in by_ten.values()), default=0) / 2  # a last, short one left out
    medians = [statistics.median(v) for _, v in sorted(by_ten.items()) if len(v) > full]
    return " ".join(f"{m:.1f}" for m in medians)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--minutes", type=float, default=60.0, help="of sampling (default 60)")
    parser.add_argument("--sample-seconds", type=float, default=5.0)
    parser.add_argument(
        "--warmup-minutes", type=float, help="default: 15, or a quarter of shorter runs"
    )
    parser.add_argument(
        "--csv", type=Path, help="also write every reading (UTC, seconds, RSS, PSS), as taken"
    )
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # stop the daemon on the way out
    warmup = 60 * (args.warmup_minutes if args.warmup_minutes is not None
                   else min(15.0, args.minutes / 4))  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        work = Path(tmp)
        state = work / "state"
        state.mkdir(mode=0o700)
        env = {
            **os.environ,
            **nvml_env(work, busy_gpus(gpm=True)),  # H100s: GPM's gauges too
            "PYTHONPATH": str(REPO),
            "STATE_DIRECTORY": str(state),
            "HOME": str(work),  # no user config of whoever runs the bench
        }
        floors = {
            "python + pynvml initialised": floor_mb(FLOOR_BARE, env),
            "python + the daemon's imports, NVML initialised": floor_mb(FLOOR_IMPORTS, env),
        }
        stop = threading.Event()
        engines = [Engine(), Engine()]
        stack.enter_context(serving(engines, stop))
        port = free_port()
        config = write_daemon_config(work, [e.url for e in engines], port)
        # Every start but a box's first finds its database at the newest schema: migrate it first
        # (a separate process), so the daemon measured is the one that runs for months.
        upgrade = [str(DAEMON), "--log-level", "WARNING", "db", "upgrade", "--config", str(config)]
        subprocess.run(upgrade, env=env, cwd=work, check=True, stdout=subprocess.DEVNULL)
        command = [str(DAEMON), "--log-level", "WARNING", "run", "--config", str(config)]
        proc = subprocess.Popen(command, env=env, cwd=work)
        try:
            answered = stack.enter_context(scraping(port, stop))
            print(f"daemon pid {proc.pid}: sampling every {args.sample_seconds:g} s for "
                  f"{args.minutes:g} min (warm-up {warmup / 60:g} min)", flush=True)  # fmt: skip
            wait_first_tick(proc, state)
            maps_first = smaps_summary(proc.pid)
            sink = stack.enter_context(args.csv.open("w")) if args.csv else None
            if sink is not None:
                print(CSV_HEADER, file=sink, flush=True)
            readings = sample_daemon(proc, args.minutes * 60, args.sample_seconds, sink)
            ticks = ticks_stored(state)
            maps_end = smaps_summary(proc.pid)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
        print(f"/metrics scraped {answered[0]} times; exit code {proc.returncode}")
        report(readings, warmup, floors, ticks)
        print_mappings(maps_first, maps_end)
    return 0


def print_mappings(first: dict[str, float], end: dict[str, float]) -> None:
    """The largest mappings at the end and what each gained since the first tick."""
    print("RSS by mapping (MB): at the end, and since the first tick")
    for name in sorted(end, key=lambda n: -end[n])[:8]:
        print(f"  {end[name]:6.1f}  {end[name] - first.get(name, 0.0):+6.1f}  {name}")


if __name__ == "__main__":
    sys.exit(main())
