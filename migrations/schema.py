"""SQLAlchemy metadata: the one definition of gpuwatch's tables.

Migrations in ``migrations/versions`` must produce exactly this schema; a test compares the two.
The column types and the metadata live in ``schema_types``, the cost ledger's tables in
``ledger_schema``; both are re-exported here, where every table is imported from.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Column,
    Double,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    Numeric,
    String,
    Table,
    Text,
    UniqueConstraint,
)

from migrations.ledger_schema import gpu_allocations as gpu_allocations
from migrations.ledger_schema import gpu_mig_usage as gpu_mig_usage
from migrations.ledger_schema import gpu_pod_allocations as gpu_pod_allocations
from migrations.ledger_schema import gpu_usage as gpu_usage
from migrations.schema_types import NAMING_CONVENTION as NAMING_CONVENTION
from migrations.schema_types import UtcDateTime as UtcDateTime
from migrations.schema_types import UtcInstant as UtcInstant
from migrations.schema_types import from_micros as from_micros
from migrations.schema_types import metadata as metadata
from migrations.schema_types import to_micros as to_micros

# One row per distinct series (metric + labels); samples refer to it by id so that a tick
# writes small rows and the label text is stored once.
series = Table(
    "series",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("host", String(255), nullable=False),
    Column("collector", String(64), nullable=False),
    Column("metric", String(200), nullable=False),
    # Canonical JSON of the labels (keys sorted, no spaces): the identity of the series.
    Column("labels", Text, nullable=False),
    UniqueConstraint("metric", "labels", name="uq_series_metric_labels"),
    Index("ix_series_host_metric", "host", "metric"),
)

# Raw samples: the head, one row per sample, until the rollup job packs a rolled-up hour into
# ``sample_chunks`` (agent/storage/raw.py). Keyed by (series, time) and nothing else: every query
# names its series, and WITHOUT ROWID keeps SQLite from storing each key twice.
samples = Table(
    "samples",
    metadata,
    Column(
        "series_id",
        Integer,
        ForeignKey("series.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    Column("ts", UtcInstant(), primary_key=True),
    Column("value", Double, nullable=False),
    sqlite_with_rowid=False,
)

# One series' raw samples of one hour block [start, start + 1 h), packed and compressed
# (agent/storage/chunk_codec.py). A rowid table: its rows are a kilobyte or more, which SQLite
# stores best outside the key's b-tree.
sample_chunks = Table(
    "sample_chunks",
    metadata,
    Column(
        "series_id",
        Integer,
        ForeignKey("series.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    Column("start", UtcInstant(), primary_key=True),
    Column("count", Integer, nullable=False),
    Column("data", LargeBinary, nullable=False),
)

# One row per collection tick and collector: when it ran, whether it worked, and why not.
collector_runs = Table(
    "collector_runs",
    metadata,
    Column(
        "id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True
    ),
    Column("host", String(255), nullable=False),
    Column("collector", String(64), nullable=False),
    Column("ts", UtcDateTime(), nullable=False),
    Column("success", Integer, nullable=False),
    Column("duration_seconds", Double, nullable=False),
    Column("samples", Integer, nullable=False),
    Column("error", Text, nullable=True),
    Index("ix_collector_runs_host_collector_ts", "host", "collector", "ts"),
    # The rollup asks for a host's last tick every minute: one index lookup, not a walk over
    # every run it has stored.
    Index("ix_collector_runs_host_ts", "host", "ts"),
)

# Aggregates of raw samples per series, at 60 s and 3600 s resolution: what month-long questions
# read instead of raw samples, for the metrics agent/storage/rolled_up.py names only. ``increase``
# is the restart-safe increase of a counter over the bucket; None for gauges. Clustered by its
# key (no row id on SQLite): every read and delete is a range of one series' rows.
rollups = Table(
    "rollups",
    metadata,
    Column("series_id", Integer, ForeignKey("series.id", ondelete="CASCADE"), primary_key=True),
    Column("resolution", Integer, primary_key=True),  # seconds: 60 or 3600
    Column("start", UtcInstant(), primary_key=True),
    Column("count", Integer, nullable=False),
    Column("sum", Double, nullable=False),
    Column("min", Double, nullable=False),
    Column("max", Double, nullable=False),
    Column("last", Double, nullable=False),
    Column("increase", Double, nullable=True),
    sqlite_with_rowid=False,
)

# The bucket bounds of a histogram, once per distinct layout: engines change them across
# versions, so each histogram rollup row names the layout its increases are in.
histogram_layouts = Table(
    "histogram_layouts",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    # The ``le`` labels as the engine wrote them, in ascending order, separated by spaces.
    Column("bounds", Text, nullable=False),
    UniqueConstraint("bounds", name="uq_histogram_layouts_bounds"),
)

# A histogram's bucket increases per bucket time, all buckets in one row: ``series_id`` is the
# histogram's own series (its base metric, its labels without ``le``), ``increases`` the
# restart-safe increase of each bound of the layout, in its order, separated by spaces.
histogram_rollups = Table(
    "histogram_rollups",
    metadata,
    Column("series_id", Integer, ForeignKey("series.id", ondelete="CASCADE"), primary_key=True),
    Column("resolution", Integer, primary_key=True),  # seconds: 60 or 3600
    Column("start", UtcInstant(), primary_key=True),
    Column("layout_id", Integer, ForeignKey("histogram_layouts.id"), nullable=False),
    Column("increases", Text, nullable=False),
    sqlite_with_rowid=False,
)

# How far each host's rollup has got (exclusive end of the last complete bucket).
rollup_state = Table(
    "rollup_state",
    metadata,
    Column("host", String(255), primary_key=True),
    Column("job", String(64), primary_key=True),
    Column("watermark", UtcDateTime(), nullable=False),
)

# Each series' last raw point at or before the minute rollup's read window (the watermark minus
# the largest gap between ticks): the baseline of the next run's first counter increase, carried
# forward so that no run scans a day of history for it. ``rollup_state``'s "carry" job says up to
# which instant these rows are current for a host.
rollup_carry = Table(
    "rollup_carry",
    metadata,
    Column(
        "series_id",
        Integer,
        ForeignKey("series.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    Column("ts", UtcDateTime(), nullable=False),
    Column("value", Double, nullable=False),
)

# Money as providers report it: billing APIs and FOCUS exports. (source, record_id) is stable
# across fetches, so storing a record again replaces it instead of counting it twice.
cost_records = Table(
    "cost_records",
    metadata,
    Column("source", String(255), primary_key=True),
    Column("record_id", String(255), primary_key=True),
    Column("kind", String(16), nullable=False),  # list | billed | effective
    Column("resource", String(255), nullable=False),
    Column("period_start", UtcDateTime(), nullable=False),
    Column("period_end", UtcDateTime(), nullable=False),
    Column("amount", Numeric(24, 12), nullable=False),
    Column("currency", String(8), nullable=False),
    Column("description", Text, nullable=False),
    Column("imported_at", UtcDateTime(), nullable=False),
    Index("ix_cost_records_period_start", "period_start"),
)

# Resources a provider bills by the hour (pods, instances) and what gpuwatch saw of them:
# Lambda has no billing history, so runtime is counted from when gpuwatch first saw it.
billing_resources = Table(
    "billing_resources",
    metadata,
    Column("source", String(64), primary_key=True),
    Column("resource", String(255), primary_key=True),
    Column("name", String(255), nullable=False),
    Column("gpus", Integer, nullable=False),
    Column("usd_per_hour", Numeric(24, 12), nullable=False),
    Column("first_seen", UtcDateTime(), nullable=False),
    Column("last_seen", UtcDateTime(), nullable=False),
    Column("metered_usd", Numeric(24, 12), nullable=False),
)

# -- alerts ----------------------------------------------------------------------------------
# ``scope`` is the host whose daemon evaluates the alerts, or "fleet" for the fleet-level rules
# (budget): several daemons share one PostgreSQL and each must only touch its own rows.
# ``labels`` is canonical JSON (sorted keys), so equal label sets are equal strings.

alert_states = Table(
    "alert_states",
    metadata,
    Column("scope", String(255), primary_key=True),
    Column("rule", String(128), primary_key=True),
    Column("labels", Text, primary_key=True),
    Column("state", String(16), nullable=False),  # pending | firing | resolved
    Column("active_at", UtcDateTime(), nullable=True),
    Column("fired_at", UtcDateTime(), nullable=True),
    Column("resolved_at", UtcDateTime(), nullable=True),
    Column("last_true_at", UtcDateTime(), nullable=True),
    Column("value", Double, nullable=True),
    Column("annotations", Text, nullable=False),
    Column("severity", String(16), nullable=False),
    Column("keep_firing_since", UtcDateTime(), nullable=True),  # 0009
)

# When each notification group started firing (group_wait counts from here).
alert_groups = Table(
    "alert_groups",
    metadata,
    Column("scope", String(255), primary_key=True),
    Column("receiver", String(128), primary_key=True),
    Column("group_labels", Text, primary_key=True),
    Column("first_seen", UtcDateTime(), nullable=False),
)

# Alertmanager's notification log: what each receiver was last told about each group.
notification_log = Table(
    "notification_log",
    metadata,
    Column("scope", String(255), primary_key=True),
    Column("receiver", String(128), primary_key=True),
    Column("group_labels", Text, primary_key=True),
    Column("sent_at", UtcDateTime(), nullable=False),
    Column("firing", Text, nullable=False),  # JSON list of [rule, labels-json]
    Column("resolved", Text, nullable=False),
)

# Notifications to deliver: written in the same transaction as the decision to send them,
# marked once delivered, so a restart neither loses nor repeats one.
outbox = Table(
    "outbox",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("scope", String(255), nullable=False),
    Column("receiver", String(128), nullable=False),
    Column("group_labels", Text, nullable=False),
    Column("reason", String(32), nullable=False),
    Column("payload", Text, nullable=False),  # the Notification as JSON
    Column("created_at", UtcDateTime(), nullable=False),
    Column("expires_at", UtcDateTime(), nullable=False),
    Column("next_attempt_at", UtcDateTime(), nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("status", String(16), nullable=False),  # pending | delivered | failed | expired
    Column("last_error", Text, nullable=True),
    Column("finished_at", UtcDateTime(), nullable=True),
    Index("ix_outbox_status_next_attempt_at", "status", "next_attempt_at"),
)

silences = Table(
    "silences",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("matchers", Text, nullable=False),  # JSON list of matcher strings (k="v", k=~"re")
    Column("starts_at", UtcDateTime(), nullable=False),
    Column("ends_at", UtcDateTime(), nullable=False),
    Column("created_by", String(255), nullable=False),
    Column("comment", Text, nullable=False),
    Column("created_at", UtcDateTime(), nullable=False),
)

# Every time an alert fired, and when it resolved (NULL: still firing, or its rule was switched
# off): what reports count per rule, with the firing time. Written with the states.
alert_history = Table(
    "alert_history",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("scope", String(255), nullable=False),
    Column("rule", String(128), nullable=False),
    Column("labels", Text, nullable=False),
    Column("severity", String(16), nullable=False),
    Column("fired_at", UtcDateTime(), nullable=False),
    Column("resolved_at", UtcDateTime(), nullable=True),
    Column("summary", Text, nullable=False),
    Index("ix_alert_history_fired_at", "fired_at"),
)

# One row per weekly digest: claimed before it is posted (the primary key makes the claim
# exclusive across daemons), marked sent after, so each week's digest goes out once.
digests = Table(
    "digests",
    metadata,
    Column("week_start", UtcDateTime(), primary_key=True),
    Column("state", String(16), nullable=False),  # claimed | sent | failed
    Column("claimed_by", String(255), nullable=False),
    Column("claimed_at", UtcDateTime(), nullable=False),
    Column("sent_at", UtcDateTime(), nullable=True),
    Column("error", Text, nullable=True),
)

# -- fleet -----------------------------------------------------------------------------------

# How far a box has forwarded each stream of its local database to the central one
# (agent.storage.forward): a time watermark for bucketed and changed-since streams, an id for the
# streams that follow ids. The forward commits centrally before this moves, so a crash between
# the two resends a batch, which the central upsert replaces.
forward_state = Table(
    "forward_state",
    metadata,
    Column("stream", String(128), primary_key=True),  # "rollups/60", "cost_records", ...
    Column("until_ts", UtcDateTime(), nullable=True),
    Column("until_id", BigInteger, nullable=True),
)

# The fleet-wide cost signals (cost per million tokens per model over the fleet, budget use,
# billed spend), computed once a minute by the fleet leader and read by every daemon for its
# /metrics, so that no host recomputes the whole fleet's figures.
fleet_signals = Table(
    "fleet_signals",
    metadata,
    Column("metric", String(200), primary_key=True),
    Column("labels", Text, primary_key=True),  # canonical JSON, as in ``series``
    Column("value", Double, nullable=False),
    Column("computed_at", UtcDateTime(), nullable=False),
    Column("computed_by", String(255), nullable=False),
)
