"""Debian's real prometheus-alertmanager on 127.0.0.1 for a test (no gossip, no receivers).

Skipped with a visible reason where the package is not installed (``make test`` installs it
when running as root).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

API = "/api/v2/alerts"


AM_CONFIG = """\
route:
  receiver: blackhole
  group_wait: 1s
receivers:
  - name: blackhole
"""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _wait_ready(base: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"alertmanager exited with {process.returncode}:\n{log.read_text()}")
        try:
            if httpx.get(f"{base}/-/ready", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    pytest.fail(f"alertmanager not ready after 15 s:\n{log.read_text()}")


@pytest.fixture
def alertmanager(tmp_path: Path) -> Iterator[str]:
    """A real Alertmanager on loopback (no gossip, no notifications); yields its base URL."""
    binary = shutil.which("prometheus-alertmanager")
    if binary is None:
        pytest.skip(
            "prometheus-alertmanager not installed (make test installs Debian's package as root)"
        )
    config = tmp_path / "am.yml"
    config.write_text(AM_CONFIG)
    base = f"http://127.0.0.1:{_free_port()}"
    log = tmp_path / "alertmanager.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                binary,
                f"--config.file={config}",
                f"--web.listen-address={base.removeprefix('http://')}",
                "--cluster.listen-address=",  # else gossip binds 0.0.0.0:9094
                f"--storage.path={tmp_path / 'data'}",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        _wait_ready(base, process, log)
        yield base
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def listed(base: str) -> list[dict[str, Any]]:
    """The alerts the Alertmanager at ``base`` lists as current."""
    alerts: list[dict[str, Any]] = httpx.get(f"{base}{API}", timeout=5).json()
    return alerts
