"""Benchmark: how long does `gpuwatch report --month` take, on a box's SQLite and on a fleet's
PostgreSQL, next to the cost engine's own month answer?

    python bench/report.py [--step-seconds 60] [--days 32] [--template PATH] [--rounds 5]
                           [--postgres-url URL] [--hosts 8,128] [--minute-days D]

The template: one host (8 GPUs, 2 serving targets of one model each, TTFT and end-to-end
histograms, GPU memory; bench/fleet.py) over ``--days`` of ticks ``--step-seconds`` apart from
2026-10-31, filled into SQLite and rolled up by its real rollup job, so it holds what today's
rollup writes (minutes to fill; kept at ``--template`` and reused while the code that writes it
and the fill's sizes are the same). A month's alert history and daily billed records are
added, so every section of the report has data. The report reads rollups only, one row per
series and minute at any raw step of a minute or less, so a 60 s step gives the tables a 10 s
daemon makes.

1. SQLite: the template itself, one box's database.
2. PostgreSQL (skipped without one): for each N of ``--hosts``, a fresh database gets N
   renamed copies of the template host (host, GPU UUIDs, series ids; models in groups so the
   fleet serves ``--fleet-models`` models), every table but the raw samples, written a day at
   a time in (start, host) order as a fleet writing over time lays them out, then VACUUM
   ANALYZE; then a check that the first and the last host's month equal the template host's.
   ``--minute-days D`` keeps only the last D days of minute rows (a month's report reads day
   and hour rows; 128 hosts with every minute row are ~38 GB, with 2 days ~3 GB).

Measured per database: the baseline, ``agent.cost.summarize.summarize`` over November 2026
(the cost engine's one month query); ``build_report`` for the month, its first call on a fresh
engine and the median of ``--rounds``; each rendering; and `gpuwatch report --month` as a
process (start, imports, connect, build, the default table), what a user waits for. Targets:
under 2 s for up to 64 GPUs, under 3 s for 1,024 GPUs (128 hosts).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sqlalchemy import Connection, Engine, Table, create_engine, select, text  # noqa: E402

from agent.config.rates import Rate  # noqa: E402
from agent.config.settings import BudgetConfig, Config  # noqa: E402
from agent.cost.summarize import summarize  # noqa: E402
from agent.reporting.build import build_report  # noqa: E402
from agent.reporting.model import Report  # noqa: E402
from agent.reporting.period import month_period  # noqa: E402
from agent.reporting.render.dispatch import render  # noqa: E402
from agent.storage.db import open_database  # noqa: E402
from agent.storage.rollup import MINUTE  # noqa: E402
from bench.common import PG_ENV, drop_database, fresh_database, ms, timed, verdict  # noqa: E402
from bench.fleet import MODELS, TemplateSpec, ensure_template, seed_extras  # noqa: E402
from migrations.schema import metadata, series  # noqa: E402

MONTH = "2026-11"
GPUS_PER_HOST = 8
USD_PER_GPU_HOUR = Decimal("2.49")  # bench/fleet.py's default rate
FORMATS = ("table", "json", "csv", "markdown", "html")


def target_seconds(gpus: int) -> float:
    return 2.0 if gpus <= 64 else 3.0


# Raw data a report never reads: the samples, their packed chunks, the collector runs.
RAW_TABLES = frozenset({"samples", "sample_chunks", "collector_runs"})
TEMPLATE_UUID_PREFIX = f"GPU-{0:04x}"  # bench/fleet.py: host number 0's GPUs
# The fleet's models beyond bench/fleet.py's eight.
MORE_MODELS = (
    "meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen2.5-7B-Instruct",
    "mistralai/Mistral-7B-Instruct-v0.3", "google/gemma-2-9b-it",
    "microsoft/Phi-3.5-mini-instruct", "Qwen/Qwen2.5-32B-Instruct",
    "deepseek-ai/DeepSeek-V2-Lite-Chat", "01-ai/Yi-1.5-34B-Chat",
)  # fmt: skip


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


def copy_table(conn: Connection, table: Table, template: Template, stride: int) -> None:
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
    if "start" not in table.c:
        conn.execute(text(f"{body} ORDER BY h.i"), params)
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
            copy_table(conn, table, template, stride)
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
    hosts = [spec.host_name(i) for i in range(spec.hosts)]
    models = [model_name(k) for k in range(spec.fleet_models)]
    seed_extras(target, hosts, models, spec.month)
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


def check(source: Engine, target: Engine, spec: CloneSpec, template: Template) -> str:
    """The template host's month against the first and last clone's: the same cost and
    tokens, or the clone is wrong (or ``--minute-days`` dropped rows it reads)."""
    start, end = spec.month
    want = summarize(source, start, end, host=template.host).fleet
    worst = 0.0
    for i in sorted({0, spec.hosts - 1}):
        got = summarize(target, start, end, host=spec.host_name(i)).fleet
        for a, b in ((want.cost_usd, got.cost_usd), (want.useful_tokens, got.useful_tokens)):
            worst = max(worst, abs(float(a) - float(b)) / max(abs(float(a)), 1e-12))
    return f"largest relative difference {worst:.1e}, {'OK' if worst <= 1e-9 else 'MISMATCH'}"


# -- the measurement --------------------------------------------------------------------------


def config_for(host: str, hosts: int, url: str) -> Config:
    month_usd = USD_PER_GPU_HOUR * GPUS_PER_HOST * 24 * 30 * hosts
    return Config(
        host=host,
        database_url=url,
        rates=(Rate(usd_per_hour=USD_PER_GPU_HOUR),),
        budget=BudgetConfig(monthly_usd=month_usd.quantize(Decimal(1000))),
    )


def cli(config: Config, rounds: int) -> list[float]:
    """``gpuwatch report --month`` as a process, ``rounds`` times: seconds each."""
    with tempfile.TemporaryDirectory() as folder:
        toml = Path(folder) / "gpuwatch.toml"
        toml.write_text(
            f'host = "{config.host}"\ndatabase_url = "{config.database_url}"\n'
            f'[[rates]]\ngpu = "*"\nusd_per_hour = {USD_PER_GPU_HOUR}\n'
            f"[budget]\nmonthly_usd = {config.budget.monthly_usd}\n"
        )
        command = [str(Path(sys.executable).parent / "gpuwatch"), "report", "--month", MONTH,
                   "--config", str(toml)]  # fmt: skip
        times = []
        for _ in range(rounds):
            t = time.perf_counter()
            subprocess.run(command, check=True, stdout=subprocess.DEVNULL, cwd=folder)
            times.append(time.perf_counter() - t)
    return times


def renderer(report: Report, fmt: str) -> Callable[[int], object]:
    return lambda _: render(report, fmt)


def measure(url: str, config: Config, now: datetime, label: str, rounds: int) -> None:
    """Every figure of one database, next to its baseline and target."""
    engine = open_database(url)  # a fresh pool: the first report call is the CLI's first
    period = month_period(MONTH, now, config.timezone)

    def report() -> Report:
        return build_report(engine, config, period, now=now)

    t = time.perf_counter()
    built = report()
    first = time.perf_counter() - t
    base = timed(lambda _: summarize(engine, period.start, period.end), rounds)
    times = timed(lambda _: report(), rounds)
    print(f"{label}: baseline: summarize over the month   {ms(base)}")
    print(f"{label}: build_report --month {MONTH}, first {first * 1e3:8.1f} ms (fresh engine)")
    print(f"{label}: build_report --month {MONTH}        {ms(times)}")
    for fmt in FORMATS:
        print(f"{label}:   render {fmt:<9}                   "
              f"{ms(timed(renderer(built, fmt), rounds))}")  # fmt: skip
    engine.dispose()
    process = cli(config, rounds)
    print(f"{label}: `gpuwatch report --month` process   {ms(process)}")
    gpus = int(label.split()[0].replace(",", ""))
    median, limit = statistics.median(times), target_seconds(gpus)
    print(f"target: {label}: report < {limit:g} s -> {median:.3f} s "
          f"({median / statistics.median(base):.1f} x the baseline; the process "
          f"{statistics.median(process):.2f} s), {verdict(median < limit)}; "
          f"{len(built.gpus)} GPU rows, {len(built.models)} models")  # fmt: skip


def on_postgres(
    args: argparse.Namespace, tpl: TemplateSpec, hosts: int, cache: dict[str, bytes]
) -> None:
    fleet = tpl.fleet()
    period = month_period(MONTH, tpl.now, "UTC")
    spec = CloneSpec(hosts, args.fleet_models, args.minute_days, (period.start, period.end),
                     tpl.now)  # fmt: skip
    name = f"gw_bench_report_{hosts}"
    url = fresh_database(args.postgres_url, name)
    engine = open_database(url)
    source = create_engine(f"sqlite:///{args.template}")
    template = Template(fleet.hosts[0], tuple(t.model for t in fleet.targets))
    t = time.perf_counter()
    clone(engine, source, spec, template, cache)
    with engine.connect() as conn:
        size = conn.execute(text("SELECT pg_database_size(current_database())")).scalar_one()
        version = conn.execute(text("SHOW server_version")).scalar_one()
    print(f"PostgreSQL {version}: {hosts} hosts cloned in {time.perf_counter() - t:.0f} s, "
          f"{size / 1e9:.2f} GB; check: {check(source, engine, spec, template)}")  # fmt: skip
    source.dispose()
    engine.dispose()
    label = f"{hosts * GPUS_PER_HOST:,} GPUs, PostgreSQL"
    try:
        measure(url, config_for(spec.host_name(0), hosts, url), tpl.now, label,
                       args.rounds)  # fmt: skip
    finally:
        if not args.keep:
            drop_database(args.postgres_url, name)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--step-seconds", type=float, default=60.0, help="between raw ticks")
    parser.add_argument("--days", type=int, default=32, help="of ticks in the template")
    parser.add_argument("--template", type=Path, help="default: /tmp/gpuwatch-bench-report-"
                        "<days>d-<step>s.db")  # fmt: skip
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--postgres-url", help="superuser URL (default $GPUWATCH_TEST_DB_URL)")
    parser.add_argument("--hosts", default="8", help="fleet sizes on PostgreSQL, 8 GPUs each")
    parser.add_argument("--fleet-models", type=int, default=16, help="models across the fleet")
    parser.add_argument("--minute-days", type=float, help="keep the last D days of minute rows")
    parser.add_argument("--keep", action="store_true", help="keep the PostgreSQL databases")
    args = parser.parse_args()
    args.template = args.template or Path(
        f"/tmp/gpuwatch-bench-report-{args.days}d-{args.step_seconds:g}s.db"
    )
    args.postgres_url = args.postgres_url or os.environ.get(PG_ENV)
    tpl = ensure_template(args.template, args.days, 2, args.step_seconds)
    fleet = tpl.fleet()
    period = month_period(MONTH, tpl.now, "UTC")
    models = [t.model for t in fleet.targets]
    sqlite_url = f"sqlite:///{args.template}"
    source = open_database(sqlite_url)
    seed_extras(source, fleet.hosts, models, (period.start, period.end))
    source.dispose()
    measure(sqlite_url, config_for(fleet.hosts[0], 1, sqlite_url), tpl.now, "8 GPUs, SQLite",
            args.rounds)  # fmt: skip
    if not args.postgres_url:
        print(f"skipped: PostgreSQL fleets need --postgres-url or ${PG_ENV} "
              "(`scripts/with-postgres` exports one)")  # fmt: skip
        return 0
    cache: dict[str, bytes] = {}  # the template's tables as COPY text, loaded once
    for hosts in (int(n) for n in args.hosts.split(",")):
        on_postgres(args, tpl, hosts, cache)
    return 0


if __name__ == "__main__":
    sys.exit(main())
