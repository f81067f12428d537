"""SQLite has one writer: the rollup job must not keep a tick's write waiting.

The daemon's tick gives its database work a deadline (half the interval, at least 1 s); a write
that waits longer for SQLite's lock is treated as an outage and its round spooled. At 1 s ticks
(bench/memory.py) the minute rollup, which computed its rows between its writes, and the hour's
packing, which commits batch after batch, kept ticks waiting past it. Here a second engine on
the same file, with a short busy timeout, plays the tick.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, Engine, func, select

from agent.daemon import deadline as deadline_module
from agent.daemon.deadline import Deadline
from agent.storage import rollup as rollup_module
from agent.storage.db import create_engine, open_database
from agent.storage.rollup import Meter, Write
from migrations.schema import collector_runs, sample_chunks
from tests.agent.rollup_helpers import Box, EngineScrape, Gpu, at, rollup, usage_rows

TICK_BUSY_SECONDS = 0.5  # the tick's engine gives up on SQLite's lock after this


@pytest.fixture
def engines(tmp_path: Path) -> Iterator[tuple[Engine, Engine]]:
    """The rollup's engine and the tick's, on one SQLite file."""
    url = f"sqlite:///{tmp_path / 'box.db'}"
    db, tick_db = open_database(url), create_engine(url, timeout=TICK_BUSY_SECONDS)
    yield db, tick_db
    db.dispose()
    tick_db.dispose()


@dataclass
class GatedMeter:
    """The ledger's meter, held inside its computation until released."""

    inner: Meter
    computing: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)

    def minutes(self, *args: Any) -> Write:
        write = self.inner.minutes(*args)
        self.computing.set()
        assert self.release.wait(10), "the test never released the meter"
        return write

    def merge(self, conn: Connection, resolution: int, start: datetime, end: datetime) -> None:
        self.inner.merge(conn, resolution, start, end)

    def reads(self, metric: str) -> bool:
        return self.inner.reads(metric)


def last_tick(db: Engine) -> datetime | None:
    with db.connect() as conn:
        return conn.execute(select(func.max(collector_runs.c.ts))).scalar()


def test_a_tick_writes_while_the_minute_rollup_computes(engines: tuple[Engine, Engine]) -> None:
    db, tick_db = engines
    gpu = Gpu(utilization=0.25)
    box = Box(db, [gpu])
    for t in range(0, 130, 10):
        box.tick(at(t))
    job = rollup(db)
    assert job.meter is not None
    gate = GatedMeter(job.meter)
    job.meter = gate
    failed: list[BaseException] = []

    def run() -> None:
        try:
            job.run(at(130))
        except BaseException as exc:  # handed to the test's thread
            failed.append(exc)

    worker = threading.Thread(target=run)
    worker.start()
    try:
        assert gate.computing.wait(10)
        # The rollup is mid-computation: the tick's write must not find the lock taken
        # (before, the minute rows' DELETE had taken it: "database is locked" after 0.5 s).
        Box(tick_db, [gpu]).tick(at(130))
    finally:
        gate.release.set()
        worker.join(10)
    assert not failed, failed
    assert last_tick(db) == at(130)
    assert sorted(usage_rows(db)) == [at(0), at(60)]  # and the rollup went on to write


def test_packing_lets_a_waiting_tick_write_between_its_batches(
    engines: tuple[Engine, Engine], monkeypatch: pytest.MonkeyPatch
) -> None:
    db, tick_db = engines
    # A few rows per packing transaction: this box's hour takes several batches.
    monkeypatch.setattr(rollup_module, "COMPACT_ROWS", 200)
    scrape = EngineScrape("llama", tokens={"a": 0.0, "b": 0.0, "c": 0.0})
    box = Box(db, [Gpu(), scrape])
    # Another writer on the file (a second host's box: its own rows, no clash with the packing).
    other = Box(tick_db, [Gpu(host="other", uuid="GPU-other")], host="other")
    turns: list[datetime] = []
    busy: list[float] = []

    def writer_turn(seconds: float) -> None:
        # Where the daemon waits for its tick's database call: between two batches the lock
        # is free, and a write goes through within its short busy timeout.
        busy.append(seconds)
        turns.append(at(len(turns)))
        other.tick(turns[-1])

    job = rollup(db, 30, writer_turn=writer_turn)
    for t in range(0, 2 * 3600 + 1, 30):
        scrape.tokens = {m: float(t) for m in scrape.tokens}
        box.tick(at(t))
        if t % 60 == 0:
            job.run(at(t))
    assert len(turns) >= 3  # the hour took several batches, with a turn between each two
    assert all(seconds > 0 for seconds in busy)  # each turn is told how long its batch took
    with db.connect() as conn:
        assert conn.execute(select(func.count()).select_from(sample_chunks)).scalar_one() > 0
        ticks = select(func.count()).where(collector_runs.c.host == "other")
        assert conn.execute(ticks).scalar_one() == len(turns)


def test_a_background_job_waits_for_the_ticks_database_call() -> None:
    deadline = Deadline()
    started, release = threading.Event(), threading.Event()

    def tick_call() -> None:
        started.set()
        release.wait(10)

    ticking = threading.Thread(target=lambda: deadline.call(tick_call, timeout=10))
    ticking.start()
    assert started.wait(10)
    waiting = threading.Thread(target=deadline.wait_idle, args=(10,))
    waiting.start()
    waiting.join(0.2)
    assert waiting.is_alive()  # the job's next transaction waits for the tick's call
    release.set()
    waiting.join(10)
    ticking.join(10)
    assert not waiting.is_alive() and not deadline.busy
    deadline.wait_idle(0)  # nothing running: no wait
    deadline.close()


def test_a_background_job_stands_aside_as_long_as_it_worked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The daemon's threads share one interpreter lock: after a packing batch of ``busy``
    # seconds, the job leaves the tick that long to itself, up to MAX_PAUSE.
    monkeypatch.setattr(deadline_module, "MAX_PAUSE", 0.3)
    deadline = Deadline()
    began = time.monotonic()
    deadline.turn(timeout=10, busy=0.1)
    assert 0.1 <= time.monotonic() - began < 0.3
    began = time.monotonic()
    deadline.turn(timeout=10, busy=60.0)
    assert 0.3 <= time.monotonic() - began < 5  # bounded: a slow batch does not stall packing
    deadline.close()
