"""Benchmark: how long does `gpuwatch demo` take to generate its month of history, next to the
same rounds written as plain store writes?

    python bench/demo.py [--days 30]

Measured: the generation of ``--days`` of history as `gpuwatch demo` runs it
(agent.demo.history: per host, a process running the daemon's App over the fake NVML and the
fast-forwarded scrapes, one round per simulated hour, the store in batches, the alert rules
after each batch, the rollups with the cost ledger once a simulated day), wall time and CPU
time (this process and its children). Baseline, in the same run: the same number of rounds,
each as large as a real round of its host (taken from one real collection), written with
``Store.write_rounds`` in the same batches into a fresh database, one host after the other,
nothing else. The rest of the difference is the collection, the rules and the rollups, which
the daemon pays too. Target: the 30 days within a minute on a 2-core machine.
"""

from __future__ import annotations

import argparse
import logging
import resource
import sys
import tempfile
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from agent.collect.runner import CollectorRun, Round  # noqa: E402
from agent.demo import history, prepare  # noqa: E402
from agent.demo.scenario import HOSTS  # noqa: E402
from agent.demo.settings import DemoFiles  # noqa: E402
from agent.storage.db import open_database  # noqa: E402
from agent.storage.store import Store  # noqa: E402
from collectors.base import Sample  # noqa: E402

TARGET_SECONDS = 60.0  # for 30 days


def cpu_seconds() -> float:
    own, kids = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def generation(folder: Path, days: int) -> tuple[float, float, int]:
    files = DemoFiles(folder)
    now = datetime.now(UTC)
    month = prepare.month_ending(now, days)
    prepare.fresh_database(files)
    prepare.nvml(files)
    wall, cpu = time.perf_counter(), cpu_seconds()
    rounds = history.generate(files, month, now=now)
    return time.perf_counter() - wall, cpu_seconds() - cpu, rounds


def templates(folder: Path) -> list[Round]:
    """One real round of each host, as its App collects it."""
    files = DemoFiles(folder)
    month = prepare.month_ending(datetime.now(UTC), 1)
    prepare.fresh_database(files)
    found = []
    for host in HOSTS:
        run = history.open_host(files, host, month, history.HISTORY_INTERVAL)
        try:
            found.append(run.app.collect(month.start + timedelta(hours=12)))
        finally:
            run.close()
    return found


def moved(template: Round, at: datetime) -> Round:
    def shift(samples: tuple[Sample, ...]) -> tuple[Sample, ...]:
        return tuple(replace(s, ts=at) for s in samples)

    runs = tuple(
        CollectorRun(r.collector, at, r.success, r.duration_seconds, shift(r.samples), r.error,
                     r.target)
        for r in template.runs
    )  # fmt: skip
    return Round(ts=at, runs=runs, derived=shift(template.derived))


def baseline(folder: Path, rounds: int, shapes: list[Round]) -> tuple[float, float]:
    engine = open_database(f"sqlite:///{folder / 'baseline.db'}")
    start = datetime.now(UTC) - timedelta(days=40)
    per_host = rounds // len(shapes)
    batches = []
    for host, shape in zip(HOSTS, shapes, strict=True):
        series = [moved(shape, start + timedelta(hours=i)) for i in range(per_host)]
        batches.append((host.name, series))
    wall, cpu = time.perf_counter(), cpu_seconds()
    for host_name, series in batches:
        store = Store(engine, host_name)
        for first in range(0, len(series), history.BATCH):
            store.write_rounds(series[first : first + history.BATCH])
    took = time.perf_counter() - wall, cpu_seconds() - cpu
    engine.dispose()
    return took


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--days", type=int, default=30)
    args = parser.parse_args()
    logging.disable(logging.ERROR)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        wall, cpu, rounds = generation(root / "demo", args.days)
        print(f"demo history, {args.days} days, {len(HOSTS)} hosts: {rounds} rounds")
        print(
            f"  generation (collect, store, rules, rollups): {wall:6.1f} s wall, {cpu:6.1f} s CPU"
        )
        shapes = templates(root / "shapes")
        samples = sum(len(r.tagged_samples()) for r in shapes) // len(shapes)
        base_wall, base_cpu = baseline(root / "shapes", rounds, shapes)
    print(f"  (a round holds ~{samples} samples)")
    print(f"  baseline (the same rounds, plain writes):    {base_wall:6.1f} s wall, "
          f"{base_cpu:6.1f} s CPU")  # fmt: skip
    print(f"  ratio: {wall / base_wall:.1f} x wall, {cpu / base_cpu:.1f} x CPU")
    limit = TARGET_SECONDS * args.days / 30
    ok = "OK" if wall < limit else "OVER TARGET"
    print(f"target: {args.days} days generated in < {limit:.0f} s (a minute a month) -> "
          f"{wall:.1f} s, {ok}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
