"""The slow fault tests (`make test-faults`): the real daemon, a real PostgreSQL of the test's
own, faults repeated or built from a real full disk. They take a minute or more each, so they
run apart from `make test` (see the README and docs/faults.md)."""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path

import pytest

from agent.storage.db import upgrade_database
from tests.agent.daemon_harness import RunningDaemon
from tests.agent.own_postgres import OwnPostgres, wait_until
from tests.agent.test_faults import UTIL, assert_every_tick_once, launch, spool_rounds, stored_ticks

pytestmark = pytest.mark.slow

KILLS = 4


@pytest.fixture
def server() -> Iterator[OwnPostgres]:
    own = OwnPostgres.create()
    upgrade_database(own.url)
    yield own
    own.close()


def test_kill_9_around_forwarding_loses_and_doubles_nothing(
    tmp_path: Path, server: OwnPostgres, fake_nvml_dir: Path
) -> None:
    rng = random.Random(12)  # the same kill instants on every run
    daemon = launch(tmp_path, server, fake_nvml_dir)
    kills: list[tuple[datetime, float]] = []
    try:
        for _ in range(KILLS):
            time.sleep(1.5)
            server.stop()
            assert wait_until(partial(spooling, daemon, 4), timeout=20), daemon.log()
            server.start()
            # The drain job runs every 5 s: the kill lands before, during or after forwarding.
            time.sleep(rng.uniform(0.0, 6.0))
            spooled = spool_rounds(daemon)
            kills.append((datetime.now(UTC), spooled))
            daemon.kill()  # SIGKILL
            daemon = launch(tmp_path, server, fake_nvml_dir)  # the same spool, picked up
        assert wait_until(lambda: spool_rounds(daemon) == 0, timeout=40), daemon.log()
        time.sleep(1.5)
        code, _ = daemon.stop()
    finally:
        daemon.kill()

    assert code == 0
    assert any(spooled > 0 for _, spooled in kills), kills  # some kills met a spool
    ticks = stored_ticks(server)
    assert len(ticks) == len(set(ticks)), "a round was stored twice"
    for before, after in zip(ticks, ticks[1:], strict=False):
        if (after - before).total_seconds() > 2.5:  # only while no daemon was running
            assert any(before <= at <= after for at, _ in kills), (before, after, kills)
    assert server.count(_UTIL_SAMPLES) == len(ticks)  # and each round whole


def test_a_killed_database_loses_no_round(
    tmp_path: Path, server: OwnPostgres, fake_nvml_dir: Path
) -> None:
    daemon = launch(tmp_path, server, fake_nvml_dir)
    try:
        time.sleep(2)
        server.kill()  # kill -9 of the postmaster and its backends
        assert wait_until(partial(spooling, daemon, 5), timeout=20), daemon.log()
        server.start()  # crash recovery, then connections again
        assert wait_until(lambda: spool_rounds(daemon) == 0, timeout=40), daemon.log()
        time.sleep(1.5)
        code, _ = daemon.stop()
    finally:
        daemon.kill()
    assert code == 0
    assert_every_tick_once(server, daemon)
    assert "Traceback" not in daemon.log()


def test_a_full_disk_under_the_database_loses_no_round(tmp_path: Path, fake_nvml_dir: Path) -> None:
    server = OwnPostgres.create(disk_mb=80)  # initdb takes ~40 MB of it
    try:
        upgrade_database(server.url)
        daemon = launch(tmp_path, server, fake_nvml_dir)
        try:
            time.sleep(2)
            server.fill()
            full_at = datetime.now(UTC)
            assert wait_until(lambda: spool_rounds(daemon) >= 5, timeout=60), daemon.log()
            server.free()
            if not server.running:  # PostgreSQL may give up on a full disk (a PANIC)
                server.start()
            assert wait_until(lambda: spool_rounds(daemon) == 0, timeout=60), daemon.log()
            time.sleep(1.5)
            code, _ = daemon.stop()
        finally:
            daemon.kill()
        assert code == 0
        assert_every_tick_once(server, daemon)
        assert stored_ticks(server)[-1] > full_at + timedelta(seconds=5)
        log = daemon.log()
        assert "No space left on device" in log and "Traceback" not in log
    finally:
        server.close()


def spooling(daemon: RunningDaemon, at_least: float) -> bool:
    return spool_rounds(daemon) >= at_least


_UTIL_SAMPLES = (
    "SELECT count(*) FROM samples JOIN series ON series.id = samples.series_id "
    f"WHERE series.metric = '{UTIL}'"
)
