"""`gpuwatch demo --live`: the real daemon on the demo database, /metrics on loopback, until
SIGTERM. What a Prometheus test needs: an ephemeral port printed on a line it can parse, data
on /metrics at once (the history's cost figures), a clean stop."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx

from agent.demo.live import cycles_per_minute
from agent.demo.scenario import LLAMA, MISTRAL, QWEN, Month, demand

REPO = Path(__file__).resolve().parents[2]
SERVING = re.compile(
    r"^gpuwatch demo --live: serving /metrics at (http://127\.0\.0\.1:\d+/metrics)"
)


def lines_of(stream: object) -> queue.Queue[str]:
    found: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        for line in stream:  # type: ignore[attr-defined]
            found.put(line)

    threading.Thread(target=pump, daemon=True).start()
    return found


def wait_for(lines: queue.Queue[str], pattern: re.Pattern[str], seconds: float) -> re.Match[str]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=0.5)
        except queue.Empty:
            continue
        if match := pattern.match(line):
            return match
    raise AssertionError(f"no line matching {pattern.pattern} within {seconds:g}s")


def scrape_until(url: str, wanted: str, seconds: float) -> str:
    """/metrics once ``wanted`` (a regex) is on it: the first tick and the first minute job
    (the cost figures) come within seconds of the start."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        body = httpx.get(url, timeout=5).text
        if re.search(wanted, body):
            return body
        time.sleep(0.5)
    raise AssertionError(f"{wanted} not on /metrics within {seconds:g}s")


def test_live_serves_metrics_on_an_ephemeral_port_and_stops_on_sigterm(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUWATCH_", "FAKE_NVML"))}
    command = [
        sys.executable,
        "-m",
        "agent.cli.main",
        "demo",
        "--days",
        "1",
        "--live",
        "--metrics-port",
        "0",
        "--interval",
        "1",
        "--state-dir",
        str(tmp_path / "demo"),
    ]
    with subprocess.Popen(
        command, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    ) as proc:
        try:
            check_live(proc)
        finally:
            if proc.poll() is None:
                proc.kill()


def check_live(proc: subprocess.Popen[str]) -> None:
    assert proc.stdout is not None
    url = wait_for(lines_of(proc.stdout), SERVING, 120).group(1)
    body = scrape_until(url, r'gpuwatch_engine_generation_tokens_total\{engine="vllm"', 30)
    assert re.search(r'gpuwatch_gpu_utilization_ratio\{[^}]*host="demo-h100"', body)
    # The day's cost figures are there from the start: the history is in the database.
    scrape_until(
        url,
        r'gpuwatch_cost_per_million_tokens_usd\{[^}]*model="llama-3.1-70b"'
        r'[^}]*window="24h"\} [1-9]',
        30,
    )
    stopping = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 0
    assert time.monotonic() - stopping < 15


def test_the_live_engines_serve_every_few_seconds_at_night_too() -> None:
    # Opened at 23:30 UTC (the scenario's quiet night), the dashboard's one-minute rates must
    # still move: each serving target completes a cycle at least every 10 s; idle stays idle.
    month = Month(datetime(2026, 12, 1, tzinfo=UTC), datetime(2026, 12, 2, tzinfo=UTC))
    night, afternoon = (
        datetime(2026, 12, 2, 23, 30, tzinfo=UTC),
        datetime(2026, 12, 2, 14, tzinfo=UTC),
    )
    for target in (LLAMA, QWEN):
        load = demand(target, night, month)
        assert 0 < load < 0.3
        assert cycles_per_minute(load) >= 6
        assert cycles_per_minute(demand(target, afternoon, month)) > cycles_per_minute(load)
    assert demand(MISTRAL, datetime(2026, 12, 2, 3, tzinfo=UTC), month) == 0
    assert cycles_per_minute(0.0) == 0
