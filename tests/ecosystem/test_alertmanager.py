"""contrib/alertmanager's example: a real Alertmanager mutes exactly what gpuwatch's own
inhibition (alerts/inhibit.py) mutes, for alerts labelled as the Prometheus rules label them."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from alerts.inhibit import DEFAULT_INHIBIT_RULES, inhibited_by
from tests.agent.daemon_harness import free_port
from tests.ecosystem.dashboard import REPO

EXAMPLE = REPO / "contrib" / "alertmanager" / "alertmanager-example.yml"

# Firing alerts with the labels gpuwatch-rules.yml gives them (severity left out: no rule
# reads it). Host a's NVML is blind and its target t1 down; host b is healthy.
ALERTS = [
    {"alertname": "CollectorDown", "host": "a", "collector": "nvml"},
    {"alertname": "GpuHot", "host": "a", "gpu_uuid": "GPU-1", "gpu_index": "0"},
    {"alertname": "VramHeadroomLow", "host": "a", "gpu_uuid": "GPU-1", "gpu_index": "0"},
    {"alertname": "GpuHot", "host": "b", "gpu_uuid": "GPU-2", "gpu_index": "0"},
    {"alertname": "TargetDown", "host": "a", "target": "t1"},
    {"alertname": "LatencyP99Spike", "host": "a", "target": "t1", "model": "m", "kind": "ttft"},
    {"alertname": "QueueGrowing", "host": "a", "target": "t2", "model": "m"},
    {"alertname": "KvCacheSaturated", "host": "b", "target": "t1", "model": "m"},
]


def binary(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        pytest.skip(f"{name} not installed (`make test` installs Debian's package as root)")
    return found


def test_the_example_passes_amtool_check_config() -> None:
    done = subprocess.run(
        [binary("amtool"), "check-config", str(EXAMPLE)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 inhibit rules" in done.stdout


@pytest.fixture
def alertmanager(tmp_path: Path) -> Iterator[str]:
    """Alertmanager on loopback with the example configuration (no gossip)."""
    base = f"http://127.0.0.1:{free_port()}"
    log = tmp_path / "alertmanager.log"
    command = [
        binary("prometheus-alertmanager"), f"--config.file={EXAMPLE}",
        f"--web.listen-address={base.removeprefix('http://')}", "--cluster.listen-address=",
        f"--storage.path={tmp_path / 'data'}",
    ]  # fmt: skip
    with log.open("wb") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 15
        while not _ready(base):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _ready(base: str) -> bool:
    try:
        return httpx.get(f"{base}/-/ready", timeout=1).status_code == 200
    except httpx.TransportError:
        return False


def muted(base: str) -> dict[tuple[tuple[str, str], ...], bool]:
    listed: list[dict[str, Any]] = httpx.get(f"{base}/api/v2/alerts", timeout=5).json()
    return {tuple(sorted(a["labels"].items())): bool(a["status"]["inhibitedBy"]) for a in listed}


def test_the_example_inhibits_what_gpuwatch_inhibits(alertmanager: str) -> None:
    expected = {
        tuple(sorted(a.items())): inhibited_by(a, ALERTS, DEFAULT_INHIBIT_RULES) is not None
        for a in ALERTS
    }
    assert sum(expected.values()) == 3  # host a's GPU alerts and t1's latency alert
    answer = httpx.post(f"{alertmanager}/api/v2/alerts", json=[{"labels": a} for a in ALERTS])
    assert answer.status_code == 200
    deadline = time.monotonic() + 10
    while (got := muted(alertmanager)) != expected and time.monotonic() < deadline:
        time.sleep(0.2)  # the inhibitor takes new alerts from a channel
    assert got == expected
