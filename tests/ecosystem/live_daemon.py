"""The live demo, for Prometheus to scrape: one context manager.

`live_daemon` runs `gpuwatch demo --live` as users do (the console script of this environment,
a subprocess): a day of the demo fleet's history first (so the cost series are on its first
/metrics), then the real daemon of the demo's first host against live engine simulators on
loopback and the fake NVML, ticking every second, /metrics on an ephemeral port that it prints.
What test_dashboard.py needs of it is there: cost series at once, engine histograms that move
every few seconds, a budget, and a billed GPU nobody uses (the demo's spare H100, so GpuIdle
has a series in ``gpuwatch_alerts``).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from agent.demo.scenario import HOSTS

SERVING = re.compile(
    r"^gpuwatch demo --live: serving /metrics at (http://127\.0\.0\.1:\d+/metrics)"
)
START_SECONDS = 120.0  # the day's history (~10 s here) and the daemon's start, on a busy CI box


@dataclass(frozen=True)
class LiveDaemon:
    metrics_url: str  # http://127.0.0.1:<port>/metrics
    host: str
    models: tuple[str, ...]


@contextmanager
def live_daemon(work: Path, fake_nvml_dir: Path | None = None) -> Iterator[LiveDaemon]:
    """`gpuwatch demo --live` until the block ends; its /metrics once the cost series are on
    it. ``fake_nvml_dir`` is not needed: the demo builds its own fake NVML library."""
    work.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUWATCH_", "FAKE_NVML"))}
    gpuwatch = Path(sys.executable).parent / "gpuwatch"
    command = [str(gpuwatch), "demo", "--days", "1", "--live", "--metrics-port", "0",
               "--interval", "1", "--state-dir", str(work / "demo")]  # fmt: skip
    log = work / "demo.log"
    with (
        log.open("w") as err,
        subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=err, text=True) as proc,
    ):
        try:
            url = _serving_url(proc, log)
            _wait_for(url, "gpuwatch_cost_per_million_tokens_usd{", log)
            host = HOSTS[0]
            yield LiveDaemon(url, host.name, tuple(sorted(t.model for t in host.targets)))
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()


def _serving_url(proc: subprocess.Popen[str], log: Path) -> str:
    assert proc.stdout is not None
    deadline = time.monotonic() + START_SECONDS
    for line in proc.stdout:  # the demo prints its progress, then this line once it listens
        if match := SERVING.match(line):
            return match.group(1)
        if time.monotonic() > deadline:
            break
    raise AssertionError(f"`gpuwatch demo --live` never said where it serves; its log:\n"
                         f"{log.read_text()}")  # fmt: skip


def _wait_for(url: str, needle: str, log: Path) -> None:
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        try:
            if needle in httpx.get(url, timeout=5).text:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"{needle!r} never appeared on {url}; the demo's log:\n{log.read_text()}")
