"""Compact rollups: rows only for what is read, histograms as a whole, clustered time tables.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01

- ``rollups`` keeps the rows of the metrics reports, cost summaries and alerts read (the list
  of agent/storage/rolled_up.py as of this revision, copied below: a migration is a snapshot).
  Every other series' rollup rows (``_created`` series, most gauges, ``_count``/``_sum``, the
  buckets of histograms nobody reads) are dropped: nothing read them.
- The ``_bucket`` rows of the TTFT and E2E histograms become ``histogram_rollups`` rows: one
  per histogram (a new series row: the base metric, the labels without ``le``), resolution and
  bucket start, holding every bound's increase under a ``histogram_layouts`` id. Summed per
  bound, they give exactly the increases the bucket rows gave.
- ``rollups``, ``histogram_rollups``, ``gpu_usage`` and ``gpu_allocations`` store their time as
  ``UtcInstant`` (integer microseconds on SQLite; still timestamptz on PostgreSQL) and are
  WITHOUT ROWID on SQLite (clustered by their key). ``rollups`` loses its (resolution, start)
  index: every reader asks for series by id, a range of the key.

Each table is moved the same way on both databases: the old one renamed aside, the new one
created under the name, the rows copied over (times converted on SQLite), the old one dropped.
Downgrading restores 0005's layouts with the rows of the three moved tables; the histogram rows
(and the rollups of unread series) are not turned back into bucket rows.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import sqlalchemy as sa
from alembic import op

import migrations.schema

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

# agent/storage/rolled_up.py at this revision.
SERIES_ROLLUPS = (
    "gpuwatch_engine_generation_tokens_total",
    "gpuwatch_engine_prompt_tokens_computed_total",
    "gpuwatch_engine_prompt_tokens_total",
    "gpuwatch_engine_requests_finished_total",
    "gpuwatch_gpu_memory_used_bytes",
    "gpuwatch_gpu_memory_total_bytes",
)
HISTOGRAMS = ("gpuwatch_engine_ttft_seconds", "gpuwatch_engine_e2e_latency_seconds")
HISTOGRAM_COLLECTOR = "rollup"
MOVED = ("rollups", "gpu_usage", "gpu_allocations")
INDEXES = {
    "gpu_usage": "ix_gpu_usage_resolution_start",
    "gpu_allocations": "ix_gpu_allocations_resolution_start",
}


def upgrade() -> None:
    bind = op.get_bind()
    op.drop_index("ix_rollups_resolution_start", table_name="rollups")
    for name, index in INDEXES.items():
        op.drop_index(index, table_name=name)
    for name in MOVED:
        _set_aside(bind, name)
    _create_tables(migrations.schema.UtcInstant())
    wanted = ", ".join(f"'{m}'" for m in SERIES_ROLLUPS)
    start = _instant(bind, "start")
    op.execute(
        "INSERT INTO rollups (series_id, resolution, start, count, sum, min, max, last, increase) "
        f"SELECT r.series_id, r.resolution, {start}, r.count, r.sum, r.min, r.max, r.last, "
        "r.increase FROM rollups_old r JOIN series s ON s.id = r.series_id "
        f"WHERE s.metric IN ({wanted})"
    )
    op.execute(
        "INSERT INTO gpu_usage (host, gpu_uuid, resolution, start, gpu_index, observed_seconds, "
        "busy_seconds, energy_joules, cost_usd, idle_cost_usd) "
        f"SELECT host, gpu_uuid, resolution, {start}, gpu_index, observed_seconds, "
        "busy_seconds, energy_joules, cost_usd, idle_cost_usd FROM gpu_usage_old"
    )
    op.execute(
        "INSERT INTO gpu_allocations (host, gpu_uuid, target, resolution, start, seconds, "
        "busy_seconds, cost_usd) "
        f"SELECT host, gpu_uuid, target, resolution, {start}, seconds, busy_seconds, cost_usd "
        "FROM gpu_allocations_old"
    )
    _histograms(bind)
    for name in MOVED:
        op.drop_table(f"{name}_old")
    for name, index in INDEXES.items():
        op.create_index(index, name, ["resolution", "start"], unique=False)


def _set_aside(bind: sa.Connection, name: str) -> None:
    op.rename_table(name, f"{name}_old")
    if bind.dialect.name == "postgresql":  # the key's index name is taken by the schema
        op.execute(f'ALTER TABLE "{name}_old" RENAME CONSTRAINT "pk_{name}" TO "pk_{name}_old"')
        if name == "rollups":
            op.execute(
                'ALTER TABLE "rollups_old" RENAME CONSTRAINT "fk_rollups_series_id_series" '
                'TO "fk_rollups_old_series_id_series"'
            )


def _instant(bind: sa.Connection, column: str) -> str:
    """The SQL of ``column`` (0005's text instant on SQLite) as the new type stores it."""
    if bind.dialect.name != "sqlite":
        return column  # timestamptz before and after
    # "YYYY-MM-DD HH:MM:SS.ffffff" (UTC) -> integer microseconds since the epoch, exactly.
    return (
        f"(CAST(strftime('%s', {column}) AS INTEGER) * 1000000 "
        f"+ CAST(substr({column}, 21, 6) AS INTEGER))"
    )


def _create_tables(instant: sa.types.TypeEngine[Any], histograms: bool = True) -> None:
    op.create_table(
        "rollups",
        sa.Column("series_id", sa.Integer(), nullable=False),
        sa.Column("resolution", sa.Integer(), nullable=False),
        sa.Column("start", instant, nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.Column("sum", sa.Double(), nullable=False),
        sa.Column("min", sa.Double(), nullable=False),
        sa.Column("max", sa.Double(), nullable=False),
        sa.Column("last", sa.Double(), nullable=False),
        sa.Column("increase", sa.Double(), nullable=True),
        sa.ForeignKeyConstraint(["series_id"], ["series.id"],
                                name=op.f("fk_rollups_series_id_series"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("series_id", "resolution", "start", name=op.f("pk_rollups")),
        sqlite_with_rowid=False,
    )  # fmt: skip
    if histograms:
        _create_histogram_tables(instant)
    op.create_table(
        "gpu_usage",
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("gpu_uuid", sa.String(length=100), nullable=False),
        sa.Column("resolution", sa.Integer(), nullable=False),
        sa.Column("start", instant, nullable=False),
        sa.Column("gpu_index", sa.String(length=16), nullable=False),
        sa.Column("observed_seconds", sa.Double(), nullable=False),
        sa.Column("busy_seconds", sa.Double(), nullable=False),
        sa.Column("energy_joules", sa.Double(), nullable=True),
        sa.Column("cost_usd", sa.Numeric(precision=24, scale=12), nullable=True),
        sa.Column("idle_cost_usd", sa.Numeric(precision=24, scale=12), nullable=True),
        sa.PrimaryKeyConstraint("host", "gpu_uuid", "resolution", "start",
                                name=op.f("pk_gpu_usage")),
        sqlite_with_rowid=False,
    )  # fmt: skip
    op.create_table(
        "gpu_allocations",
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("gpu_uuid", sa.String(length=100), nullable=False),
        sa.Column("target", sa.String(length=255), nullable=False),
        sa.Column("resolution", sa.Integer(), nullable=False),
        sa.Column("start", instant, nullable=False),
        sa.Column("seconds", sa.Double(), nullable=False),
        sa.Column("busy_seconds", sa.Double(), nullable=False),
        sa.Column("cost_usd", sa.Numeric(precision=24, scale=12), nullable=True),
        sa.PrimaryKeyConstraint("host", "gpu_uuid", "target", "resolution", "start",
                                name=op.f("pk_gpu_allocations")),
        sqlite_with_rowid=False,
    )  # fmt: skip


def _create_histogram_tables(instant: sa.types.TypeEngine[Any]) -> None:
    op.create_table(
        "histogram_layouts",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("bounds", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_histogram_layouts")),
        sa.UniqueConstraint("bounds", name="uq_histogram_layouts_bounds"),
    )
    op.create_table(
        "histogram_rollups",
        sa.Column("series_id", sa.Integer(), nullable=False),
        sa.Column("resolution", sa.Integer(), nullable=False),
        sa.Column("start", instant, nullable=False),
        sa.Column("layout_id", sa.Integer(), nullable=False),
        sa.Column("increases", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(["layout_id"], ["histogram_layouts.id"],
                                name=op.f("fk_histogram_rollups_layout_id_histogram_layouts")),
        sa.ForeignKeyConstraint(["series_id"], ["series.id"],
                                name=op.f("fk_histogram_rollups_series_id_series"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("series_id", "resolution", "start",
                                name=op.f("pk_histogram_rollups")),
        sqlite_with_rowid=False,
    )  # fmt: skip


# -- histograms -----------------------------------------------------------------------------------


def _histograms(bind: sa.Connection) -> None:
    """Each TTFT/E2E histogram's ``_bucket`` rollup rows, one row per bucket time."""
    buckets = tuple(h + "_bucket" for h in HISTOGRAMS)
    found = bind.execute(
        sa.text("SELECT id, host, metric, labels FROM series WHERE metric IN :m").bindparams(
            sa.bindparam("m", expanding=True)
        ),
        {"m": list(buckets)},
    )
    members: dict[tuple[str, str, str], dict[int, str]] = defaultdict(dict)
    for sid, host, metric, labels_json in found:
        labels = json.loads(labels_json)
        le = labels.pop("le", None)
        if le is not None:
            key = (host, metric.removesuffix("_bucket"), _canonical(labels))
            members[key][sid] = le
    layouts: dict[str, int] = {}
    for (host, base, labels_json), les in sorted(members.items()):
        hid = _series_id(bind, host, base, labels_json)
        rows = _rows(bind, les)
        if rows:
            out = []
            for (resolution, start), by_le in rows.items():
                bounds, increases = _pack(by_le)
                if bounds not in layouts:
                    layouts[bounds] = _layout_id(bind, bounds)
                out.append({"s": hid, "r": resolution, "t": start, "l": layouts[bounds],
                            "i": increases})  # fmt: skip
            bind.execute(
                sa.text(
                    "INSERT INTO histogram_rollups (series_id, resolution, start, layout_id, "
                    "increases) VALUES (:s, :r, :t, :l, :i)"
                ),
                out,
            )


def _rows(bind: sa.Connection, les: dict[int, str]) -> dict[tuple[int, object], dict[str, float]]:
    """(resolution, start as the new column stores it) -> le -> increase, of one histogram."""
    start = _instant(bind, "start")
    query = sa.text(
        f"SELECT series_id, resolution, {start}, increase FROM rollups_old "
        "WHERE series_id IN :ids ORDER BY resolution, start, series_id"
    ).bindparams(sa.bindparam("ids", expanding=True))
    out: dict[tuple[int, object], dict[str, float]] = defaultdict(dict)
    for sid, resolution, at, increase in bind.execute(query, {"ids": sorted(les)}):
        if increase is not None:
            out[(resolution, at)][les[sid]] = increase
    return out


def _series_id(bind: sa.Connection, host: str, metric: str, labels_json: str) -> int:
    select = sa.text("SELECT id FROM series WHERE metric = :m AND labels = :l")
    sid = bind.execute(select, {"m": metric, "l": labels_json}).scalar()
    if sid is None:
        bind.execute(
            sa.text("INSERT INTO series (host, collector, metric, labels) VALUES (:h, :c, :m, :l)"),
            {"h": host, "c": HISTOGRAM_COLLECTOR, "m": metric, "l": labels_json},
        )
        sid = bind.execute(select, {"m": metric, "l": labels_json}).scalar_one()
    return int(sid)


def _layout_id(bind: sa.Connection, bounds: str) -> int:
    select = sa.text("SELECT id FROM histogram_layouts WHERE bounds = :b")
    found = bind.execute(select, {"b": bounds}).scalar()
    if found is None:
        bind.execute(sa.text("INSERT INTO histogram_layouts (bounds) VALUES (:b)"), {"b": bounds})
        found = bind.execute(select, {"b": bounds}).scalar_one()
    return int(found)


def _canonical(labels: dict[str, str]) -> str:
    return json.dumps(labels, sort_keys=True, separators=(",", ":"))


def _pack(by_le: dict[str, float]) -> tuple[str, str]:
    """As agent/storage/buckets.py packs a row at this revision."""
    les = sorted(by_le, key=_bound)
    return " ".join(les), " ".join(_number(by_le[le]) for le in les)


def _bound(le: str) -> float:
    try:
        return float(le)
    except ValueError:
        return float("inf")


def _number(value: float) -> str:
    if float(value).is_integer() and abs(value) < 2**53:
        return str(int(value))
    return repr(float(value))


# -- downgrade ------------------------------------------------------------------------------------


def downgrade() -> None:
    bind = op.get_bind()
    for name, index in INDEXES.items():
        op.drop_index(index, table_name=name)
    for name in MOVED:
        _set_aside(bind, name)
    op.drop_table("histogram_rollups")
    op.drop_table("histogram_layouts")
    _create_tables(migrations.schema.UtcDateTime(), histograms=False)
    # The new tables' instants back into 0005's (text on SQLite), through Python: exact.
    for name in MOVED:
        _copy_back(bind, name)
        op.drop_table(f"{name}_old")
    op.create_index("ix_rollups_resolution_start", "rollups", ["resolution", "start"])
    for name, index in INDEXES.items():
        op.create_index(index, name, ["resolution", "start"], unique=False)


def _copy_back(bind: sa.Connection, name: str) -> None:
    source = sa.Table(f"{name}_old", sa.MetaData(), autoload_with=bind)
    source.c.start.type = migrations.schema.UtcInstant()
    target = sa.Table(name, sa.MetaData(), autoload_with=bind)
    target.c.start.type = migrations.schema.UtcDateTime()
    rows: Iterable[sa.RowMapping] = bind.execute(sa.select(source)).mappings()
    batch = [dict(r) for r in rows]
    if batch:
        bind.execute(sa.insert(target), batch)
