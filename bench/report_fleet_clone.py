"""bench/report_fleet.py's clone: the one-host template (SQLite) copied into PostgreSQL as N hosts.

The tables are discovered from ``migrations.schema.metadata``: every table but the raw samples,
their chunks and the collector runs (a report never reads those), columns reflected from the
table objects, so the clone follows schema changes without edits. The template is loaded once
into temporary staging tables with COPY; each table is then filled inside PostgreSQL by one
``INSERT ... SELECT`` over (staging x hosts), rewriting per host:

- ``host`` columns: the host's name; ``gpu_uuid`` columns: the host's own UUID prefix;
- ``labels`` columns: the ``host`` label, the GPU UUIDs and the ``model`` label (hosts get
  their models in groups, so the fleet serves ``--fleet-models`` models), by ``replace()`` on
  the canonical JSON (agent.storage.store.labels_json), which keeps it canonical;
- ``series.id`` and every column referencing it: the old->new id map ``id + i * stride``
  (stride: the template's largest series id), so host i's series rows and the rows keyed by
  them move together.

Tables with neither a host column nor a series reference (histogram layouts, ...) are copied
once. Tables with a ``start`` column (the rollups and the cost ledger) are written a day at a
time ordered by (start, host): the heap order a fleet writing as time goes by produces, not
one host's month in a block, which would flatter every per-series read. Their indexes are
dropped for the load and rebuilt after (as ``pg_restore`` does), and foreign-key triggers are
off for the session (superuser), so 128 hosts take minutes.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from sqlalchemy import Connection, Engine, Table, delete, func, insert, select, text

from agent.cost.summarize import summarize
from agent.storage.rollup import MINUTE
from bench.cost_fleet import MODELS
from migrations.schema import alert_history, cost_records, metadata, series

# Raw data a report never reads: the samples, their packed chunks, the collector runs.
RAW_TABLES = frozenset({"samples", "sample_chunks", "collector_runs"})
TEMPLATE_UUID_PREFIX = f"GPU-{0:04x}"  # bench/cost_fleet.py: host number 0's GPUs
# The fleet's models beyond bench/cost_fleet.py's eight.
MORE_MODELS = (
    "meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen2.5-7B-Instruct",
    "mistralai/Mistral-7B-Instruct-v0.3", "google/gemma-2-9b-it",
    "microsoft/Phi-3.5-mini-instruct", "Qwen/Qwen2.5-32B-Instruct",
    "deepseek-ai/DeepSeek-V2-Lite-Chat", "01-ai/Yi-1.5-34B-Chat",
)  # fmt: skip
RULES = ("GpuIdle", "LatencyP99Spike", "QueueGrowing", "TargetDown", "KvCacheSaturated")
ALERTS_PER_HOST = 38  # bench/report.py: 300 a month over 8 hosts


def report_tables() -> list[Table]:
    """Every table a report may read, parents before children."""
    return [t for t in metadata.sorted_tables if t.name not in RAW_TABLES]


def model_name(k: int) -> str:
    names = (*MODELS, *MORE_MODELS)
    return names[k] if k < len(names) else f"org/model-{k}"


@dataclass(frozen=True, slots=True)
class Template:
    """What the clone rewrites: the template host's name and its models, in target order."""

    host: str
    models: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class CloneSpec:
    hosts: int
    fleet_models: int  # models across the fleet, in groups of the template's models per host
    minute_days: float | None  # keep only this many days of minute rows before ``now``
    month: tuple[datetime, datetime]  # the reported month, whose edge hours keep minute rows
    now: datetime

    def host_name(self, i: int) -> str:
        return f"gpu-node-{i + 1:04d}"


def _pair(key: str, value: str) -> str:
    """How ``"key":"value"`` reads inside canonical labels JSON."""
    return f"{json.dumps(key)}:{json.dumps(value)}"


# -- staging ----------------------------------------------------------------------------------


