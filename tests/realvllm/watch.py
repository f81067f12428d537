"""gpuwatch's side of the real-vLLM test: the daemon scraping the server every 2 s over the
fake NVML (one priced GPU, so cost exists), ``collect --once --json`` for a second opinion at a
quiet moment, and ``cost``/``report`` as JSON over the whole run."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from tests.agent.daemon_harness import RunningDaemon, free_port, start_daemon
from tests.fakenvml.build import FakeGpu, FakeNvmlConfig, write_config

TARGET = "vllm"
COLLECTOR = f"target/{TARGET}"
INTERVAL = 2
REPO = Path(__file__).resolve().parents[2]


@dataclass
class Watch:
    home: Path
    vllm_port: int
    fake_nvml_dir: Path
    otlp_port: int = 0  # the daemon's OTLP/gRPC receiver; 0: none
    objective: str = ""  # the [[slo]] table, once set_objective wrote it
    daemon: RunningDaemon | None = None

    @property
    def db(self) -> Path:
        return self.home / "gpuwatch.db"

    @property
    def config(self) -> Path:
        return self.home / "gpuwatch.toml"

    def _toml(self, db: Path, listen: str, nvml: bool) -> str:
        return (
            f'host = "vllm-box"\ndatabase_url = "sqlite:///{db}"\n'
            f'[daemon]\ninterval_seconds = {INTERVAL}\nmetrics_listen = "{listen}"\n'
            f"[collectors.nvml]\nenabled = {str(nvml).lower()}\n"
            f'[[targets]]\nname = "{TARGET}"\n'
            f'url = "http://127.0.0.1:{self.vllm_port}/metrics"\nengine = "vllm"\n'
            # The fake GPU lists no processes, so the target is given its GPU, as an
            # operator does where process listing is not supported.
            "gpus = [0]\n"
            '[[rates]]\ngpu = "*"\nusd_per_hour = 100.0\n'
            + (f'[otlp]\ngrpc_listen = "127.0.0.1:{self.otlp_port}"\n' if self.otlp_port else "")
            + self.objective
        )

    def start(self) -> None:
        port = free_port()
        self.config.write_text(self._toml(self.db, f"127.0.0.1:{port}", nvml=True))
        hardware = write_config(
            self.home / "hardware.txt",
            FakeNvmlConfig(
                gpus=(FakeGpu(uuid="GPU-0c0c0c0c-0000-0000-0000-000000000000", util=50),)
            ),
        )
        env = {"LD_LIBRARY_PATH": str(self.fake_nvml_dir), "FAKE_NVML_CONFIG": str(hardware)}
        self.daemon = start_daemon(self.config, self.home, port, env)
        self.daemon.wait_for_notify("READY=1", timeout=60)

    def set_objective(self, model: str, e2e_seconds: float, objective: float) -> None:
        """Write an [[slo]] for ``model`` and reload the daemon (SIGHUP), as an operator does:
        requests judged from their spans count from then on."""
        assert self.daemon is not None
        self.objective = f'[[slo]]\nmodel = "{model}"\ne2e = "{round(e2e_seconds * 1000)}ms"\n'
        self.objective += f"objective = {objective}\n"
        listen = f"127.0.0.1:{self.daemon.port}"
        self.config.write_text(self._toml(self.db, listen, nvml=True))
        self.daemon.signal(signal.SIGHUP)
        self.daemon.wait_for_notify("RELOADING=1", timeout=60)
        self.daemon.wait_for_notify("READY=1", timeout=60)
        assert "configuration reloaded" in self.daemon.log(), self.daemon.log()[-4000:]

    def span_requests(self, e2e_seconds: float) -> float:
        """The requests the daemon judged from spans by ``e2e <= e2e_seconds`` so far (its
        /metrics, this tick)."""
        assert self.daemon is not None
        label = f'objective="e2e<={round(e2e_seconds * 1000) / 1000:g}s"'
        return sum(
            float(line.rsplit(" ", 1)[1])
            for line in self.daemon.metrics().splitlines()
            if line.startswith("gpuwatch_slo_span_requests_total{") and label in line
        )

    def stop(self) -> None:
        if self.daemon is not None:
            code, _ = self.daemon.stop(timeout=30)
            assert code == 0, self.daemon.log()[-4000:]
            self.daemon.kill()
            self.daemon = None

    def stored_scrapes(self) -> int:
        """Successful scrapes of the vLLM target stored so far (a round is stored whole, its
        collector runs in the same transaction as its samples)."""
        if not self.db.exists():
            return 0
        with sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, timeout=10) as conn:
            try:
                (n,) = conn.execute(
                    "SELECT count(*) FROM collector_runs WHERE collector = ? AND success = 1",
                    (COLLECTOR,),
                ).fetchone()
            except sqlite3.OperationalError:  # not migrated yet
                return 0
        return int(n)

    def wait_for_stored_scrape(self, timeout: float = 90.0) -> None:
        """Until a scrape that began after this call is stored: two more than now, because the
        tick under way may have read the target before the caller's last request ended."""
        wanted = self.stored_scrapes() + 2
        deadline = time.monotonic() + timeout
        while self.stored_scrapes() < wanted:
            assert self.daemon is not None and self.daemon.proc.poll() is None, "daemon died"
            assert time.monotonic() < deadline, (
                f"no stored scrape of {COLLECTOR} in {timeout:.0f} s:\n{self.daemon.log()[-4000:]}"
            )
            time.sleep(0.2)

    def collect_once(self) -> list[dict[str, Any]]:
        """`gpuwatch collect --once --json` against the same target, into a database of its
        own (so the daemon's windows are untouched), NVML off: the target's samples only."""
        config = self.home / "collect.toml"
        config.write_text(self._toml(self.home / "collect.db", "", nvml=False))
        out = self._cli("collect", "--once", "--json", "--config", str(config))
        lines = [json.loads(line) for line in out.splitlines() if line.strip()]
        return [s for s in lines if s["collector"] == COLLECTOR]

    def cost(self, window_seconds: int) -> dict[str, Any]:
        out = self._cli(
            "cost", "--json", "--window", f"{window_seconds}s", "--config", str(self.config)
        )
        return dict(json.loads(out))

    def report(self, start: datetime, end: datetime) -> dict[str, Any]:
        out = self._cli(
            "report", "--format", "json", "--from", start.isoformat(), "--to", end.isoformat(),
            "--config", str(self.config),
        )  # fmt: skip
        return dict(json.loads(out))

    def _cli(self, *args: str) -> str:
        result = subprocess.run(
            [sys.executable, "-m", "agent.cli.main", *args],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=REPO,
            check=False,
        )
        assert result.returncode == 0, f"gpuwatch {args[0]} failed:\n{result.stderr[-4000:]}"
        return result.stdout
