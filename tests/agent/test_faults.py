"""Outages against the real daemon and a real PostgreSQL of the test's own (direct mode): the
server stopped, then paused with SIGSTOP. Collection and /metrics go on, the rounds go to the
spool, and once the server is back every round is in it exactly once (docs/faults.md)."""

from __future__ import annotations

import re
import tempfile
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import create_engine, text

from agent.storage.db import upgrade_database
from tests.agent.daemon_harness import RunningDaemon, free_port, start_daemon
from tests.agent.own_postgres import OwnPostgres, wait_until
from tests.fakenvml.build import FakeGpu, FakeNvmlConfig
from tests.fakenvml.build import write_config as write_hardware

OUTAGE_SECONDS = 6.0
UTIL = "gpuwatch_gpu_utilization_ratio"


@pytest.fixture
def server() -> Iterator[OwnPostgres]:
    own = OwnPostgres.create()
    yield own
    own.close()


@pytest.fixture
def daemon(tmp_path: Path, server: OwnPostgres, fake_nvml_dir: Path) -> Iterator[RunningDaemon]:
    upgrade_database(server.url)
    running = launch(tmp_path, server, fake_nvml_dir)
    yield running
    running.kill()


def launch(folder: Path, server: OwnPostgres, fake_nvml_dir: Path) -> RunningDaemon:
    """The real daemon at 1 s ticks on one fake GPU, its spool in ``folder``/state; a second
    launch in the same folder (after a kill) picks up the spool the first left."""
    folder.mkdir(parents=True, exist_ok=True)
    run = Path(tempfile.mkdtemp(prefix="run-", dir=folder))  # its own log and notify socket
    port = free_port()
    config = run / "gpuwatch.toml"
    config.write_text(
        f'host = "box"\ndatabase_url = "{server.url}"\n'
        f'[daemon]\ninterval_seconds = 1\nmetrics_listen = "127.0.0.1:{port}"\n'
    )
    hardware = write_hardware(
        run / "hardware.txt", FakeNvmlConfig(gpus=(FakeGpu(uuid="GPU-a", util=42),))
    )
    env = {
        "LD_LIBRARY_PATH": str(fake_nvml_dir),
        "FAKE_NVML_CONFIG": str(hardware),
        "STATE_DIRECTORY": str(folder / "state"),
    }
    running = start_daemon(config, run, port, env=env)
    running.wait_for_metric(UTIL)
    return running


def spool_rounds(daemon: RunningDaemon) -> float:
    for family in text_string_to_metric_families(daemon.metrics()):
        for sample in family.samples:
            if sample.name == "gpuwatch_spool_rounds":
                return float(sample.value)
    raise AssertionError("gpuwatch_spool_rounds is not on /metrics")


def watch_metrics(daemon: RunningDaemon, seconds: float) -> list[tuple[float, float]]:
    """(seconds taken to answer, spooled rounds) every half second."""
    seen = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        started = time.monotonic()
        rounds = spool_rounds(daemon)
        seen.append((time.monotonic() - started, rounds))
        time.sleep(0.5)
    return seen


def stored_ticks(server: OwnPostgres) -> list[datetime]:
    engine = create_engine(server.url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                text("SELECT ts FROM collector_runs WHERE collector = 'nvml' ORDER BY ts")
            )
            return [r[0] for r in rows]
    finally:
        engine.dispose()


SKIP_LINES = (r"(\d+) tick\(s\) skipped", r"(\d+) skipped in that stretch")


def assert_every_tick_once(server: OwnPostgres, daemon: RunningDaemon) -> None:
    ticks = stored_ticks(server)
    assert len(ticks) == len(set(ticks)), "a round was stored twice"
    gaps = [(b - a).total_seconds() for a, b in zip(ticks, ticks[1:], strict=False)]
    # 1 s ticks: a gap is ticks that did not run, or rounds lost. The scheduler skips a tick
    # while the previous one still runs (the tick that met the outage waited its deadline; a
    # busy machine) and logs each skip; a lost round is a gap that no skip explains.
    missing = sum(round(gap) - 1 for gap in gaps if gap > 1.5)
    log = daemon.log()  # a stretch's first skip is logged at once, its total when it ends
    skipped = max(sum(int(n) for n in re.findall(pattern, log)) for pattern in SKIP_LINES)
    assert missing <= max(skipped, 1), (missing, skipped, max(gaps), daemon.log())
    utilisation = server.count(
        "SELECT count(*) FROM samples JOIN series ON series.id = samples.series_id "
        f"WHERE series.metric = '{UTIL}'"
    )
    assert utilisation == len(ticks)


def test_a_stopped_database_loses_no_round(server: OwnPostgres, daemon: RunningDaemon) -> None:
    time.sleep(2)
    server.stop()
    during = watch_metrics(daemon, OUTAGE_SECONDS)
    server.start()

    assert wait_until(lambda: spool_rounds(daemon) == 0, timeout=30), daemon.log()
    time.sleep(1.5)
    code, _ = daemon.stop()

    assert code == 0
    rounds = [r for _, r in during]
    assert rounds[-1] >= OUTAGE_SECONDS - 2 and rounds == sorted(rounds)  # spooling every tick
    assert_every_tick_once(server, daemon)
    log = daemon.log()
    assert log.count("storing rounds failed") == 1 and "Traceback" not in log
    assert "storing rounds recovered" in log and "forwarded" in log


def test_a_paused_database_blocks_neither_ticks_nor_metrics(
    server: OwnPostgres, daemon: RunningDaemon
) -> None:
    time.sleep(2)
    server.pause()
    try:
        during = watch_metrics(daemon, OUTAGE_SECONDS)
    finally:
        server.resume()

    assert wait_until(lambda: spool_rounds(daemon) == 0, timeout=30), daemon.log()
    time.sleep(1.5)
    code, _ = daemon.stop()

    assert code == 0
    assert max(took for took, _ in during) < 1.0  # /metrics never waited on the database
    rounds = [r for _, r in during]
    assert rounds[-1] >= OUTAGE_SECONDS - 3 and rounds == sorted(rounds)
    assert_every_tick_once(server, daemon)
    assert "Traceback" not in daemon.log()