def stage(
    conn: Connection, source: Engine, tables: Sequence[Table], cache: dict[str, bytes]
) -> None:
    """The template's rows in temporary tables ``stage_<table>``, by COPY. ``cache`` keeps
    each table's COPY text after the first load, so that the next fleet size skips SQLite."""
    raw = conn.connection.driver_connection
    assert raw is not None
    for table in tables:
        name = f"stage_{table.name}"
        conn.execute(text(f"CREATE TEMP TABLE {name} (LIKE {table.name})"))
        columns = ", ".join(f'"{c.name}"' for c in table.columns)
        with raw.cursor() as cur:
            if table.name in cache:
                with cur.copy(f"COPY {name} ({columns}) FROM STDIN") as copy:
                    copy.write(cache[table.name])
                continue
            with source.connect() as src:
                result = src.execution_options(yield_per=50_000).execute(select(table))
                with cur.copy(f"COPY {name} ({columns}) FROM STDIN") as copy:
                    for row in result:
                        copy.write_row(tuple(row))
            with cur.copy(f"COPY {name} ({columns}) TO STDOUT") as copy:
                cache[table.name] = b"".join(bytes(block) for block in copy)


def trim_minutes(conn: Connection, tables: Sequence[Table], spec: CloneSpec) -> None:
    """--minute-days: drop older minute rows from staging, but the month's edge hours."""
    if spec.minute_days is None:
        return
    cut = spec.now - timedelta(days=spec.minute_days)
    edges = [(at - timedelta(hours=1), at + timedelta(hours=1)) for at in spec.month]
    for table in tables:
        if not {"resolution", "start"} <= set(table.c.keys()):
            continue
        keep = " OR ".join(f"(start >= :e{n}a AND start < :e{n}b)" for n in range(len(edges)))
        params: dict[str, Any] = {"minute": MINUTE, "cut": cut}
        for n, (a, b) in enumerate(edges):
            params |= {f"e{n}a": a, f"e{n}b": b}
        conn.execute(
            text(
                f"DELETE FROM stage_{table.name} WHERE resolution = :minute AND start < :cut "
                f"AND NOT ({keep})"
            ),
            params,
        )


