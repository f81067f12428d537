"""A real Prometheus (Debian's package) on loopback, scraping given targets every second.

Its own data folder and a loopback listen address, as recipes.md section 2 says; the first
sample reaches the query API about 5-6 s after start (the scrape manager applies targets every
5 s), so callers poll.
"""

from __future__ import annotations

import math
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.agent.daemon_harness import free_port

Series = list[dict[str, Any]]  # the API's "result" of an instant vector query


def prometheus_binary() -> str:
    found = shutil.which("prometheus")
    if found is None:
        pytest.skip("prometheus not installed (`make test` installs Debian's prometheus as root)")
    return found


@dataclass(frozen=True)
class Prometheus:
    url: str
    log_path: Path

    def query(self, expr: str) -> Series:
        """An instant query now; fails the test on an API error (a bad expression)."""
        answer = httpx.get(f"{self.url}/api/v1/query", params={"query": expr}, timeout=10).json()
        assert answer["status"] == "success", f"{expr}: {answer}"
        data = answer["data"]
        assert data["resultType"] == "vector", f"{expr}: {data['resultType']}"
        return list(data["result"])

    def label_values(self, label: str, match: str) -> list[str]:
        """What Grafana's ``label_values(match, label)`` asks for."""
        params = {"match[]": match}
        answer = httpx.get(f"{self.url}/api/v1/label/{label}/values", params=params, timeout=10)
        body = answer.json()
        assert body["status"] == "success", body
        return list(body["data"])

    def rules(self) -> list[dict[str, Any]]:
        body = httpx.get(f"{self.url}/api/v1/rules", timeout=10).json()
        assert body["status"] == "success", body
        return [rule for group in body["data"]["groups"] for rule in group["rules"]]

    def wait_until(self, what: str, check: Callable[[], bool], timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: not within {timeout:g} s; log:\n{self.log()}")
            time.sleep(0.5)

    def log(self) -> str:
        return self.log_path.read_text()[-4000:]


def finite(series: Series) -> bool:
    """At least one series, and every value a number (histogram_quantile gives NaN when no
    bucket moved in its window: that is no answer)."""
    return bool(series) and all(math.isfinite(float(s["value"][1])) for s in series)


def write_config(path: Path, targets: Sequence[str], rule_files: Sequence[Path]) -> Path:
    rules = "".join(f"  - {f}\n" for f in rule_files)
    hosts = ", ".join(f'"{t}"' for t in targets)
    path.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        + (f"rule_files:\n{rules}" if rules else "")
        + "scrape_configs:\n  - job_name: gpuwatch\n"
        + f"    static_configs:\n      - targets: [{hosts}]\n"
    )
    return path


@contextmanager
def running_prometheus(
    work: Path, targets: Sequence[str], rule_files: Sequence[Path] = ()
) -> Iterator[Prometheus]:
    """Prometheus scraping ``targets`` (host:port) every second, with ``rule_files`` loaded."""
    binary = prometheus_binary()
    work.mkdir(parents=True, exist_ok=True)
    config = write_config(work / "prometheus.yml", targets, rule_files)
    listen = f"127.0.0.1:{free_port()}"
    log_path = work / "prometheus.log"
    command = [
        binary, f"--config.file={config}", f"--web.listen-address={listen}",
        f"--storage.tsdb.path={work / 'data'}", "--log.level=warn",
    ]  # fmt: skip
    with log_path.open("w") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    prometheus = Prometheus(f"http://{listen}", log_path)
    try:
        prometheus.wait_until("Prometheus ready", lambda: _ready(prometheus, proc), timeout=20)
        yield prometheus
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _ready(prometheus: Prometheus, proc: subprocess.Popen[bytes]) -> bool:
    if proc.poll() is not None:
        raise AssertionError(f"prometheus exited with {proc.returncode}:\n{prometheus.log()}")
    try:
        return httpx.get(f"{prometheus.url}/-/ready", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False
