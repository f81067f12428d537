"""Raw samples of a revision-0005 database survive the move to the head and chunks, exactly.

0005 stored SQLite instants as text with microseconds; revision 0007 converts them to integer
microseconds in SQL. Every sample must read back with the same instant and value, before and
after the rollup job has packed the migrated hours into chunks.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from alembic import command
from sqlalchemy import Engine, MetaData, func, insert, select

from agent.storage.db import create_engine, open_database
from agent.storage.rollup import Rollup
from agent.storage.store import Store
from migrations.runner import alembic_config, upgrade_to_head
from migrations.schema import sample_chunks
from tests.migrations.test_upgrade_keeps_reports import DATA, _load

T = datetime(2026, 11, 30, 22, 0, tzinfo=UTC)


def _at_0005(db_url: str) -> Engine:
    engine = create_engine(db_url)
    with engine.begin() as conn:
        command.upgrade(alembic_config(conn), "0005")
    return engine


def _fixture_samples() -> list[tuple[str, str, datetime, float]]:
    dump = json.loads((DATA / "schema_0005_rows.json").read_text())
    meta = {row[0]: (row[3], row[4]) for row in dump["series"]["rows"]}
    return sorted(
        (*meta[sid], datetime.fromisoformat(ts), value)
        for sid, ts, value in dump["samples"]["rows"]
    )


def _stored(engine: Engine) -> list[tuple[str, str, datetime, float]]:
    rows = Store(engine, "a").samples()
    return sorted(
        (s.metric, json.dumps(s.labels, sort_keys=True, separators=(",", ":")), s.ts, s.value)
        for s in rows
    )


def test_every_raw_sample_reads_back_after_the_upgrade_and_after_packing(db_url: str) -> None:
    engine = _at_0005(db_url)
    _load(engine)
    upgrade_to_head(engine)
    engine.dispose()
    engine = open_database(db_url)
    want = _fixture_samples()
    assert _stored(engine) == want

    for host in ("a", "b"):  # the fixture's hosts; each daemon packs its own
        job = Rollup(engine, host, 30.0)
        for _ in range(4):  # a few hours per run: a migrated database is packed over runs
            job.run(T + timedelta(hours=4))
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(sample_chunks)).scalar_one() > 0
    assert _stored(engine) == want
    engine.dispose()


def test_microseconds_survive_the_conversion(db_url: str) -> None:
    engine = _at_0005(db_url)
    tables = MetaData()
    tables.reflect(engine)
    sqlite = engine.dialect.name == "sqlite"
    instants = [
        T + timedelta(microseconds=1),
        T + timedelta(seconds=10, microseconds=999_999),
        datetime(1999, 12, 31, 23, 59, 59, 500_000, tzinfo=UTC),
        datetime(2038, 1, 19, 3, 14, 8, 123_456, tzinfo=UTC),  # past a 32-bit time_t
    ]
    with engine.begin() as conn:
        conn.execute(insert(tables.tables["series"]).values(
            id=1, host="a", collector="c", metric="m", labels="{}"
        ))  # fmt: skip
        conn.execute(
            insert(tables.tables["samples"]),
            [
                {"series_id": 1, "ts": t.replace(tzinfo=None) if sqlite else t, "value": float(i)}
                for i, t in enumerate(instants)
            ],
        )
    upgrade_to_head(engine)
    engine.dispose()
    engine = open_database(db_url)
    assert [(s.ts, s.value) for s in Store(engine, "a").samples()] == sorted(
        (t, float(i)) for i, t in enumerate(instants)
    )
    engine.dispose()