def stage_hosts(conn: Connection, spec: CloneSpec, template: Template) -> None:
    """``stage_hosts``: per host its number, name, UUID prefix and labels to substitute."""
    per_host = len(template.models)
    groups = max(1, spec.fleet_models // max(1, per_host))
    model_cols = "".join(f", model_{j} text" for j in range(per_host))
    conn.execute(
        text(
            "CREATE TEMP TABLE stage_hosts (i int PRIMARY KEY, host text, host_label text, "
            f"uuid_prefix text{model_cols})"
        )
    )
    rows = []
    for i in range(spec.hosts):
        name = spec.host_name(i)
        row: dict[str, Any] = {
            "i": i, "host": name, "host_label": _pair("host", name), "uuid_prefix": f"GPU-{i:04x}",
        }  # fmt: skip
        for j in range(per_host):
            row[f"model_{j}"] = _pair("model", model_name((i % groups) * per_host + j))
        rows.append(row)
    names = ", ".join(rows[0])
    values = ", ".join(f":{k}" for k in rows[0])
    conn.execute(text(f"INSERT INTO stage_hosts ({names}) VALUES ({values})"), rows)


# -- the copy ---------------------------------------------------------------------------------


def _references_series(table: Table, column: str) -> bool:
    return any(fk.column.table is series for fk in table.c[column].foreign_keys)


def per_host(table: Table) -> bool:
    return (
        table is series
        or "host" in table.c
        or any(_references_series(table, c.name) for c in table.columns)
    )


def _expression(table: Table, column: str, template: Template) -> str:
    """The SELECT expression for ``column`` of host ``h`` from staging row ``s``."""
    if (table is series and column == "id") or _references_series(table, column):
        return f's."{column}" + h.i * :stride'
    if column == "host":
        return "h.host"
    if column == "gpu_uuid":
        return "replace(s.gpu_uuid, :uuid_old, h.uuid_prefix)"
    if column == "labels":
        expr = "replace(replace(s.labels, :host_old, h.host_label), :uuid_old, h.uuid_prefix)"
        for j in range(len(template.models)):
            expr = f"replace({expr}, :model_old_{j}, h.model_{j})"
        return expr
    return f's."{column}"'


def copy_table(
    conn: Connection, table: Table, template: Template, stride: int, layout: str
) -> None:
    names = [c.name for c in table.columns]
    quoted = ", ".join(f'"{n}"' for n in names)
    if not per_host(table):
        conn.execute(
            text(f"INSERT INTO {table.name} ({quoted}) SELECT {quoted} FROM stage_{table.name}")
        )
        return
    params: dict[str, Any] = {
        "stride": stride,
        "uuid_old": TEMPLATE_UUID_PREFIX,
        "host_old": _pair("host", template.host),
    }
    for j, model in enumerate(template.models):
        params[f"model_old_{j}"] = _pair("model", model)
    exprs = ", ".join(_expression(table, n, template) for n in names)
    body = (
        f"INSERT INTO {table.name} ({quoted}) SELECT {exprs} "
        f"FROM stage_{table.name} s CROSS JOIN stage_hosts h"
    )
    if "start" not in table.c or layout == "host":
        order = "h.i, s.start" if "start" in table.c else "h.i"
        conn.execute(text(f"{body} ORDER BY {order}"), params)
        return
    bounds = conn.execute(text(f"SELECT min(start), max(start) FROM stage_{table.name}")).one()
    if bounds[0] is None:
        return
    day = bounds[0].replace(hour=0, minute=0, second=0, microsecond=0)
    while day <= bounds[1]:
        window = params | {"a": day, "b": day + timedelta(days=1)}
        conn.execute(
            text(f"{body} WHERE s.start >= :a AND s.start < :b ORDER BY s.start, h.i"), window
        )
        conn.commit()
        day += timedelta(days=1)


@dataclass(frozen=True, slots=True)
class Indexes:
    """A table's constraints backed by indexes and its other indexes, to rebuild after a load."""

    table: str
    constraints: tuple[tuple[str, str], ...]  # (name, definition)
    indexes: tuple[tuple[str, str], ...]  # (name, CREATE INDEX ...)

    @classmethod
    def drop(cls, conn: Connection, table: str) -> Indexes:
        constraints = tuple(
            (str(n), str(d))
            for n, d in conn.execute(
                text(
                    "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint "
                    "WHERE conrelid = CAST(:t AS regclass) AND contype IN ('p', 'u')"
                ),
                {"t": table},
            )
        )
        owned = {n for n, _ in constraints}
        indexes = tuple(
            (str(n), str(d))
            for n, d in conn.execute(
                text("SELECT indexname, indexdef FROM pg_indexes WHERE tablename = :t"),
                {"t": table},
            )
            if n not in owned
        )
        for name, _ in indexes:
            conn.execute(text(f'DROP INDEX "{name}"'))
        for name, _ in constraints:
            conn.execute(text(f'ALTER TABLE {table} DROP CONSTRAINT "{name}"'))
        return cls(table, constraints, indexes)

    def rebuild(self, conn: Connection) -> None:
        for name, definition in self.constraints:
            conn.execute(text(f'ALTER TABLE {self.table} ADD CONSTRAINT "{name}" {definition}'))
        for _, definition in self.indexes:
            conn.execute(text(definition))


def _referenced(table: Table) -> bool:
    """Whether some other table's foreign key points at ``table`` (its key must stay)."""
    return any(
        fk.column.table is table for other in metadata.tables.values() for fk in other.foreign_keys
    )


def clone(
    target: Engine,
    source: Engine,
    spec: CloneSpec,
    template: Template,
    layout: str,
    cache: dict[str, bytes],
) -> dict[str, float]:
    """Fill ``target`` (emptied first) with ``spec.hosts`` copies of the template; returns
    seconds per phase. ``cache``: see :func:`stage`."""
    tables = report_tables()
    phases: dict[str, float] = {}
    t = time.perf_counter()
    with target.connect() as conn:
        everything = ", ".join(t.name for t in metadata.sorted_tables)
        conn.execute(text(f"TRUNCATE {everything} RESTART IDENTITY CASCADE"))
        conn.execute(text("SET work_mem = '256MB'"))
        conn.execute(text("SET maintenance_work_mem = '1GB'"))
        # Foreign-key triggers off for this session: the rows are the template's, consistent.
        conn.execute(text("SET session_replication_role = replica"))
        stage(conn, source, tables, cache)
        trim_minutes(conn, tables, spec)
        stage_hosts(conn, spec, template)
        for table in tables:
            conn.execute(text(f"ANALYZE stage_{table.name}"))
        stride = conn.execute(text("SELECT coalesce(max(id), 0) FROM stage_series")).scalar_one()
        conn.commit()
        phases["stage"] = time.perf_counter() - t
        t = time.perf_counter()
        for table in tables:
            bulk = "start" in table.c and not _referenced(table)
            saved = Indexes.drop(conn, table.name) if bulk else None
            copy_table(conn, table, template, stride, layout)
            conn.commit()
            if saved is not None:
                t_index = time.perf_counter()
                saved.rebuild(conn)
                conn.commit()
                phases[f"index {table.name}"] = time.perf_counter() - t_index
        phases["copy"] = (
            time.perf_counter() - t - sum(v for k, v in phases.items() if k.startswith("index "))
        )
        _reset_sequences(conn, tables)
        for table in tables:
            conn.execute(text(f"DROP TABLE stage_{table.name}"))
        conn.execute(text("DROP TABLE stage_hosts"))
        conn.execute(text("RESET ALL"))  # the pooled connection goes back as it came
        conn.commit()
    seed_extras(target, spec)
    t = time.perf_counter()
    with target.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("VACUUM ANALYZE"))
    phases["vacuum analyze"] = time.perf_counter() - t
    return phases


