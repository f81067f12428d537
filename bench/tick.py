"""Benchmark: one collection tick for 8 GPUs, and the running daemon's resident memory.

    make bench          (or: python bench/tick.py [--ticks N] [--database-url URL])

Runs over the fake libnvidia-ml.so.1 (tests/fakenvml), so the figures measure gpuwatch's own
cost, not a driver's. Each figure is printed next to its baseline, measured in the same run:

- the floor for a tick: a bare loop making exactly the pynvml calls the collector makes (recorded
  from one real collector round, then replayed with no Python of ours around them);
- the floor for memory: a bare Python process that imported pynvml and initialised NVML.

Targets (issue 2): tick (collect + database write) <= 2 x floor + 5 ms; daemon RSS <= 80 MB.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from agent.storage.db import upgrade_database  # noqa: E402
from bench.timing import ms, timed  # noqa: E402
from tests.fakenvml.build import (  # noqa: E402
    LIB_NAME,
    FakeGpu,
    FakeNvmlConfig,
    FakeProcess,
    GiB,
    build,
    write_config,
)

GPUS = 8
RSS_TARGET_MB = 80.0


def hardware() -> FakeNvmlConfig:
    """8 busy H100s, two serving processes each (vLLM-like: most of the memory)."""
    gpus = tuple(
        FakeGpu(uuid=f"GPU-{i:08x}-0000-0000-0000-000000000000", util=90 + i, used=70 * GiB)
        for i in range(GPUS)
    )
    procs = tuple(
        FakeProcess(gpu=i, pid=1000 + 2 * i + k, mem=(34 + k) * GiB)
        for i in range(GPUS)
        for k in range(2)
    )
    return FakeNvmlConfig(gpus=gpus, processes=procs)


def fake_library(work: Path) -> Path:
    prebuilt = os.environ.get("GPUWATCH_FAKE_NVML_DIR")
    if prebuilt and (Path(prebuilt) / LIB_NAME).is_file():
        return Path(prebuilt).resolve()
    build(work / "fakenvml")
    return work / "fakenvml"


class Recorder:
    """Stands in for the pynvml module once, to learn which calls a collector round makes."""

    def __init__(self, module: Any) -> None:
        self._module = module
        self.calls: list[tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]] = []

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._module, name)
        if not (callable(value) and name.startswith("nvml")) or name in (
            "nvmlInit",
            "nvmlShutdown",
        ):
            return value

        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append((value, args, kwargs))
            return value(*args, **kwargs)

        return call


def bench_tick(ticks: int, database_url: str) -> tuple[float, float]:
    import pynvml

    from agent.config.settings import load_config
    from agent.daemon.app import App
    from collectors.nvml import NvmlCollector

    t0 = datetime(2026, 11, 30, tzinfo=UTC)
    recorder = Recorder(pynvml)
    probe = NvmlCollector(host="bench", nvml=recorder)  # type: ignore[arg-type]
    probe.collect(t0)
    probe.collect(t0)  # the second round is the steady state: handles and names are cached
    first = len(recorder.calls)
    recorder.calls.clear()
    probe.collect(t0)
    calls = list(recorder.calls)
    probe.close()

    pynvml.nvmlInit()

    def floor(_: int) -> None:
        for fn, args, kwargs in calls:
            fn(*args, **kwargs)

    collector = NvmlCollector(host="bench")
    upgrade_database(database_url)  # the bench's own scratch database
    config = load_config(None, {"GPUWATCH_DATABASE_URL": database_url, "HOME": "/nonexistent"})
    app = App.open(config, collectors=[collector])

    def collect_only(i: int) -> None:
        collector.collect(t0 + timedelta(seconds=10 * i))

    def full_tick(i: int) -> None:
        app.tick(t0 + timedelta(days=1, seconds=10 * i))

    per_tick = len(app.runner.run(t0 - timedelta(days=1)).tagged_samples())

    floor_t = timed(floor, ticks)
    collect_t = timed(collect_only, ticks)
    tick_t = timed(full_tick, ticks)
    rows = len(app.store.samples("gpuwatch_gpu_utilization_ratio"))
    app.close()
    collector.close()

    print(f"pynvml calls per tick: {len(calls)} steady, {first} over the first two rounds")
    print(f"floor: bare pynvml loop, same calls   {ms(floor_t)}")
    print(f"collector only (samples, no database)  {ms(collect_t)}")
    print(f"tick: collect + store ({config_kind(database_url)})   {ms(tick_t)}")
    print(f"  ({per_tick} rows per tick; {rows} utilization rows over {ticks + 1} ticks)")
    return statistics.median(floor_t), statistics.median(tick_t)


def config_kind(url: str) -> str:
    return "SQLite" if url.startswith("sqlite") else "PostgreSQL"


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def bench_rss(work: Path, env: dict[str, str]) -> tuple[float, float]:
    floor_code = (
        "import pynvml, sys; pynvml.nvmlInit(); "
        "print(open('/proc/self/status').read().split('VmRSS:')[1].split()[0])"
    )
    bare = subprocess.run(
        [sys.executable, "-c", floor_code], env=env, capture_output=True, text=True, check=True
    )
    floor = int(bare.stdout) / 1024

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = work / "gpuwatch.toml"
    db = work / "daemon.db"
    config.write_text(
        f'host = "bench"\ndatabase_url = "sqlite:///{db}"\n'
        # 1 s: the shortest interval the configuration takes (shorter floods the database).
        f'[daemon]\ninterval_seconds = 1\nmetrics_listen = "127.0.0.1:{port}"\n'
    )
    command = ["-m", "agent.cli.main", "--log-level", "WARNING", "run", "--config", str(config)]
    proc = subprocess.Popen([sys.executable, *command], env=env, cwd=REPO)
    try:
        ticks = wait_for_ticks(db, 50)
        daemon = rss_mb(proc.pid)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    print(f"floor: python + pynvml initialised      RSS {floor:6.1f} MB")
    print(f"daemon after {ticks} ticks (8 GPUs, /metrics)  RSS {daemon:6.1f} MB")
    return floor, daemon


def wait_for_ticks(db: Path, wanted: int) -> int:
    import sqlite3

    deadline = time.monotonic() + 90  # 50 ticks at 1 s, and the start
    while time.monotonic() < deadline:
        time.sleep(0.2)
        if not db.exists():  # let the daemon create it (0600); connecting first would not
            continue
        try:
            with sqlite3.connect(db) as conn:
                (count,) = conn.execute("SELECT count(*) FROM collector_runs").fetchone()
        except sqlite3.Error:
            continue
        if count >= wanted:
            return int(count)
    raise RuntimeError("the daemon did not tick in time")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ticks", type=int, default=300)
    parser.add_argument("--database-url", help="default: SQLite in a temporary folder")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        libdir = fake_library(work)
        hw = write_config(work / "hardware.txt", hardware())
        os.environ["FAKE_NVML_CONFIG"] = str(hw)
        ctypes.CDLL(str(libdir / LIB_NAME))  # pynvml's dlopen by soname now finds the fake
        url = args.database_url or f"sqlite:///{work / 'bench.db'}"
        floor, tick = bench_tick(args.ticks, url)
        target = 2 * floor + 0.005
        verdict = "OK" if tick <= target else "OVER TARGET"
        print(f"target: tick <= 2 x floor + 5 ms = {target * 1e3:.3f} ms -> {verdict}")
        env = {**os.environ, "LD_LIBRARY_PATH": str(libdir), "PYTHONPATH": str(REPO)}
        _, daemon = bench_rss(work, env)
        rss_verdict = "OK" if daemon <= RSS_TARGET_MB else "OVER TARGET"
        print(f"target: daemon RSS <= {RSS_TARGET_MB:.0f} MB -> {rss_verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
