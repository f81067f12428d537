"""The demo's month: every host's rounds through the daemon's own parts, in simulated time.

Each host is the daemon's :class:`~agent.daemon.app.App`, opened on its configuration, in a
process of its own as each box runs its own daemon: the real NVML collector (pynvml over the
fake library) and a scrape per target (engines.py), collected by the real runner with what the
daemon derives (allocation, prices); the rounds go through the real store, a batch per
transaction, and the host's alert rules are evaluated after each batch; the real rollup (with
the cost ledger) runs once a simulated day (a run covers at most a day), as the daemon's minute
job catches up after a stop, and then the fleet's budget rules. What differs from the daemon is
the clock: the rounds are ``interval_seconds`` apart (the history's configuration says so, so
the ledger meters each interval as long as it was) and nobody waits between them.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from agent.collect.runner import Round
from agent.daemon.app import App
from agent.demo.engines import FastForwardScrape
from agent.demo.hardware import DemoSetupError, HostHardware, use_hardware
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


def round_times(month: Month, interval: float) -> list[datetime]:
    step = timedelta(seconds=interval)
    times, at = [], month.start + step
    while at <= month.end:
        times.append(at)
        at += step
    return times


@dataclass(frozen=True, slots=True)
class Shared:
    """What the host processes share: a barrier at each rollup, the rounds done so far."""

    barrier: Any  # multiprocessing.Barrier
    done: Any  # multiprocessing.Value("i")


def generate(
    files: DemoFiles,
    month: Month,
    *,
    interval: float = HISTORY_INTERVAL,
    progress: Progress | None = None,
    now: datetime | None = None,
) -> int:
    """Fill the demo database with ``month``; returns the rounds stored. ``now`` is the real
    time the history ends before (its last minutes are rolled up as of then).

    Each host runs in a process of its own (forked: the fake NVML is loaded already), as each
    box runs its own daemon; they meet at every rollup, so the fleet's budget rules, which
    read every host's rollups, see all hosts up to the same instant."""
    ctx = multiprocessing.get_context("fork")
    shared = Shared(ctx.Barrier(len(HOSTS)), ctx.Value("i", 0))
    # SIGTERM stops the demo as Ctrl-C does: the finally below ends the host processes too.
    _TERMINATED.clear()
    previous = signal.signal(signal.SIGTERM, _interrupt)
    settled = max(now or month.end, month.end + timedelta(seconds=SETTLE_SECONDS))
    workers = [
        ctx.Process(
            target=_host_process,
            args=(files, i, month, interval, settled, shared),
            name=f"demo-{host.name}",
        )
        for i, host in enumerate(HOSTS)
    ]
    for worker in workers:
        worker.start()
    total = len(round_times(month, interval)) * len(HOSTS)
    try:
        _watch(workers, shared, total, progress)
    finally:
        signal.signal(signal.SIGTERM, previous)
        for worker in workers:
            if worker.is_alive():
                worker.terminate()
            worker.join()
    return total


_TERMINATED = threading.Event()


def _interrupt(_signum: int, _frame: object) -> None:
    # Raised where the signal lands; if that is inside a finalizer or an at-fork hook, Python
    # prints "Exception ignored" and goes on, so the watch loop also checks the flag.
    _TERMINATED.set()
    raise KeyboardInterrupt


def _watch(workers: list[Any], shared: Shared, total: int, progress: Progress | None) -> None:
    """Show progress until the hosts are done; a host that failed stops the others."""
    while any(w.is_alive() for w in workers):
        if _TERMINATED.is_set():
            raise KeyboardInterrupt
        failed = [w for w in workers if w.exitcode not in (None, 0)]
        if failed:
            shared.barrier.abort()
            names = ", ".join(f"{w.name} (exit {w.exitcode})" for w in failed)
            raise DemoSetupError(f"the demo's history failed in {names}; see the error above")
        if progress is not None:
            progress(min(shared.done.value, total - 1), total)
        time.sleep(0.1)
    failed = [w for w in workers if w.exitcode != 0]
    if failed:
        names = ", ".join(f"{w.name} (exit {w.exitcode})" for w in failed)
        raise DemoSetupError(f"the demo's history failed in {names}; see the error above")
    if progress is not None:
        progress(total, total)


def _host_process(
    files: DemoFiles, index: int, month: Month, interval: float, settled: datetime, shared: Shared
) -> None:
    """One host's history (in its own process). Ctrl-C and SIGTERM are the parent's to
    handle: it ends this process (SIGTERM, the default action) when the demo stops."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        run = open_host(files, HOSTS[index], month, interval)
        try:
            _history(run, round_times(month, interval), interval, settled, shared, index == 0)
        finally:
            run.close()
    except threading.BrokenBarrierError:
        os._exit(3)  # another host failed and said so
    except BaseException:
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
    os._exit(0)  # no atexit handlers of the parent's in a forked child


def _history(
    run: HostRun,
    times: list[datetime],
    interval: float,
    settled: datetime,
    shared: Shared,
    leads: bool,
) -> None:
    next_rollup = times[0] + ROLLUP_EVERY if times else settled
    for done, at in enumerate(times, 1):
        run.step(at, interval)
        last = done == len(times)
        if done % BATCH == 0 or last:
            run.flush(at)
        if at >= next_rollup or last:
            _roll_up(run, at, shared, leads)
            next_rollup = at + ROLLUP_EVERY
        with shared.done.get_lock():
            shared.done.value += 1
    _roll_up(run, settled, shared, leads)


def _roll_up(run: HostRun, now: datetime, shared: Shared, leads: bool) -> None:
    """The host's rollup job (and the cost ledger) as of ``now``; then, once every host has
    rolled up, the fleet's budget rules on the first host, which leads the demo's fleet."""
    run.app.rollup.run(now)
    shared.barrier.wait()
    if leads:
        run.app.evaluate_fleet_alerts(now)
    shared.barrier.wait()
