"""Benchmark: a 1 s tick with its alert windows full, the latency windows read every 10 s.

    python bench/tick_short.py [--interval 1] [--minutes 7]

The box of bench/storage.py (8 fake GPUs, 2 vLLM 0.33 targets of 2 models x 2 data-parallel
engines, every histogram) ticked by the daemon's own App every ``--interval`` seconds of
simulated time, with the minute job, on SQLite (bench/storage_scenario.py), twice in one run:

- as the daemon runs it: ``LatencyP99Spike`` reads its 5-minute histogram windows every 10 s
  (agent.alerting.inputs.LatencyCadence);
- the baseline: the same box with those windows read every tick (as before the cadence).

Printed for the ticks after the first 5 minutes (the windows full): the median and the 90th
percentile of ``App.tick`` (collect, store, alert inputs and evaluation) and the mean of its
database call (the write and the evaluation, what the 1 s deadline bounds) and that mean as a
share of the interval.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import agent.daemon.app as app_module  # noqa: E402
from agent.alerting.inputs import LatencyCadence  # noqa: E402
from agent.daemon.app import App  # noqa: E402
from bench.storage import load_fake_nvml  # noqa: E402
from bench.storage_scenario import run_box  # noqa: E402

WINDOW_SECONDS = 300  # the latency rule's window: ticks before it are not counted


@dataclass
class Timings:
    interval: float
    ticks: list[float] = field(default_factory=list)
    database: list[float] = field(default_factory=list)

    def wrap(self, method: Callable[..., Any], into: list[float]) -> Callable[..., Any]:
        def timed(*args: Any) -> Any:
            began = time.perf_counter()
            try:
                return method(*args)
            finally:
                into.append(time.perf_counter() - began)

        return timed

    def summary(self) -> tuple[float, float, float]:
        skip = int(WINDOW_SECONDS / self.interval)
        ticks, database = self.ticks[skip:], self.database[skip:]
        return (
            statistics.median(ticks),
            statistics.quantiles(ticks, n=10)[-1],
            statistics.fmean(database),
        )


def run(folder: Path, interval: float, minutes: float, every: float | None) -> Timings:
    """One box; ``every`` None: the daemon's cadence, else the windows read every ``every`` s."""
    timings = Timings(interval)
    tick, write = App.tick, App._write_and_evaluate
    cadence = app_module.LatencyCadence
    App.tick = timings.wrap(tick, timings.ticks)  # type: ignore[method-assign]
    App._write_and_evaluate = timings.wrap(write, timings.database)  # type: ignore[method-assign]
    if every is not None:
        app_module.LatencyCadence = lambda seconds: LatencyCadence(seconds, every)  # type: ignore[misc,assignment]
    try:
        url = f"sqlite:///{folder / f'box-{every}.db'}"
        run_box(folder, url, minutes / 60, timedelta(hours=1), lambda *_: None, 50.0, interval)
    finally:
        App.tick, App._write_and_evaluate = tick, write  # type: ignore[method-assign]
        app_module.LatencyCadence = cadence  # type: ignore[misc]
    return timings


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--minutes", type=float, default=7.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        load_fake_nvml(folder)
        rows = [
            ("latency windows every 10 s (daemon)", run(folder, args.interval, args.minutes, None)),
            ("baseline: every tick", run(folder, args.interval, args.minutes, 0.0)),
        ]
    print(f"{args.interval:g} s ticks, {args.minutes:g} simulated minutes, counted after "
          f"{WINDOW_SECONDS} s:")  # fmt: skip
    for name, timings in rows:
        median, p90, database = timings.summary()
        print(
            f"  {name:38s} tick median {median * 1e3:6.1f} ms  p90 {p90 * 1e3:6.1f} ms  "
            f"database call mean {database * 1e3:6.1f} ms ({database / args.interval:5.1%} of the "
            "interval)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
