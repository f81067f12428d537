"""The spool: rounds the database could not take, kept in a local file until it can.

When the configured database refuses a round, times out or is full (direct mode on a shared
PostgreSQL, above all), the tick appends the round here and carries on; a separate job forwards
the spool oldest first once the database answers again (:meth:`agent.daemon.app.App.drain`).
While anything is spooled, new rounds are appended behind it, so the database always holds a
prefix of the box's history and the rollups, which wait for the oldest spooled round, cover the
outage as if it had not happened.

The file is an embedded SQLite database of its own (``spool.db`` in the state directory), one
row per round, its samples and collector runs as compressed JSON. It is bounded: past
``max_bytes`` of stored rounds, the oldest are dropped and counted (as Telegraf does with its
output buffers), so an outage longer than the spool holds loses its oldest part, not the newest.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from agent.collect.runner import CollectorRun, Round
from collectors.base import Sample
from migrations.schema import from_micros, to_micros

SCHEMA = (
    "CREATE TABLE IF NOT EXISTS rounds ("
    " seq INTEGER PRIMARY KEY AUTOINCREMENT, ts INTEGER NOT NULL, data BLOB NOT NULL)"
)


@dataclass(frozen=True, slots=True)
class SpoolStats:
    bytes: int  # stored rounds, compressed
    rounds: int
    oldest: datetime | None  # the oldest spooled round's instant
    dropped: int  # rounds dropped because the spool was full, since the daemon started


@dataclass(frozen=True, slots=True)
class Spooled:
    """A round as the spool holds it: its sequence number and its compressed bytes."""

    seq: int
    data: bytes

    def round(self) -> Round:
        return decode(self.data)


class Spool:
    """A bounded, ordered store of rounds in a SQLite file; safe to use from two threads."""

    def __init__(self, path: Path, max_bytes: int) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._bytes = self._rounds = self._dropped = 0
        self._oldest: datetime | None = None
        if path.exists():  # rounds left by a previous run are forwarded like any others
            self._open()

    # -- what the tick and the drain job call ---------------------------------------------

    def append(self, round_: Round) -> None:
        """Keep ``round_`` behind the others; drop the oldest while over ``max_bytes``."""
        data = encode(round_)
        with self._lock:
            conn = self._open()
            with conn:
                conn.execute("INSERT INTO rounds (ts, data) VALUES (?, ?)",
                             (to_micros(round_.ts), data))  # fmt: skip
                self._bytes += len(data)
                self._rounds += 1
                self._oldest = self._oldest or round_.ts
                self._drop_over(conn)

    def oldest(self, limit: int) -> list[Spooled]:
        """Up to ``limit`` rounds, oldest first, still encoded: the drain decodes one at a time
        as it writes them, so a batch costs one round's objects, not ``limit`` rounds'."""
        with self._lock:
            if not self._rounds or self._conn is None:
                return []
            rows = self._conn.execute(
                "SELECT seq, data FROM rounds ORDER BY seq LIMIT ?", (limit,)
            ).fetchall()
        return [Spooled(seq, data) for seq, data in rows]

    def remove(self, seqs: Sequence[int]) -> None:
        """Forget rounds the database has committed."""
        if not seqs:
            return
        with self._lock:
            conn = self._open()
            with conn:
                conn.executemany("DELETE FROM rounds WHERE seq = ?", [(s,) for s in seqs])
            self._recount(conn)
            if self._rounds == 0:
                # Empty: the file goes, and with it its connection and page cache, which a
                # daemon that spools once in a while would otherwise keep for good.
                conn.close()
                self._conn = None
                delete_file(self.path)

    def refresh(self) -> None:
        """Recount from the file: another Spool on it (the App a reload replaced) may have
        appended since this one opened it."""
        with self._lock:
            if self._conn is not None or self.path.exists():
                self._recount(self._open())

    def stats(self) -> SpoolStats:
        with self._lock:
            return SpoolStats(self._bytes, self._rounds, self._oldest, self._dropped)

    @property
    def empty(self) -> bool:
        with self._lock:
            return self._rounds == 0

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    # -- the file --------------------------------------------------------------------------

    def _open(self) -> sqlite3.Connection:
        if self._conn is None:
            conn = open_private(self.path)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute(SCHEMA)
            self._conn = conn
            self._recount(conn)
        return self._conn

    def _recount(self, conn: sqlite3.Connection) -> None:
        total, count, first = conn.execute(
            "SELECT coalesce(sum(length(data)), 0), count(*), min(ts) FROM rounds"
        ).fetchone()
        self._bytes, self._rounds = int(total), int(count)
        self._oldest = None if first is None else from_micros(int(first))

    def _drop_over(self, conn: sqlite3.Connection) -> None:
        while self._bytes > self.max_bytes and self._rounds > 1:
            seq, size = conn.execute(
                "SELECT seq, length(data) FROM rounds ORDER BY seq LIMIT 1"
            ).fetchone()
            conn.execute("DELETE FROM rounds WHERE seq = ?", (seq,))
            self._bytes -= int(size)
            self._rounds -= 1
            self._dropped += 1
        if self._dropped:
            first = conn.execute("SELECT min(ts) FROM rounds").fetchone()[0]
            self._oldest = None if first is None else from_micros(int(first))


def open_private(path: Path) -> sqlite3.Connection:
    """A local SQLite file of the daemon's own (spool, local outbox): its folder 0700, the file
    0600, as private as the database (rounds and notifications name the box's hosts and
    models); autocommit, usable from the tick's and the jobs' threads under the caller's lock."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    path.chmod(0o600)
    return conn


