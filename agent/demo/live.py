"""`gpuwatch demo --live`: the real daemon on the demo database, against live simulators.

The first host of the demo fleet comes alive: its engines are the simulator's HTTP servers on
127.0.0.1 (agent.sim.server), its GPUs the fake NVML, and a feeder thread moves both with the
scenario's load on the wall clock. The daemon is `gpuwatch run`'s own
(:class:`agent.daemon.service.Daemon`) on the host's demo configuration, until SIGTERM or
SIGINT. The live engines serve a request cycle every few seconds at full load and at least one
every ten seconds whenever they serve at all, at night too (enough for a dashboard's one-minute
rates to move at any hour; idle stretches stay idle), and restart every twenty minutes or more:
the simulator recounts every request on each render, so its bodies grow with the requests
served.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable
from contextlib import ExitStack
from datetime import datetime, timedelta

from agent.collect.clock import utc_now
from agent.demo.engines import serve_cycles, set_level, sim_traffic
from agent.demo.hardware import HostHardware, use_hardware
from agent.demo.scenario import HOSTS, Month, demand, level
from agent.demo.settings import DemoFiles, write_config
from agent.sim.server import EngineServer
from agent.sim.traffic import Traffic

log = logging.getLogger(__name__)

FEED_SECONDS = 2.0
LIVE_CYCLES_PER_MINUTE = 12.0  # at full load, per target (see the module's docstring)
# At any load above zero: the scenario's quiet nights (load ~0.1) gave a cycle a minute or less,
# and a dashboard opened at night showed no latency at all.
LIVE_MIN_CYCLES_PER_MINUTE = 6.0
# A live engine restarts after this many cycles (twenty minutes at full load), so that its
# body, which the simulator recounts on every scrape, stays well within the scrape timeout.
LIVE_MAX_CYCLES = 240


def free_port() -> int:
    """A port free on 127.0.0.1 now (``--metrics-port 0``); the daemon binds it right after."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Feeder:
    """Moves the live engines' traffic and the fake GPUs with the scenario, every few seconds."""

    def __init__(self, hardware: HostHardware, traffic: dict[str, Traffic], month: Month) -> None:
        self.hardware = hardware
        self.traffic = traffic
        self.month = month
        self._due: dict[str, float] = {}
        self._cycles: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="demo-feeder", daemon=True)

    def start(self) -> None:
        self.feed(utc_now(), 0.0)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(FEED_SECONDS):
            self.feed(utc_now(), FEED_SECONDS)

    def feed(self, now: datetime, seconds: float) -> None:
        loads: dict[int, float] = {}
        for target in self.hardware.host.targets:
            load = demand(target, now, self.month)
            state = level(target, now, self.month, load)
            traffic = self.traffic[target.name]
            set_level(traffic, state)
            due = self._due.get(target.name, 0.0) + cycles_per_minute(load) * seconds / 60
            if int(due):
                self._serve(traffic, target.name, target.model, int(due))
            self._due[target.name] = due - int(due)
            loads.update((i, 1.0 if state == "peak" else load) for i in target.gpus)
        self.hardware.write(loads, seconds)

    def _serve(self, traffic: Traffic, name: str, model: str, cycles: int) -> None:
        served = self._cycles.get(name, 0) + cycles
        if served > LIVE_MAX_CYCLES:
            log.info("demo engine %s restarts (its counters start over)", name)
            traffic.restart()
            served = cycles
        serve_cycles(traffic, model, cycles)
        self._cycles[name] = served


def cycles_per_minute(load: float) -> float:
    """A live target's request cycles per minute at ``load`` (0 to 1): its share of the full
    rate, never under the minimum while it serves at all."""
    if load <= 0:
        return 0.0
    return max(LIVE_MIN_CYCLES_PER_MINUTE, load * LIVE_CYCLES_PER_MINUTE)


def run_live(
    files: DemoFiles,
    month: Month,
    *,
    metrics_port: int,
    interval_seconds: float,
    announce: Callable[[str], None],
) -> int:
    """Serve until SIGTERM/SIGINT; returns the daemon's exit code. ``announce`` gets the
    lines to show (the /metrics URL once it is serving)."""
    from agent.daemon.service import Daemon  # APScheduler: for this mode only

    host = HOSTS[0]
    port = metrics_port or free_port()
    started = utc_now()
    # The live part of the scenario: the history's calendar, carried on past its end.
    live_month = Month(month.start, month.end + timedelta(days=365))
    with ExitStack() as stack:
        traffic = {t.name: sim_traffic(t, started.timestamp()) for t in host.targets}
        servers = {
            t.name: stack.enter_context(EngineServer(t.version, traffic[t.name]))
            for t in host.targets
        }
        hardware = HostHardware(host, files.hardware(host))
        feeder = Feeder(hardware, traffic, live_month)
        feeder.start()
        stack.callback(feeder.stop)
        use_hardware(hardware.path)
        urls = {name: server.url for name, server in servers.items()}
        config = write_config(
            files,
            host,
            month,
            interval_seconds=interval_seconds,
            metrics_listen=f"127.0.0.1:{port}",
            urls=urls,
        )
        daemon = Daemon(str(files.config(host, live=True)), config)
        for name, url in urls.items():
            announce(f"engine {name} ({host.name}): {url}")
        watcher = threading.Thread(
            target=_announce_when_serving,
            args=(lambda: daemon.metrics.port, announce),
            name="demo-announce",
            daemon=True,
        )
        watcher.start()
        return daemon.serve()


def _announce_when_serving(
    serving: Callable[[], int | None], announce: Callable[[str], None]
) -> None:
    """Say where /metrics is once it listens (a test waits for this line)."""
    for _ in range(1200):
        port = serving()
        if port:
            announce(f"serving /metrics at http://127.0.0.1:{port}/metrics (Ctrl-C stops)")
            return
        threading.Event().wait(0.05)
