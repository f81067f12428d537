"""Reads and writes over ``migrations.schema``; the only module that issues SQL.

A round is written in one transaction with batched inserts: a tick never leaves half its
samples behind, and a failed write loses nothing that was stored before.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from itertools import islice
from typing import TypeVar

from sqlalchemy import Connection, Engine, Insert, delete, func, insert, select, tuple_

from agent.collect.runner import CollectorRun, Round
from agent.storage import raw
from agent.storage.db import insert_ignoring_conflicts
from collectors.base import Sample
from migrations.schema import collector_runs, samples, series

SeriesKey = tuple[str, str]  # (metric, canonical labels JSON)
Keyed = tuple[str, Sample, SeriesKey]  # (collector, sample, its series key)
# A round's sample rows go to the driver this many at a time: the parameter rows of a whole
# round held at once are about half of what storing a round allocates, every tick; a few
# statements more per round cost nothing next to that.
INSERT_BATCH = 256
T = TypeVar("T")


def labels_json(labels: Mapping[str, str]) -> str:
    """Canonical JSON of a label set: the stored identity of a series."""
    return json.dumps(dict(labels), sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class StoredSample:
    metric: str
    labels: dict[str, str]
    ts: datetime
    value: float


class Store:
    """Storage for one host's rounds, with a cache of series ids (they never change)."""

    def __init__(self, engine: Engine, host: str) -> None:
        self.engine = engine
        self.host = host
        self._series_ids: dict[SeriesKey, int] = {}
        # label_key() -> canonical JSON: the same few hundred label sets come back every tick.
        self._label_json: dict[tuple[tuple[str, str], ...], str] = {}

    def write_round(self, round_: Round, timeout: float | None = None) -> int:
        """Store every sample and collector run of ``round_`` in one transaction; returns rows.
        ``timeout``: PostgreSQL cancels the transaction's statements after that many seconds."""
        return self.write_rounds([round_], timeout=timeout)

    def write_rounds(
        self, rounds: Iterable[Round], replay: bool = False, timeout: float | None = None
    ) -> int:
        """Store ``rounds`` in one transaction; returns the sample rows written. ``rounds`` may
        be a generator: each is taken only when the transaction reaches it.

        ``replay``: the rounds come from the spool and may have been stored already (a write
        that timed out on our side but committed on the database's, a forward cut short by a
        crash): samples already there are kept, the rounds' collector runs are replaced, so
        forwarding twice neither fails nor doubles anything.
        """
        written = 0
        created: dict[SeriesKey, int] = {}
        with self.engine.begin() as conn:
            if timeout is not None and conn.dialect.name == "postgresql":
                conn.exec_driver_sql(f"SET LOCAL statement_timeout = {max(1, int(timeout * 1000))}")
            for round_ in rounds:
                written += self._write(conn, round_, replay, created)
        # Only now are the new ids durable: a rolled-back insert must not poison the cache.
        self._series_ids.update(created)
        return written

    def _write(
        self, conn: Connection, round_: Round, replay: bool, created: dict[SeriesKey, int]
    ) -> int:
        keyed = [(c, s, (s.metric, self._json(s))) for c, s in round_.tagged_samples()]
        new_ids = self._create_series(conn, keyed, created)
        created.update(new_ids)
        values = self._sample_values(keyed, created)
        del keyed  # its tuples (one per sample) need not live through the inserts
        statement = insert_ignoring_conflicts(conn, samples) if replay else insert(samples)
        for batch in _batches(values.items(), INSERT_BATCH):
            conn.execute(statement, [{"series_id": s, "ts": t, "value": v} for (s, t), v in batch])
        if replay:
            instants = sorted({r.ts for r in round_.runs})
            conn.execute(
                delete(collector_runs).where(
                    collector_runs.c.host == self.host, collector_runs.c.ts.in_(instants)
                )
            )
        if round_.runs:
            conn.execute(insert(collector_runs), [self._run_row(r) for r in round_.runs])
        return len(values)

    def _json(self, sample: Sample) -> str:
        key = sample.label_key()
        cached = self._label_json.get(key)
        if cached is None:
            if len(self._label_json) > 100_000:  # bounded: label churn (pids) must not grow it
                self._label_json.clear()
            cached = self._label_json[key] = labels_json(sample.labels)
        return cached

    def _run_row(self, run: CollectorRun) -> dict[str, object]:
        return {
            "host": self.host,
            "collector": run.collector,
            "ts": run.ts,
            "success": int(run.success),
            "duration_seconds": run.duration_seconds,
            "samples": len(run.samples),
            "error": run.error,
        }

    def _create_series(
        self, conn: Connection, keyed: Sequence[Keyed], known: Mapping[SeriesKey, int] = {}
    ) -> dict[SeriesKey, int]:
        """Ids of the series not yet cached (nor in ``known``), inserting those the database
        lacks."""
        missing = {
            key: collector
            for collector, _, key in keyed
            if key not in self._series_ids and key not in known
        }
        if not missing:
            return {}
        rows = [
            {"host": self.host, "collector": c, "metric": m, "labels": lj}
            for (m, lj), c in missing.items()
        ]
        conn.execute(self._insert_ignore(), rows)
        query = select(series.c.id, series.c.metric, series.c.labels).where(
            tuple_(series.c.metric, series.c.labels).in_(list(missing))
        )
        return {(metric, lj): sid for sid, metric, lj in conn.execute(query)}

    def _insert_ignore(self) -> Insert:
        # Another daemon (PostgreSQL fleet) may create the same series at the same moment.
        return insert_ignoring_conflicts(self.engine, series)

    def _sample_values(
        self, keyed: Sequence[Keyed], new_ids: Mapping[SeriesKey, int]
    ) -> dict[tuple[int, datetime], float]:
        values: dict[tuple[int, datetime], float] = {}
        for _, s, key in keyed:
            sid = self._series_ids.get(key) or new_ids[key]
            # One value per series and instant; a repeated series in a round keeps the last.
            values[(sid, s.ts)] = s.value
        return values

    def samples(self, metric: str | None = None) -> list[StoredSample]:
        """Stored samples, oldest first (optionally of one metric); for the CLI and tests."""
        query = select(series.c.id, series.c.metric, series.c.labels)
        if metric is not None:
            query = query.where(series.c.metric == metric)
        with self.engine.connect() as conn:
            meta = {sid: (m, lj) for sid, m, lj in conn.execute(query)}
            points = raw.read(conn, list(meta), None, None) if meta else {}
        out = [
            (ts, meta[sid][0], meta[sid][1], value)
            for sid, history in points.items()
            for ts, value in history
        ]
        out.sort(key=lambda row: row[:3])
        return [StoredSample(m, json.loads(lj), ts, v) for ts, m, lj, v in out]

    def window(
        self, metric: str, start: datetime, end: datetime, match: Mapping[str, str] = {}
    ) -> dict[str, list[tuple[datetime, float]]]:
        """Per series (canonical labels JSON), its points in (start, end] after its last point at
        or before ``start`` (the baseline an increase is measured from), oldest first.

        ``match`` keeps series whose labels include those pairs (all hosts when host is absent).
        """
        found = self.series_of(metric, match.get("host"))
        return self.points(
            {sid: lj for sid, (lj, labels) in found.items()
             if all(labels.get(k) == v for k, v in match.items())},
            start, end,
        )  # fmt: skip

    def series_of(self, metric: str, host: str | None) -> dict[int, tuple[str, dict[str, str]]]:
        """Every series of ``metric`` (of ``host``, through the (host, metric) index: on a shared
        database a host's alert inputs cost its own series, not the fleet's): id -> (labels
        JSON, labels)."""
        query = select(series.c.id, series.c.labels).where(series.c.metric == metric)
        if host is not None:
            query = query.where(series.c.host == host)
        with self.engine.connect() as conn:
            rows = conn.execute(query).all()
        return {sid: (lj, json.loads(lj)) for sid, lj in rows}

    def points(
        self, ids: Mapping[int, str], start: datetime, end: datetime
    ) -> dict[str, list[tuple[datetime, float]]]:
        """The window's points of the series ``ids`` (id -> labels JSON), as ``window``."""
        by_id = self.points_of(list(ids), start, end)
        return {labels: by_id[sid] for sid, labels in ids.items() if sid in by_id}

    def points_of(
        self, ids: Sequence[int], start: datetime, end: datetime
    ) -> dict[int, list[tuple[datetime, float]]]:
        """Per series id, its points in (start, end] after its baseline (see ``window``);
        series without any are left out."""
        if not ids:
            return {}
        with self.engine.connect() as conn:
            baselines = raw.last_at_or_before(conn, ids, start)
            inside = raw.read(conn, ids, start, end)
        out: dict[int, list[tuple[datetime, float]]] = {}
        for sid in ids:
            points = ([baselines[sid]] if sid in baselines else []) + inside.get(sid, [])
            if points:
                out[sid] = points
        return out

    def failing_at_stop(
        self, collectors: Sequence[str]
    ) -> dict[str, tuple[datetime | None, datetime]]:
        """Of ``collectors``, those whose latest stored run of this host failed: (their last
        success, or None; their first failure after it). Index lookups per collector."""
        c = collector_runs.c
        out: dict[str, tuple[datetime | None, datetime]] = {}
        with self.engine.connect() as conn:
            for name in collectors:
                mine = (c.host == self.host, c.collector == name)
                latest = conn.execute(
                    select(c.success).where(*mine).order_by(c.ts.desc()).limit(1)
                ).scalar()
                if latest is None or latest:
                    continue
                ok = conn.execute(select(func.max(c.ts)).where(*mine, c.success == 1)).scalar()
                after = (c.ts > ok,) if ok is not None else ()
                first = conn.execute(select(func.min(c.ts)).where(*mine, *after)).scalar()
                if first is not None:  # there is one: the latest run is a failure after ``ok``
                    out[name] = (ok, first)
        return out

    def collector_runs(self, collector: str | None = None) -> list[dict[str, object]]:
        """Stored collector runs of this host, oldest first."""
        query = (
            select(collector_runs)
            .where(collector_runs.c.host == self.host)
            .order_by(collector_runs.c.id)
        )
        if collector is not None:
            query = query.where(collector_runs.c.collector == collector)
        with self.engine.connect() as conn:
            return [dict(row._mapping) for row in conn.execute(query)]


def _batches(items: Iterable[T], size: int) -> Iterator[list[T]]:
    """``items`` in lists of ``size`` (the last may be shorter); ``itertools.batched`` is 3.12."""
    it = iter(items)
    while batch := list(islice(it, size)):
        yield batch
