"""The demo's month: every host's rounds through the daemon's own parts, in simulated time.

Each host is the daemon's :class:`~agent.daemon.app.App`, opened on its configuration: the real
NVML collector (pynvml over the fake library) and a scrape per target (engines.py), collected
by the real runner with what the daemon derives (allocation, prices); the rounds go through the
real store, a batch per transaction; the host's rules are evaluated after each batch, and the
real rollup (with the cost ledger) runs every simulated hour, as the daemon's minute job would
have caught up. The only thing the daemon does differently is the clock: the history's rounds
are ``interval_seconds`` apart (its configuration says so), and nobody waits between them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from agent.collect.runner import Round
from agent.daemon.app import App
from agent.demo.engines import FastForwardScrape
from agent.demo.hardware import HostHardware, use_hardware
from agent.demo.scenario import CYCLE, HOSTS, DemoHost, Month, demand, level, restart_at
from agent.demo.settings import DemoFiles, write_config
from agent.storage.rollup import SETTLE_SECONDS
from collectors.base import Collector
from collectors.nvml import NvmlCollector

HISTORY_INTERVAL = 3600.0  # seconds between the history's rounds (BENCHMARKS.md, the demo)
BATCH = 6  # rounds per store transaction
ROLLUP_EVERY = timedelta(
    hours=24
)  # simulated time between rollup runs (a run covers at most a day)

Progress = Callable[[int, int], None]


@dataclass
class HostRun:
    """One simulated host: its App, its GPUs' hardware file and its engines."""

    host: DemoHost
    app: App
    hardware: HostHardware
    scrapes: dict[str, FastForwardScrape]
    month: Month
    pending: list[Round] = field(default_factory=list)
    carry: dict[str, float] = field(default_factory=dict)  # fractions of a cycle not yet served
    restarted: set[str] = field(default_factory=set)

    def step(self, now: datetime, seconds: float) -> None:
        """Serve the traffic of the interval ending at ``now``, then collect a round."""
        loads: dict[int, float] = {}
        for target in self.host.targets:
            scrape = self.scrapes[target.name]
            load = demand(target, now, self.month)
            scrape.level = level(target, now, self.month, load)
            if scrape.level == "peak":
                load = 1.0
            due = self.carry.get(target.name, 0.0)
            due += load * target.peak_requests_per_hour * seconds / 3600 / CYCLE
            scrape.serve(int(due))
            self.carry[target.name] = due - int(due)
            loads.update((i, load) for i in target.gpus)
            self._maybe_restart(scrape, now, seconds)
        use_hardware(self.hardware.write(loads, seconds))
        self.pending.append(self.app.collect(now))
        for scrape in self.scrapes.values():
            if scrape.down:  # back after one failed scrape, counting from zero
                scrape.down = False
                scrape.restart(now)

    def _maybe_restart(self, scrape: FastForwardScrape, now: datetime, seconds: float) -> None:
        at = restart_at(scrape.spec, self.month)
        if at is not None and scrape.target not in self.restarted and now >= at:
            self.restarted.add(scrape.target)
            scrape.down = True

    def flush(self, now: datetime) -> None:
        """Store the pending rounds in one transaction, then evaluate the host's rules."""
        if not self.pending:
            return
        self.app.store.write_rounds(self.pending)
        last = self.pending[-1]
        self.pending = []
        self.app.evaluate_alerts(last, now)

    def close(self) -> None:
        self.app.close()


def open_host(files: DemoFiles, host: DemoHost, month: Month, interval: float) -> HostRun:
    config = write_config(files, host, month, interval_seconds=interval)
    scrapes = {t.name: FastForwardScrape(t, host.name, month.start) for t in host.targets}
    hardware = HostHardware(host, files.hardware(host), alternate=True)
    use_hardware(hardware.write({}, 0.0))
    collectors: list[Collector] = [NvmlCollector(host=host.name), *scrapes.values()]
    app = App.open(config, collectors=collectors)
    return HostRun(host, app, hardware, scrapes, month)


def generate(
    files: DemoFiles,
    month: Month,
    *,
    interval: float = HISTORY_INTERVAL,
    progress: Progress | None = None,
    now: datetime | None = None,
) -> int:
    """Fill the demo database with ``month``; returns the rounds stored. ``now`` is the real
    time the history ends before (its last minutes are rolled up as of then)."""
    step = timedelta(seconds=interval)
    times = []
    at = month.start + step
    while at <= month.end:
        times.append(at)
        at += step
    runs = [open_host(files, host, month, interval) for host in HOSTS]
    try:
        next_rollup = month.start + ROLLUP_EVERY
        for done, at in enumerate(times, 1):
            for run in runs:
                run.step(at, interval)
            last = done == len(times)
            if done % BATCH == 0 or last:
                for run in runs:
                    run.flush(at)
            if at >= next_rollup or last:
                roll_up(runs, at)
                next_rollup = at + ROLLUP_EVERY
            if progress is not None:
                progress(done, len(times))
        settled = max(now or month.end, month.end + timedelta(seconds=SETTLE_SECONDS))
        roll_up(runs, settled)
    finally:
        for run in runs:
            run.close()
    return len(times) * len(runs)


def roll_up(runs: list[HostRun], now: datetime) -> None:
    """Each host's rollup job (and the cost ledger) as of ``now``; the fleet's budget rules
    on the first host, which leads the demo's fleet."""
    for run in runs:
        run.app.rollup.run(now)
    runs[0].app.evaluate_fleet_alerts(now)
