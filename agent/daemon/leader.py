"""Which daemon does the fleet's work: billing sources, budget alerts, the weekly digest.

On a shared PostgreSQL every host's daemon writes its own data, but fleet-level work must run on
exactly one of them at a time. The leader is whoever holds a PostgreSQL session-level advisory
lock, on a connection kept open for the purpose: the lock goes when that session ends, so a
daemon that dies (SIGKILL, power loss: the server notices the closed socket) hands leadership
to the next daemon that asks. Each daemon asks every ``CHECK_SECONDS``. On SQLite there is one
daemon per database file, which is always its own leader.

The work itself is made safe against a brief overlap (a partitioned ex-leader that has not yet
noticed): budget alert states live in the database and digests are claimed by primary key, so
leadership decides who does the work, and the database decides that it is done once.
"""

from __future__ import annotations

import logging
from typing import Protocol

from sqlalchemy import Connection, Engine, text
from sqlalchemy.exc import SQLAlchemyError

from agent.daemon.outage import OutageLog, brief

log = logging.getLogger(__name__)

# pg_try_advisory_lock takes a bigint; this one is "gpuwatch" in ASCII, so it will not collide
# with another application's small integers on a shared server.
LOCK_KEY = 0x67707577617463
CHECK_SECONDS = 10


class Leadership(Protocol):
    def held(self) -> bool:
        """Whether this daemon leads now (taking the lead when it is free)."""
        ...

    def close(self) -> None: ...


class AlwaysLeader:
    """SQLite: the only daemon of its database."""

    def held(self) -> bool:
        return True

    def close(self) -> None:
        pass


class AdvisoryLockLeader:
    """Leadership as a PostgreSQL advisory lock held by a dedicated session."""

    def __init__(self, engine: Engine, host: str, key: int = LOCK_KEY) -> None:
        self._engine = engine
        self._host = host
        self._key = key
        self._conn: Connection | None = None
        # Asked every few seconds: while the database is away, a line a minute is enough.
        self._outage = OutageLog("asking for the fleet lock", log, then="not leading meanwhile")

    def held(self) -> bool:
        if self._conn is not None:
            if self._alive(self._conn):
                return True
            self._drop("lost the database session that held the fleet lock")
        return self._try_acquire()

    def _alive(self, conn: Connection) -> bool:
        try:
            conn.execute(text("SELECT 1"))
            conn.commit()
        except SQLAlchemyError:
            return False
        return True

    def _try_acquire(self) -> bool:
        try:
            conn = self._engine.connect()
        except SQLAlchemyError as exc:
            self._outage.failed(brief(exc))
            return False
        try:
            got = bool(
                conn.execute(text("SELECT pg_try_advisory_lock(:k)"), {"k": self._key}).scalar()
            )
            conn.commit()  # the lock is the session's; no transaction stays open for it
        except SQLAlchemyError as exc:
            self._outage.failed(brief(exc))
            conn.close()
            return False
        self._outage.ok()
        if not got:
            conn.close()
            return False
        self._conn = conn
        log.info("%s leads the fleet work now (billing, budget alerts, digest)", self._host)
        return True

    def _drop(self, why: str) -> None:
        log.warning("%s: %s", self._host, why)
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.invalidate()  # never back into the pool: it may still hold the lock
                conn.close()
            except SQLAlchemyError:
                pass

    def close(self) -> None:
        """Give the lead away at once (a clean stop), instead of when the session times out."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        try:
            conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": self._key})
            conn.commit()
        except SQLAlchemyError:
            pass
        finally:
            conn.invalidate()
            conn.close()


def leadership_for(engine: Engine, host: str) -> Leadership:
    if engine.dialect.name == "postgresql":
        return AdvisoryLockLeader(engine, host)
    return AlwaysLeader()
