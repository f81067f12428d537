"""The forward job: once a minute, after the rollup, what the fleet needs goes from the box's
own database to the central PostgreSQL.

A round reads each stream's next rows locally (:mod:`.streams`), writes them all centrally in
one transaction (:mod:`.central`), and only then moves the local watermarks: a crash or a
refused batch between the two leaves them where they were, and the next round sends the same
rows again, which the central upsert replaces. A central database that is away or slow fails
the forward (connect and statement timeouts bound the wait), logged once per outage; collection
and /metrics never wait on it, and the next minute resumes from the unchanged watermarks.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import Connection, Engine, delete, insert, select
from sqlalchemy.engine import create_engine
from sqlalchemy.exc import SQLAlchemyError

from agent.storage.forward.central import Central
from agent.storage.forward.streams import (
    REFS,
    STREAMS,
    Batch,
    Buckets,
    Mark,
    Ref,
    Row,
    Stream,
    map_refs,
    read_batch,
    referenced,
    state_keys,
)
from agent.storage.retention import trim_rollups
from agent.storage.rollup import JOBS
from migrations.runner import SchemaError, assert_at_head
from migrations.schema import forward_state, rollup_state

log = logging.getLogger(__name__)

IN_CHUNK = 5000  # ids per IN (...) list when reading series definitions locally


def central_engine(url: str, timeout_seconds: float) -> Engine:
    """An engine on the central database that gives up rather than hang the minute job: a
    connect timeout, and a statement timeout on every session. Nothing connects until used."""
    seconds = max(1, round(timeout_seconds))
    return create_engine(
        url,
        pool_pre_ping=True,
        pool_size=2,
        connect_args={
            "connect_timeout": seconds,
            "options": f"-c statement_timeout={seconds * 1000} -c lock_timeout={seconds * 1000}",
        },
    )


@dataclass(frozen=True, slots=True)
class ForwardResult:
    ok: bool
    rows: int = 0  # rows sent (series definitions included)
    rounds: int = 0
    caught_up: bool = False  # nothing left to send as of this run
    error: str | None = None


@dataclass
class Forwarder:
    """One box's forwarding to the central database."""

    local: Engine
    central: Engine
    host: str
    streams: Sequence[Stream] = STREAMS
    refs: Sequence[Ref] = REFS
    budget_seconds: float = 20.0  # per run: a long backlog goes out over several minutes
    # (minute, hour) retention of this host's rows in the central database; None: never trimmed
    retention: tuple[timedelta, timedelta] | None = None
    trim_every: timedelta = timedelta(hours=1)
    _trimmed_at: datetime | None = None
    monotonic: Callable[[], float] = time.monotonic
    _ids: dict[str, dict[int, int]] = field(default_factory=dict)  # ref -> local id -> central
    _checked: bool = False  # the central schema was found at this version's head
    _failing: bool = False

    def run(self, now: datetime) -> ForwardResult:
        """Forward what is new; never raises for a database that is away or refuses."""
        began, rows, rounds, more = self.monotonic(), 0, 0, True
        try:
            if not self._checked:
                assert_at_head(self.central)
                self._checked = True
            while more:
                sent, more = self._round(now)
                rows, rounds = rows + sent, rounds + 1
                if self.monotonic() - began > self.budget_seconds:
                    break
            self._trim(now)
        except _forward_errors() as exc:
            return self._failed(exc, rows, rounds)
        if self._failing:
            log.info("forwarding to the central database recovered")
        self._failing = False
        return ForwardResult(True, rows, rounds, not more)

    def _trim(self, now: datetime) -> None:
        """Once an hour, the box's own central rows past its retention go: the central database
        keeps what the boxes keep, each host trimming its own rows through their keys."""
        if self.retention is None:
            return
        if self._trimmed_at is not None and now - self._trimmed_at < self.trim_every:
            return
        with self.central.begin() as conn:
            trim_rollups(conn, self.host, now, *self.retention)
        self._trimmed_at = now

    def _failed(self, exc: Exception, rows: int, rounds: int) -> ForwardResult:
        # The id map may name central rows that are gone (a central database recreated): it is
        # rebuilt from the next batch's series, at the cost of one lookup.
        self._ids.clear()
        self._checked = False
        why = _brief(exc)
        if not self._failing:  # once per outage, not every minute while it lasts
            log.error("forwarding to the central database failed (retrying every minute): %s", why)
        self._failing = True
        return ForwardResult(False, rows, rounds, False, why)

    def _round(self, now: datetime) -> tuple[int, bool]:
        """One central transaction; returns (rows sent, whether more is waiting)."""
        with self.local.connect() as conn:
            marks = _marks(conn)
            complete = self._complete(conn)
            batches = [read_batch(conn, s, self.host, marks, complete, now) for s in self.streams]
            definitions = {
                ref.name: self._definitions(conn, ref, batches, marks) for ref in self.refs
            }
        moved = {k: m for b in batches for k, m in b.marks.items()}
        for name, rows in definitions.items():
            if rows:
                moved[name] = Mark(until_id=max(r[0] for r in rows))
        if not moved:
            return 0, False
        with self.central.begin() as conn:
            central = Central(conn)
            ids = {ref.name: central.map_ids(ref, definitions[ref.name]) for ref in self.refs}
            known = {name: self._ids.get(name, {}) | got for name, got in ids.items()}
            for batch in batches:
                central.write(batch.stream, map_refs(batch, known))
            central.set_watermarks(self.host, self._central_marks(marks | moved))
        for name, got in ids.items():  # only once committed: a rolled-back insert must not linger
            self._ids.setdefault(name, {}).update(got)
        with self.local.begin() as conn:
            _save_marks(conn, moved)
        sent = sum(len(d) for d in definitions.values()) + sum(len(b.rows) for b in batches)
        return sent, any(b.more for b in batches)

    def _definitions(
        self, conn: Connection, ref: Ref, batches: Sequence[Batch], marks: dict[str, Mark]
    ) -> list[Row]:
        """The definitions of ``ref`` to send: those the batches refer to that are not mapped
        yet, and every one created since the last sent (reports read some series without
        rollups: the GPU names)."""
        mapped = self._ids.get(ref.name, {})
        wanted = set().union(*(referenced(b, ref) for b in batches)) - set(mapped)
        return _definitions(conn, ref, self.host, wanted, marks.get(ref.name))

    def _complete(self, conn: Connection) -> dict[int, datetime]:
        """Resolution -> the local rollup watermark: buckets before it are final."""
        query = select(rollup_state.c.job, rollup_state.c.watermark).where(
            rollup_state.c.host == self.host, rollup_state.c.job.in_(list(JOBS.values()))
        )
        by_job = {job: at for job, at in conn.execute(query)}
        return {r: by_job[job] for r, job in JOBS.items() if job in by_job}

    def _central_marks(self, marks: dict[str, Mark]) -> dict[str, datetime]:
        """Per rollup job, how far every bucketed stream has been forwarded (the slowest)."""
        out: dict[str, datetime] = {}
        for resolution, job in JOBS.items():
            keys = [
                f"{s.name}/{resolution}"
                for s in self.streams
                if isinstance(s.cursor, Buckets) and resolution in s.cursor.resolutions
            ]
            got = [marks[k].until_ts for k in keys if k in marks]
            if keys and len(got) == len(keys) and all(got):
                out[job] = min(at for at in got if at is not None)
        return out


