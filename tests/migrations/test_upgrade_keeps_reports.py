"""A database made by revision 0005, upgraded to the head, gives every report figure it gave.

The rows (tests/data/schema_0005_rows.json) and the figures (schema_0005_reports.json) were made
once, by tests/data/make_0005_fixture.py with the code of revision 0005: three hours of a host
with two GPUs and two vLLM targets, one restart with a new histogram bucket layout, rolled up
and metered by the real rollup job. Here they are loaded into a database at 0005 through the
tables as 0005 laid them out (reflected, not migrations.schema, which describes the head),
upgraded to the head, and the same reports and cost summaries are built again.

The comparison is exact: money is Decimal text, token and request counts are integers, and the
floats (hours, ratios, quantiles) are printed rounded by the report itself; the summaries'
floats are sums of integer-valued increases and of the same ledger rows, so exact too.
"""

from __future__ import annotations

import json
import math
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from alembic import command
from sqlalchemy import DateTime, Engine, Integer, MetaData, Numeric, Table, insert, text

from agent.storage.db import create_engine, open_database
from migrations.runner import alembic_config, upgrade_to_head
from tests.data.make_0005_fixture import as_of_0005, figures, fill, without_advice

DATA = Path(__file__).resolve().parents[1] / "data"


def _load(engine: Engine) -> None:
    """Every stored row, into the tables as revision 0005 made them."""
    dump = json.loads((DATA / "schema_0005_rows.json").read_text())
    tables = MetaData()
    tables.reflect(engine)
    sqlite = engine.dialect.name == "sqlite"
    with engine.begin() as conn:
        for table in tables.sorted_tables:
            if table.name not in dump or not dump[table.name]["rows"]:
                continue
            columns = dump[table.name]["columns"]
            rows = [
                {name: _value(table, name, v, sqlite) for name, v in zip(columns, row, strict=True)}
                for row in dump[table.name]["rows"]
            ]
            conn.execute(insert(table), rows)
        if not sqlite:  # explicit ids leave the sequences behind: later inserts must not clash
            for table in tables.sorted_tables:
                if _serial(table) and dump.get(table.name, {}).get("rows"):
                    conn.execute(text(
                        f"SELECT setval(pg_get_serial_sequence('{table.name}', 'id'), "
                        f"(SELECT coalesce(max(id), 0) + 1 FROM {table.name}), false)"
                    ))  # fmt: skip


def _serial(table: Table) -> bool:
    return (
        "id" in table.c
        and table.c.id.primary_key
        and table.c.id.autoincrement is not False
        and isinstance(table.c.id.type, Integer)
    )


def _value(table: Table, name: str, value: Any, sqlite: bool) -> Any:
    if value is None:
        return None
    kind = table.c[name].type
    if isinstance(kind, DateTime) and isinstance(value, str):
        at = datetime.fromisoformat(value)
        # 0005 stored SQLite instants as naive UTC text; a reflected column does not convert.
        return at.replace(tzinfo=None) if sqlite else at
    if isinstance(kind, Numeric) and kind.asdecimal is not False and isinstance(value, str):
        return Decimal(value)
    return value


def test_an_upgraded_0005_database_reports_the_same_figures(db_url: str) -> None:
    engine = create_engine(db_url)
    with engine.begin() as conn:
        command.upgrade(alembic_config(conn), "0005")
    _load(engine)
    upgrade_to_head(engine)
    engine.dispose()
    engine = open_database(db_url)
    try:
        want = without_advice(json.loads((DATA / "schema_0005_reports.json").read_text()))
        got = as_of_0005(json.loads(json.dumps(figures(engine), sort_keys=True)), want)
    finally:
        engine.dispose()
    assert sorted(got) == sorted(want)
    for name in want:
        assert got[name] == want[name], name


def test_the_same_rounds_rolled_up_today_give_the_same_figures(db: Engine) -> None:
    """The readers and the rollup of today against those of 0005: the fixture's scenario,
    stored and rolled up by the code of now (histogram rows, only the metrics read), reports
    every figure the bucket rows of 0005 gave. The fixture was made on SQLite: on PostgreSQL
    the database sums the same ledger floats in another order, so unrounded float sums (the
    cost summaries' seconds) may differ in the last bits; everything else is exact."""
    fill(db)
    want = without_advice(json.loads((DATA / "schema_0005_reports.json").read_text()))
    got = as_of_0005(json.loads(json.dumps(figures(db), sort_keys=True)), want)
    for name in want:
        assert _same(got[name], want[name]), name


def _same(got: Any, want: Any) -> bool:
    if isinstance(want, float) and isinstance(got, float):
        return math.isclose(got, want, rel_tol=1e-12)
    if isinstance(want, dict) and isinstance(got, dict):
        return got.keys() == want.keys() and all(_same(got[k], want[k]) for k in want)
    if isinstance(want, list) and isinstance(got, list):
        return len(got) == len(want) and all(_same(g, w) for g, w in zip(got, want, strict=True))
    return bool(got == want)
