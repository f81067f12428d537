"""Benchmark: what does one collection tick cost, next to the least that collection can cost?

    python bench/tick.py [--ticks 300] [--hours 0.5] [--every-minutes M] [--interval S]
                         [--database-url URL] [--gpm-blocks 6]

A tick is the daemon's ``App.tick``: collect, store the round in one transaction, evaluate the
alert rules. It runs every interval for the daemon's whole life, so it must stay a small
multiple of what its collection cannot avoid, and must not grow as the database fills. Two
boxes, each next to its floor measured in the same run:

1. NVML only: 8 busy GPUs with two processes each over the fake libnvidia-ml.so.1,
   ``--ticks`` timed ticks after a warm-up, on SQLite (``--database-url`` for another
   database). Floor: a bare loop making exactly the pynvml calls a steady collector round
   makes (recorded from one real round), with no gpuwatch code around them.
   Target: tick <= 2 x floor + 5 ms.
   GPM: the tick over the same 8 GPUs with GPM (SM activity, occupancy, tensor and DRAM: the
   default gauges; two pynvml calls more per GPU) next to the same GPUs without it, each on
   its own SQLite, in ``--gpm-blocks`` alternating blocks of ``--ticks`` / blocks ticks each
   (each block after an untimed tick, so the fake's re-read of its hardware file when the
   file changes stays out); the collector's round alone printed beside it.
   Target: GPM tick <= 1.2 x without.
2. The full box (bench/box.py: the same 8 GPUs moving every tick, 2 vLLM 0.33 targets of 2
   models x 2 data-parallel engines, every histogram), ticked every ``--interval`` seconds of
   simulated time (default: the config's, 10 s) with the minute job, for ``--hours`` on
   SQLite. Every ``--every-minutes`` (default: a third of the run) it prints the period's
   median tick next to the median floor of the same bodies (a GET of each target and the
   parse of the families a mapper reads, one after the other, taken after every 10th tick, so
   both see the same machine), and the mean of the tick's database call (the write and the
   alert evaluation: what the tick's deadline bounds) as a share of the interval.
   Target: tick <= 3 x floor in every period, and flat from the first period to the last.

Long forms: ``--hours 24 --every-minutes 120`` (a day stored; 2-3 hours of wall time), and
``--interval 1 --hours 0.25`` (1 s ticks, the latency windows read every 10 s).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import httpx  # noqa: E402

from agent.daemon.app import App  # noqa: E402
from agent.storage.db import upgrade_database  # noqa: E402
from bench.box import Checkpoint, Run, load_box_nvml, run_box  # noqa: E402
from bench.common import busy_gpus, load_fake_nvml, ms, timed, verdict  # noqa: E402
from collectors.engines.exposition import Exposition  # noqa: E402
from collectors.engines.registry import read_by_a_mapper  # noqa: E402
from collectors.scrape import ACCEPT, ScrapeCollector  # noqa: E402

BOX_RATIO_TARGET = 3.0
GPM_RATIO_TARGET = 1.2
FLOOR_EVERY = 10  # ticks between two floor measurements


# -- 1. NVML only -----------------------------------------------------------------------------


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


def nvml_only(ticks: int, database_url: str) -> None:
    import pynvml

    from agent.config.settings import load_config
    from collectors.nvml import NvmlCollector

    t0 = datetime(2026, 11, 30, tzinfo=UTC)
    recorder = Recorder(pynvml)
    probe = NvmlCollector(host="bench", nvml=recorder)  # type: ignore[arg-type]
    probe.collect(t0)
    probe.collect(t0)  # the second round is the steady state: handles and names are cached
    recorder.calls.clear()
    probe.collect(t0)
    calls = list(recorder.calls)
    probe.close()
    pynvml.nvmlInit()

    def floor(_: int) -> None:
        for fn, args, kwargs in calls:
            try:  # noqa: SIM105 - contextlib.suppress would cost more than a call here
                fn(*args, **kwargs)
            except pynvml.NVMLError:  # as the collector: an event wait's timeout, say
                pass

    collector = NvmlCollector(host="bench")
    upgrade_database(database_url)
    config = load_config(None, {"GPUWATCH_DATABASE_URL": database_url, "HOME": "/nonexistent"})
    app = App.open(config, collectors=[collector])
    per_tick = len(app.runner.run(t0 - timedelta(days=1)).tagged_samples())
    floor_t = timed(floor, ticks)
    collect_t = timed(lambda i: collector.collect(t0 + timedelta(seconds=10 * i)), ticks)
    tick_t = timed(lambda i: app.tick(t0 + timedelta(days=1, seconds=10 * i)), ticks)
    app.close()
    collector.close()
    kind = "SQLite" if database_url.startswith("sqlite") else "PostgreSQL"
    print(f"NVML only: 8 GPUs, {len(calls)} pynvml calls and {per_tick} rows a tick, {ticks} ticks")
    print(f"  floor: bare pynvml loop, same calls     {ms(floor_t)}")
    print(f"  collector only (samples, no database)   {ms(collect_t)}")
    print(f"  tick: collect + store + rules ({kind})  {ms(tick_t)}")
    target, got = 2 * statistics.median(floor_t) + 0.005, statistics.median(tick_t)
    print(f"target: NVML tick <= 2 x floor + 5 ms = {target * 1e3:.2f} ms -> "
          f"{got * 1e3:.2f} ms, {verdict(got <= target)}")  # fmt: skip


def nvml_gpm(work: Path, ticks: int, blocks: int) -> None:
    """The tick (collect, store, rules) with GPM on 8 GPUs next to the same without, same run;
    the collector's round alone beside it (what GPM's calls and rows cost before storing)."""
    from agent.config.settings import load_config
    from agent.sim.fakenvml.hardware import FakeGpm, write_config
    from collectors.nvml import NvmlCollector

    t0 = datetime(2026, 11, 30, tzinfo=UTC)
    plain = busy_gpus()
    gpm = FakeGpm(sm_active=31, sm_occupancy=14, tensor=19, dram=38, fp16=2, fp32=4, fp64=0)
    profiled = replace(plain, gpus=tuple(replace(g, gpm=gpm) for g in plain.gpus))
    files = {
        "without": write_config(work / "plain.txt", plain),
        "with": write_config(work / "gpm.txt", profiled),
    }
    apps: dict[str, App] = {}
    collectors = {name: NvmlCollector(host="bench") for name in files}
    for name in files:
        url = f"sqlite:///{work / f'gpm-{name}.db'}"
        upgrade_database(url)
        config = load_config(None, {"GPUWATCH_DATABASE_URL": url, "HOME": "/nonexistent"})
        apps[name] = App.open(config, collectors=[collectors[name]])
    ticks_t: dict[str, list[float]] = {name: [] for name in files}
    rounds_t: dict[str, list[float]] = {name: [] for name in files}
    clock = {name: 0 for name in files}

    def tick(name: str, _: int) -> None:
        clock[name] += 1
        apps[name].tick(t0 + timedelta(seconds=10 * clock[name]))

    per_block = max(1, ticks // blocks)
    for block in range(blocks):
        for name in ("without", "with") if block % 2 == 0 else ("with", "without"):
            os.environ["FAKE_NVML_CONFIG"] = str(files[name])
            # timed's untimed warm-up round takes the fake's re-read of its changed file.
            ticks_t[name] += timed(partial(tick, name), per_block)
            rounds_t[name] += timed(partial(_collect, collectors[name], t0), per_block)
    rows = {}
    for name in files:
        os.environ["FAKE_NVML_CONFIG"] = str(files[name])
        rows[name] = len(collectors[name].collect(t0))
        apps[name].close()
        collectors[name].close()
    os.environ["FAKE_NVML_CONFIG"] = str(work / "hardware.txt")
    print(f"GPM: 8 GPUs, {blocks} alternating blocks of {per_block} ticks each (SQLite)")
    for name in files:
        print(f"  tick, {name + ' GPM':11s} ({rows[name]} rows)  {ms(ticks_t[name])}")
    for name in files:
        print(f"  collector round alone, {name + ' GPM':11s}  {ms(rounds_t[name])}")
    ratio = statistics.median(ticks_t["with"]) / statistics.median(ticks_t["without"])
    alone = statistics.median(rounds_t["with"]) / statistics.median(rounds_t["without"])
    more = rows["with"] / rows["without"] - 1
    print(f"  collector round alone: {alone:.2f} x ({more:.0%} more rows: the 4 default gauges)")
    print(f"target: GPM tick <= {GPM_RATIO_TARGET:g} x without -> {ratio:.2f} x, "
          f"{verdict(ratio <= GPM_RATIO_TARGET)}")  # fmt: skip


def _collect(collector: Any, at: datetime, _: int) -> None:
    collector.collect(at)


# -- 2. the full box as its database fills ----------------------------------------------------


@dataclass
class Periods:
    """Per period: the ticks', floors' and database calls' durations, printed at its end."""

    interval: float
    rows: list[tuple[float, float, float]] = field(default_factory=list)  # (hours, tick, floor)
    ticks: list[float] = field(default_factory=list)
    floors: list[float] = field(default_factory=list)
    database: list[float] = field(default_factory=list)
    client: httpx.Client = field(default_factory=lambda: httpx.Client(timeout=10))

    def wrap(self, method: Callable[..., Any], into: str) -> Any:
        """``method`` timed into the list named ``into``; after every 10th tick, a floor."""

        def timed_call(app: App, *args: Any) -> Any:
            began = time.perf_counter()
            out = method(app, *args)
            getattr(self, into).append(time.perf_counter() - began)
            if into == "ticks" and len(self.ticks) % FLOOR_EVERY == 0:
                self.floors.append(self.floor(app))
            return out

        return timed_call

    def floor(self, app: App) -> float:
        """GET and parse each target's body, one after the other."""
        urls = [c.spec.url for c in app.runner.collectors if isinstance(c, ScrapeCollector)]
        began = time.perf_counter()
        for url in urls:
            body = self.client.get(url, headers={"Accept": ACCEPT}).text
            Exposition.parse(body, keep=read_by_a_mapper)
        return time.perf_counter() - began

    def __call__(self, app: App, run: Run, at: Checkpoint) -> None:
        hours = run.ticks * self.interval / 3600
        tick = statistics.median(self.ticks)
        base = statistics.median(self.floors or [self.floor(app)])
        db = statistics.fmean(self.database) if self.database else 0.0
        self.rows.append((hours, tick, base))
        print(f"  {hours:6.2f} h stored, {run.ticks:6d} ticks: tick median {tick * 1e3:7.1f} ms"
              f"   floor median {base * 1e3:6.1f} ms   ratio {tick / base:4.2f}   database call "
              f"mean {db * 1e3:6.1f} ms ({db / self.interval:5.1%} of the interval)",
              flush=True)  # fmt: skip
        self.ticks, self.floors, self.database = [], [], []


