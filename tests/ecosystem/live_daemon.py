"""A live gpuwatch daemon with a little history, for Prometheus to scrape: one context manager.

`live_daemon` starts the real `gpuwatch run` (a subprocess, as systemd runs it) over the fake
NVML with three GPUs and two engine simulators on loopback (vLLM 0.33 and SGLang 0.5, one model
each, requests completing and gauges moving all the time), and yields its /metrics URL.

The cost series (cost per million tokens, idle and metered spend, budget use) come from the
minute job's rollups, which a fresh daemon only has after minutes. So before the daemon starts,
the same database is filled through the real App: six minutes of 20 s ticks at injected past
instants, each one scraping the same simulators (advanced between ticks) and the fake NVML, then
the minute job as the daemon runs it. The daemon's own first minute job, at start, then finds
complete minutes and publishes every cost series on its first /metrics.

GPU 2 is billed, unallocated and 2 % busy: GpuIdle is pending from the first history tick, so
``gpuwatch_alerts`` has a series. `gpuwatch demo --live` can replace all of this once merged;
test_dashboard.py needs of any live daemon: cost series on its first scrapes, engines whose
histograms move every few seconds, a budget, and a billed GPU under 5 % busy (no target on it).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from agent.collect.clock import utc_now
from agent.config.settings import load_config
from agent.daemon.app import App
from agent.sim import EngineServer, Traffic
from agent.storage.db import upgrade_database
from tests.agent.daemon_harness import free_port, start_daemon
from tests.fakenvml.build import FakeGpu, FakeNvmlConfig, GiB, write_config

HOST = "live-box"
MODELS = {"vllm-0.33": "llama-3.1-8b", "sglang-0.5": "qwen2.5-7b"}
HISTORY = timedelta(minutes=6)
HISTORY_STEP = timedelta(seconds=20)  # the history's own tick interval (its config says so)
LIVE_STEP = 0.25  # seconds between simulated completions once the daemon runs


@dataclass(frozen=True)
class LiveDaemon:
    metrics_url: str  # http://127.0.0.1:<port>/metrics
    host: str
    models: tuple[str, ...]


def hardware() -> FakeNvmlConfig:
    """GPU 0 serves vLLM, GPU 1 SGLang, GPU 2 is paid for and idle."""
    gpus = tuple(
        FakeGpu(uuid=f"GPU-{i:08x}-live-0000-0000-000000000000", util=util, memutil=util // 2,
                used=used * GiB, temp_c=40 + util // 3, throttle=0x0)
        for i, (util, used) in enumerate(((71, 60), (46, 52), (2, 1)))
    )  # fmt: skip
    # No process list: each target's `gpus` then claims its whole GPU (agent.cost.allocation).
    return FakeNvmlConfig(gpus=gpus)


def config_text(db: Path, listen: str, urls: dict[str, str], interval: float) -> str:
    targets = "".join(
        f'[[targets]]\nname = "{version.split("-")[0]}"\nurl = "{url}"\ngpus = [{i}]\n\n'
        for i, (version, url) in enumerate(urls.items())
    )
    return (
        f'host = "{HOST}"\ndatabase_url = "sqlite:///{db}"\n\n'
        f'[daemon]\ninterval_seconds = {interval:g}\nmetrics_listen = "{listen}"\n\n'
        '[[rates]]\ngpu = "*"\nusd_per_hour = 2.72\n\n[budget]\nmonthly_usd = 5000\n\n' + targets
    )


class Simulators:
    """The two engines on loopback, and the traffic that moves while they run."""

    def __init__(self) -> None:
        self.traffic = {v: Traffic(models=(m,)) for v, m in MODELS.items()}
        self.servers = {v: EngineServer(v, t).start() for v, t in self.traffic.items()}
        self._step = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @property
    def urls(self) -> dict[str, str]:
        return {v: s.url for v, s in self.servers.items()}

    def step(self) -> None:
        """A couple of requests completed per engine, queue and KV cache moving."""
        self._step += 1
        n = self._step
        for traffic in self.traffic.values():
            traffic.serve(2)
            traffic.set_gauges(running=3 + n % 5, waiting=n % 7, kv_usage=0.4 + (n % 10) / 20)

    def _run(self) -> None:
        while not self._stop.wait(LIVE_STEP):
            self.step()

    def start_moving(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        for server in self.servers.values():
            server.stop()


def fill_history(config_path: Path, sims: Simulators, end: datetime) -> None:
    """The last ``HISTORY`` of a box ticking every 20 s, through the real App, then its
    minute job at ``end``: the rollups and cost ledger a running daemon would have."""
    app = App.open(load_config(str(config_path), {}))
    try:
        at = end - HISTORY
        while at <= end:
            sims.step()
            app.tick(at)
            at += HISTORY_STEP
        app.check_leadership(end)
        app.roll_up(end)
    finally:
        app.close()


@contextmanager
def live_daemon(work: Path, fake_nvml_dir: Path) -> Iterator[LiveDaemon]:
    """The running daemon's /metrics, with cost series from its first minute job on."""
    work.mkdir(parents=True, exist_ok=True)
    state = work / "state"
    state.mkdir(mode=0o700, exist_ok=True)
    db = state / "gpuwatch.db"
    nvml = write_config(work / "hardware.txt", hardware())
    sims = Simulators()
    daemon = None
    try:
        history = work / "history.toml"
        history.write_text(config_text(db, "", sims.urls, HISTORY_STEP.total_seconds()))
        upgrade_database(f"sqlite:///{db}")
        with pytest.MonkeyPatch.context() as mp:  # the in-process App reads the same hardware
            mp.setenv("FAKE_NVML_CONFIG", str(nvml))
            fill_history(history, sims, utc_now() - timedelta(seconds=1))
        sims.start_moving()
        port = free_port()
        config = work / "gpuwatch.toml"
        config.write_text(config_text(db, f"127.0.0.1:{port}", sims.urls, 1))
        env = {"LD_LIBRARY_PATH": str(fake_nvml_dir), "FAKE_NVML_CONFIG": str(nvml),
               "HOME": str(work), "STATE_DIRECTORY": str(state)}  # fmt: skip
        daemon = start_daemon(config, work, port, env)
        daemon.wait_for_metric("gpuwatch_cost_per_million_tokens_usd{", timeout=60)
        yield LiveDaemon(f"http://127.0.0.1:{port}/metrics", HOST, tuple(MODELS.values()))
    finally:
        if daemon is not None:
            daemon.kill()
        sims.stop()
