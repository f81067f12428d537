"""The cost ledger's tables (re-exported by migrations.schema, the one definition of the
schema): per GPU, per target, per Kubernetes pod and per MIG instance, in minute, hour and day
buckets."""

from __future__ import annotations

from sqlalchemy import (
    Column,
    Double,
    Index,
    Integer,
    Numeric,
    String,
    Table,
    Text,
)

from migrations.schema_types import UtcInstant, metadata

# The cost ledger per GPU and bucket: metered uptime (seconds covered by observations), busy
# seconds (uptime x utilisation), energy and what it cost by the rate card.
gpu_usage = Table(
    "gpu_usage",
    metadata,
    Column("host", String(255), primary_key=True),
    Column("gpu_uuid", String(100), primary_key=True),
    Column("resolution", Integer, primary_key=True),
    Column("start", UtcInstant(), primary_key=True),
    Column("gpu_index", String(16), nullable=False),
    Column("observed_seconds", Double, nullable=False),
    Column("busy_seconds", Double, nullable=False),
    Column("energy_joules", Double, nullable=True),
    Column("cost_usd", Numeric(24, 12), nullable=True),  # None: no rate covers this GPU
    Column("idle_cost_usd", Numeric(24, 12), nullable=True),  # cost x (1 - utilisation)
    # Real work (GPM or DCGM profiling): the seconds SM activity was known, the SM-active
    # seconds within them, and the cost of those seconds' SM-idle share. 0 / NULL where no
    # source gave SM activity: unknown, never NVML's busy flag standing in for it.
    Column("sm_observed_seconds", Double, nullable=False, server_default="0"),
    Column("sm_active_seconds", Double, nullable=False, server_default="0"),
    Column("sm_idle_cost_usd", Numeric(24, 12), nullable=True),
    # Grams of CO2 for the energy, at the facility's PUE and the grid intensity of its hour
    # when metered ([energy]); NULL where energy or the intensity is unknown.
    Column("co2_grams", Double, nullable=True),
    # Seconds whose energy was integrated from power (no energy counter): the energy's basis.
    Column("power_integrated_seconds", Double, nullable=False, server_default="0"),
    # Windows over the fleet (reports, cost summaries) read (resolution, start) ranges of every
    # host; the key serves the per-host writes, deletes and sums.
    Index("ix_gpu_usage_resolution_start", "resolution", "start"),
    sqlite_with_rowid=False,
)

# The share of a GPU's bucket that each serving target used, and its cost.
gpu_allocations = Table(
    "gpu_allocations",
    metadata,
    Column("host", String(255), primary_key=True),
    Column("gpu_uuid", String(100), primary_key=True),
    Column("target", String(255), primary_key=True),
    Column("resolution", Integer, primary_key=True),
    Column("start", UtcInstant(), primary_key=True),
    Column("seconds", Double, nullable=False),
    Column("busy_seconds", Double, nullable=False),
    Column("cost_usd", Numeric(24, 12), nullable=True),
    # The target's share of the GPU's energy and its CO2 (as gpu_usage's); NULL: unknown.
    Column("energy_joules", Double, nullable=True),
    Column("co2_grams", Double, nullable=True),
    Index("ix_gpu_allocations_resolution_start", "resolution", "start"),  # as gpu_usage's
    sqlite_with_rowid=False,
)

# The share of a GPU's bucket that each Kubernetes pod used (agent.cost.pods), its cost and
# how it was split: the seconds split by the pods' SM utilization, by their memory, and by the
# kubelet's allocation alone (no process on the GPU), the rest was the GPU's only pod; and
# the part of its time, busy time and cost while no serving target held the GPU. A GPU
# on a Kubernetes node is allocated whole: processes in no known pod count as
# "(unattributed)", time nobody held as "(no pod)", so a GPU's pods add up to its cost.
gpu_pod_allocations = Table(
    "gpu_pod_allocations",
    metadata,
    Column("host", String(255), primary_key=True),
    Column("gpu_uuid", String(100), primary_key=True),
    Column("namespace", String(255), primary_key=True),
    Column("pod", String(255), primary_key=True),
    Column("resolution", Integer, primary_key=True),
    Column("start", UtcInstant(), primary_key=True),
    Column("seconds", Double, nullable=False),
    Column("busy_seconds", Double, nullable=False),
    Column("cost_usd", Numeric(24, 12), nullable=True),
    Column("sm_seconds", Double, nullable=False),
    Column("memory_seconds", Double, nullable=False),
    Column("request_seconds", Double, nullable=False),
    # The part of the above while no serving target held the GPU (agent.cost.allocation gave
    # it to nobody): what a namespace's label may bring its team without counting it twice.
    Column("untargeted_seconds", Double, nullable=False),
    Column("untargeted_busy_seconds", Double, nullable=False),
    Column("untargeted_cost_usd", Numeric(24, 12), nullable=True),
    Index("ix_gpu_pod_allocations_resolution_start", "resolution", "start"),
    sqlite_with_rowid=False,
)

# Each MIG instance's part of its GPU's bucket (agent.cost.mig): its share of the GPU by slices
# or memory (``basis``), priced as that share of the GPU's cost, busy by its own SM activity
# (``sm_seconds`` of its seconds) else by the presence of processes, and the serving targets on
# it (comma-separated). The mig_instance "(free)" is the part no instance holds: a MIG GPU's
# instance rows and its free row add up to its gpu_usage cost.
gpu_mig_usage = Table(
    "gpu_mig_usage",
    metadata,
    Column("host", String(255), primary_key=True),
    Column("gpu_uuid", String(100), primary_key=True),
    Column("mig_instance", String(100), primary_key=True),
    Column("resolution", Integer, primary_key=True),
    Column("start", UtcInstant(), primary_key=True),
    Column("slices", Double, nullable=True),
    Column("basis", String(16), nullable=False),
    Column("seconds", Double, nullable=False),
    Column("share_seconds", Double, nullable=False),
    Column("busy_seconds", Double, nullable=False),
    Column("sm_seconds", Double, nullable=False),
    Column("cost_usd", Numeric(24, 12), nullable=True),
    Column("idle_cost_usd", Numeric(24, 12), nullable=True),
    Column("targets", Text, nullable=False),
    Index("ix_gpu_mig_usage_resolution_start", "resolution", "start"),
    sqlite_with_rowid=False,
)