def full_box(folder: Path, hours: float, every_minutes: float | None, interval: float) -> None:
    load_box_nvml(folder)
    periods = Periods(interval)
    tick, write = App.tick, App._write_and_evaluate
    App.tick = periods.wrap(tick, "ticks")  # type: ignore[method-assign]
    App._write_and_evaluate = periods.wrap(write, "database")  # type: ignore[method-assign]
    every = timedelta(minutes=every_minutes if every_minutes else hours * 60 / 3)
    print(f"full box: 8 GPUs, 2 vLLM 0.33 targets, {interval:g} s ticks, {hours:g} simulated "
          "hours on SQLite; per period:")  # fmt: skip
    try:
        url = f"sqlite:///{folder / 'box.db'}"
        run_box(folder, url, hours, every, periods, 3.0, interval)
    finally:
        App.tick, App._write_and_evaluate = tick, write  # type: ignore[method-assign]
    first, last = periods.rows[0], periods.rows[-1]
    worst = max(t / b for _, t, b in periods.rows)
    print(f"  growth: first period {first[1] * 1e3:.1f} ms, last {last[1] * 1e3:.1f} ms median "
          f"tick ({(last[1] / first[1] - 1) * 100:+.0f} %; the floor "
          f"{(last[2] / first[2] - 1) * 100:+.0f} %)")  # fmt: skip
    print(f"target: box tick <= {BOX_RATIO_TARGET:g} x floor in every period -> worst "
          f"{worst:.2f}, {verdict(worst <= BOX_RATIO_TARGET)}")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--ticks", type=int, default=300, help="NVML-only ticks (default 300)")
    parser.add_argument("--database-url", help="NVML only: default SQLite in a temporary folder")
    parser.add_argument("--hours", type=float, default=0.5, help="full box, simulated hours")
    parser.add_argument("--every-minutes", type=float, help="full box: the period's length")
    parser.add_argument("--interval", type=float, help="full box: seconds between ticks")
    parser.add_argument("--gpm-blocks", type=int, default=6, help="GPM: alternating blocks")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        load_fake_nvml(work, busy_gpus())
        nvml_only(args.ticks, args.database_url or f"sqlite:///{work / 'nvml.db'}")
        nvml_gpm(work, args.ticks, max(2, args.gpm_blocks))
        if args.hours > 0:
            (work / "box").mkdir()
            full_box(work / "box", args.hours, args.every_minutes, args.interval or 10.0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
