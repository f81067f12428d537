"""Start `gpuwatch run` as a real process, the way systemd does, and talk to it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class RunningDaemon:
    proc: subprocess.Popen[str]
    port: int
    notify: socket.socket
    log_path: Path

    def wait_for_notify(self, message: str, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.notify.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                data = self.notify.recv(4096).decode()
            except TimeoutError:
                break
            if message in data.splitlines():
                return
        raise AssertionError(f"no {message} from the daemon; log:\n{self.log()}")

    def metrics(self) -> str:
        return httpx.get(f"http://127.0.0.1:{self.port}/metrics", timeout=5).text

    def wait_for_metric(self, needle: str, timeout: float = 20.0) -> str:
        """Poll /metrics until ``needle`` shows up (the first tick runs at start)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                text = self.metrics()
            except httpx.ConnectError:  # not listening yet
                text = ""
            if needle in text:
                return text
            time.sleep(0.05)
        raise AssertionError(f"{needle!r} never appeared on /metrics; log:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text()

    def signal(self, signum: int) -> None:
        self.proc.send_signal(signum)

    def stop(self, timeout: float = 5.0) -> tuple[int, float]:
        """SIGTERM; returns (exit code, seconds it took)."""
        start = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=timeout)
        return code, time.monotonic() - start

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.notify.close()


def start_daemon(config: Path, tmp_path: Path, port: int, env: dict[str, str]) -> RunningDaemon:
    notify_path = tmp_path / "notify.sock"
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(str(notify_path))
    log_path = tmp_path / "daemon.log"
    full_env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    full_env.update(env)
    full_env["NOTIFY_SOCKET"] = str(notify_path)
    full_env["WATCHDOG_USEC"] = "2000000"  # as WatchdogSec=2 would: a ping every second
    with log_path.open("w") as log_file:
        proc = subprocess.Popen(
            [sys.executable, "-m", "agent.cli.main", "run", "--config", str(config)],
            env=full_env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=Path(__file__).resolve().parents[2],
        )
    return RunningDaemon(proc, port, notify, log_path)