def _reset_sequences(conn: Connection, tables: Sequence[Table]) -> None:
    """Serial columns continue after the copied ids."""
    for table in tables:
        serial = table.autoincrement_column
        if serial is None:
            continue
        column = serial.name
        conn.execute(
            text(
                f"SELECT setval(pg_get_serial_sequence('{table.name}', '{column}'), "
                f"(SELECT coalesce(max({column}), 0) + 1 FROM {table.name}), false) "
                f"WHERE pg_get_serial_sequence('{table.name}', '{column}') IS NOT NULL"
            )
        )


# -- what a fleet adds: alerts and billing ----------------------------------------------------


def seed_extras(engine: Engine, spec: CloneSpec) -> None:
    """A month of alert history (bench/report.py's rate: 300 a month per 8 hosts) and a daily
    billed record per host, as bench/report.py stores them."""
    rng = random.Random(7)
    start, end = spec.month
    hosts = [spec.host_name(i) for i in range(spec.hosts)]
    minutes = int((end - start).total_seconds() // 60)
    alerts = []
    for n in range(ALERTS_PER_HOST * spec.hosts):
        fired = start + timedelta(minutes=rng.randrange(minutes))
        rule = RULES[n % len(RULES)]
        host = rng.choice(hosts)
        labels = {"host": host, "target": "vllm-0", "model": model_name(n % spec.fleet_models)}
        alerts.append({
            "scope": host, "rule": rule, "labels": json.dumps(labels, sort_keys=True),
            "severity": "warning", "fired_at": fired,
            "resolved_at": fired + timedelta(minutes=rng.randrange(5, 240)),
            "summary": f"{rule} on {host}",
        })  # fmt: skip
    bills = []
    day = start
    while day < end:
        for host in hosts:
            bills.append({
                "source": "runpod", "record_id": f"{host}-{day:%Y%m%d}", "kind": "billed",
                "resource": host, "period_start": day, "period_end": day + timedelta(days=1),
                "amount": Decimal("480.00"), "currency": "USD", "description": "pod",
                "imported_at": spec.now,
            })  # fmt: skip
        day += timedelta(days=1)
    with engine.begin() as conn:
        conn.execute(delete(alert_history))
        conn.execute(delete(cost_records).where(cost_records.c.source == "runpod"))
        conn.execute(insert(alert_history), alerts)
        conn.execute(insert(cost_records), bills)


def check(source: Engine, target: Engine, spec: CloneSpec, template: Template) -> str:
    """The template host's month against the first and last clone's (``summarize``): the
    same cost and tokens, or the clone is wrong (or ``--minute-days`` dropped rows it reads)."""
    start, end = spec.month
    want = summarize(source, start, end, host=template.host).fleet
    worst = 0.0
    for i in sorted({0, spec.hosts - 1}):
        got = summarize(target, start, end, host=spec.host_name(i)).fleet
        for a, b in ((want.cost_usd, got.cost_usd), (want.useful_tokens, got.useful_tokens)):
            worst = max(worst, abs(float(a) - float(b)) / max(abs(float(a)), 1e-12))
    verdict = "OK" if worst <= 1e-9 else "MISMATCH"
    return (
        f"the template host's month ${want.cost_usd:,.2f}, {want.useful_tokens:,.0f} tokens; "
        f"hosts 1 and {spec.hosts}: largest relative difference {worst:.1e}, {verdict}"
    )


def row_counts(engine: Engine) -> dict[str, int]:
    with engine.connect() as conn:
        return {
            t.name: conn.execute(select(func.count()).select_from(t)).scalar_one()
            for t in report_tables()
        }