def open_read_only(path: Path) -> sqlite3.Connection:
    """Such a file read without writing, for the CLI, which may run as another user."""
    return sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)


def delete_file(path: Path) -> None:
    """Such a file and its journals, once it holds nothing."""
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


def peek(path: Path) -> SpoolStats | None:
    """What a spool file holds, read without writing (for the CLI, which may run as another
    user than the daemon); None when there is no spool or it cannot be read."""
    if not path.exists():
        return None
    try:
        conn = open_read_only(path)
        try:
            total, count, first = conn.execute(
                "SELECT coalesce(sum(length(data)), 0), count(*), min(ts) FROM rounds"
            ).fetchone()
        finally:
            conn.close()
    except sqlite3.Error:
        return None
    oldest = None if first is None else from_micros(int(first))
    return SpoolStats(int(total), int(count), oldest, 0)


# -- rounds as bytes ---------------------------------------------------------------------------


def encode(round_: Round) -> bytes:
    """A round as compressed JSON (NaN and infinities included, as Python's json writes them)."""
    document = {
        "ts": to_micros(round_.ts),
        "runs": [
            [
                r.collector,
                to_micros(r.ts),
                r.success,
                r.duration_seconds,
                r.error,
                r.target,
                _samples(r.samples),
            ]
            for r in round_.runs
        ],  # fmt: skip
        "derived": _samples(round_.derived),
    }
    return zlib.compress(json.dumps(document, separators=(",", ":")).encode(), 6)


def decode(data: bytes) -> Round:
    document = json.loads(zlib.decompress(data))
    runs = tuple(
        CollectorRun(collector, from_micros(ts), success, duration, _from_samples(samples),
                     error, target)
        for collector, ts, success, duration, error, target, samples in document["runs"]
    )  # fmt: skip
    return Round(from_micros(document["ts"]), runs, _from_samples(document["derived"]))


def _samples(samples: Iterable[Sample]) -> list[list[Any]]:
    return [[s.metric, s.labels, s.value, to_micros(s.ts)] for s in samples]


def _from_samples(rows: Iterable[list[Any]]) -> tuple[Sample, ...]:
    return tuple(
        Sample(metric=metric, value=value, labels=labels, ts=from_micros(ts))
        for metric, labels, value, ts in rows
    )