def _forward_errors() -> tuple[type[Exception], ...]:
    """What a failed forward raises. Evaluated only when something was raised: psycopg (COPY
    goes through its cursor, unwrapped by SQLAlchemy) costs every daemon about 10 MB, and one
    without a central database never needs it (bench/memory.py)."""
    import psycopg

    return (SQLAlchemyError, psycopg.Error, SchemaError, OSError)


def _marks(conn: Connection) -> dict[str, Mark]:
    rows = conn.execute(select(forward_state))
    return {r.stream: Mark(r.until_ts, r.until_id) for r in rows}


def _save_marks(conn: Connection, moved: dict[str, Mark]) -> None:
    conn.execute(delete(forward_state).where(forward_state.c.stream.in_(list(moved))))
    conn.execute(
        insert(forward_state),
        [{"stream": k, "until_ts": m.until_ts, "until_id": m.until_id} for k, m in moved.items()],
    )


def _definitions(
    conn: Connection, ref: Ref, host: str, wanted: Iterable[int], mark: Mark | None
) -> list[Row]:
    table = ref.table
    cols = [table.c[name] for name in ref.columns]
    new = select(*cols).where(*([table.c.host == host] if "host" in table.c else []))
    if mark is not None and mark.until_id is not None:
        new = new.where(table.c.id > mark.until_id)
    found: dict[int, Row] = {row[0]: tuple(row) for row in conn.execute(new)}
    missing = sorted(set(wanted) - set(found))
    for i in range(0, len(missing), IN_CHUNK):
        query = select(*cols).where(table.c.id.in_(missing[i : i + IN_CHUNK]))
        found.update((row[0], tuple(row)) for row in conn.execute(query))
    return [found[k] for k in sorted(found)]


def _brief(exc: Exception) -> str:
    # SQLAlchemy's str() appends the SQL and its parameters; the first line is the cause.
    cause = getattr(exc, "orig", None) or exc
    return (str(cause).splitlines() or [type(cause).__name__])[0]


def stream_names(streams: Sequence[Stream] = STREAMS, refs: Sequence[Ref] = REFS) -> list[str]:
    """Every forward_state key the forwarder uses."""
    return [*(r.name for r in refs), *(k for s in streams for k in state_keys(s))]
