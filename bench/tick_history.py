"""Benchmark: does a tick get dearer as the database fills? (issue 14)

    python bench/tick_history.py [--hours 24] [--every-minutes 60]

The box of bench/storage.py (8 fake GPUs, 2 vLLM 0.33 targets of 2 models x 2 data-parallel
engines, every histogram) ticked by the daemon's own App every 10 s of simulated time, with the
minute job, over a day (bench/storage_scenario.py), on SQLite. At each checkpoint it prints the
median tick of the period just run (``App.tick``: collect, store, alert inputs and evaluation)
next to its baseline, measured in the same period: the scrape-and-parse floor of the same
bodies (a GET of each target and prometheus_client's parse of it, keeping the families a mapper
reads, one after the other), taken right after every 10th tick, so both see the same machine
(a shared machine's load moves both alike).

Targets (issue 14): a tick with engines at most 3 x the floor, and no growth from the first hour
to the last (flat within noise).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from agent.daemon.app import App  # noqa: E402
from bench.storage import load_fake_nvml  # noqa: E402
from bench.storage_scenario import Checkpoint, Run, run_box  # noqa: E402
from collectors.engines.exposition import Exposition  # noqa: E402
from collectors.engines.registry import read_by_a_mapper  # noqa: E402
from collectors.scrape import ACCEPT, ScrapeCollector  # noqa: E402

RATIO_TARGET = 3.0
FLOOR_EVERY = 10  # ticks between two floor measurements


@dataclass
class Periods:
    """Per period: the ticks' and the floors' durations; the median of each at its end."""

    rows: list[tuple[float, float, float]] = field(default_factory=list)  # (hours, tick, floor)
    ticks: list[float] = field(default_factory=list)
    floors: list[float] = field(default_factory=list)
    client: httpx.Client = field(default_factory=lambda: httpx.Client(timeout=10))

    def timed_tick(self, tick: Callable[[App, datetime], Any]) -> Callable[[App, datetime], Any]:
        def timed(app: App, now: datetime) -> Any:
            began = time.perf_counter()
            out = tick(app, now)
            self.ticks.append(time.perf_counter() - began)
            if len(self.ticks) % FLOOR_EVERY == 0:
                self.floors.append(self.floor(app))
            return out

        return timed

    def floor(self, app: App) -> float:
        """GET and parse each target's body, one after the other."""
        urls = [c.spec.url for c in app.runner.collectors if isinstance(c, ScrapeCollector)]
        began = time.perf_counter()
        for url in urls:
            body = self.client.get(url, headers={"Accept": ACCEPT}).text
            Exposition.parse(body, keep=read_by_a_mapper)
        return time.perf_counter() - began

    def __call__(self, app: App, run: Run, at: Checkpoint) -> None:
        hours = run.ticks * run.config.daemon.interval_seconds / 3600
        tick = statistics.median(self.ticks)
        base = statistics.median(self.floors or [self.floor(app)])
        self.rows.append((hours, tick, base))
        print(
            f"{hours:5.1f} h  {run.ticks:6d} ticks  tick median {tick * 1e3:7.1f} ms   floor "
            f"median {base * 1e3:6.1f} ms ({len(self.floors)})   ratio {tick / base:4.2f}",
            flush=True,
        )
        self.ticks, self.floors = [], []


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hours", type=float, default=24.0)
    parser.add_argument("--every-minutes", type=float, default=60.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        load_fake_nvml(folder)
        periods = Periods()
        App.tick = periods.timed_tick(App.tick)  # type: ignore[method-assign,assignment]
        url = f"sqlite:///{folder / 'gpuwatch.db'}"
        run_box(folder, url, args.hours, timedelta(minutes=args.every_minutes), periods, 50.0)
        size = (folder / "gpuwatch.db").stat().st_size / 1e6
    first, last = periods.rows[0], periods.rows[-1]
    worst = max(tick / base for _, tick, base in periods.rows)
    print(f"database at the end: {size:.0f} MB")
    print(f"first period {first[1] * 1e3:.1f} ms, last {last[1] * 1e3:.1f} ms median tick "
          f"({(last[1] / first[1] - 1) * 100:+.0f} %)")  # fmt: skip
    verdict = "OK" if worst <= RATIO_TARGET else "OVER TARGET"
    print(
        f"target: tick <= {RATIO_TARGET:g} x floor in every period: worst {worst:.2f} -> {verdict}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
