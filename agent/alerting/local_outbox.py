"""The outbox's local fallback: notifications decided while the database is away.

Slack, webhooks and Alertmanager do not need the database, so an outage must not silence them.
While the tick spools its rounds, the host's rules are evaluated from memory
(``Alerting.evaluate_offline``) and the notifications they decide are queued here, in a small
SQLite file beside the spool, delivered from here with the same retries, and recorded here. When
the database takes rounds again, the rows move into the database's outbox as they stand
(delivered rows stay delivered, so nothing is sent twice) and the file goes. A file, not memory:
a daemon restarted during the outage still delivers what it had queued.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from agent.alerting import store as alert_store
from agent.storage.spool import delete_file, open_private, open_read_only
from alerts.dedup import Notification
from migrations.schema import from_micros, to_micros

TIMES = ("created_at", "expires_at", "next_attempt_at", "finished_at")
COLUMNS = (
    "scope", "receiver", "group_labels", "reason", "payload", "created_at", "expires_at",
    "next_attempt_at", "attempts", "status", "last_error", "finished_at",
)  # fmt: skip
SCHEMA = (
    "CREATE TABLE IF NOT EXISTS outbox (id INTEGER PRIMARY KEY AUTOINCREMENT, "
    + ", ".join(COLUMNS)
    + ")"
)


def outbox_path(spool: Path) -> Path:
    """The local outbox's file, beside the spool's."""
    return spool.with_name(f"{spool.stem}-outbox.db")


def pending_in(path: Path) -> int:
    """Notifications waiting in a local outbox file, read without writing (for the CLI)."""
    if not path.exists():
        return 0
    try:
        conn = open_read_only(path)
        try:
            row = conn.execute("SELECT count(*) FROM outbox WHERE status = 'pending'").fetchone()
        finally:
            conn.close()
    except sqlite3.Error:
        return 0
    return int(row[0])


class LocalOutbox:
    """An outbox in a SQLite file of its own, which exists only while it holds rows."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None

    @property
    def empty(self) -> bool:
        with self._lock:
            if self._conn is None and not self.path.exists():
                return True
            return self._open().execute("SELECT 1 FROM outbox LIMIT 1").fetchone() is None

    def add(self, scope: str, n: Notification, now: datetime, expires_at: datetime) -> None:
        values = alert_store.outbox_values(scope, n, now, expires_at)
        names = ", ".join(values)
        marks = ", ".join("?" for _ in values)
        with self._lock:
            conn = self._open()
            with conn:
                conn.execute(f"INSERT INTO outbox ({names}) VALUES ({marks})",
                             [_to_sql(k, v) for k, v in values.items()])  # fmt: skip

    def due(self, scope: str, now: datetime) -> list[alert_store.OutboxRow]:
        """As the database's ``due``: the oldest pending row of each group, when due."""
        pending = [r for r in self.rows() if r["scope"] == scope and r["status"] == "pending"]
        return alert_store.first_due(pending, now)

    def mark(
        self,
        row_id: int,
        status: str,
        now: datetime,
        *,
        attempts: int,
        error: str | None = None,
        next_attempt_at: datetime | None = None,
    ) -> None:
        values = alert_store.mark_values(status, now, attempts, error, next_attempt_at)
        sets = ", ".join(f"{k} = ?" for k in values)
        with self._lock:
            conn = self._open()
            with conn:
                conn.execute(f"UPDATE outbox SET {sets} WHERE id = ?",
                             [*(_to_sql(k, v) for k, v in values.items()), row_id])  # fmt: skip

    def rows(self) -> list[dict[str, Any]]:
        """Every row, oldest first, with the database outbox's column names and types."""
        with self._lock:
            if self._conn is None and not self.path.exists():
                return []
            query = f"SELECT id, {', '.join(COLUMNS)} FROM outbox ORDER BY id"
            cursor = self._open().execute(query)
            return [_from_sql(dict(zip(("id", *COLUMNS), row, strict=True))) for row in cursor]

    def remove(self, ids: Sequence[int]) -> None:
        """Forget rows the database now holds; the file goes with the last of them."""
        with self._lock:
            if self._conn is None:
                return
            with self._conn:
                self._conn.executemany("DELETE FROM outbox WHERE id = ?", [(i,) for i in ids])
            if self._conn.execute("SELECT 1 FROM outbox LIMIT 1").fetchone() is None:
                self._conn.close()
                self._conn = None
                delete_file(self.path)

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def _open(self) -> sqlite3.Connection:
        if self._conn is None:
            conn = open_private(self.path)
            conn.execute(SCHEMA)
            self._conn = conn
        return self._conn


def _to_sql(name: str, value: object) -> object:
    return to_micros(value) if name in TIMES and isinstance(value, datetime) else value


def _from_sql(row: Mapping[str, Any]) -> dict[str, Any]:
    return {k: from_micros(int(v)) if k in TIMES and v is not None else v for k, v in row.items()}
