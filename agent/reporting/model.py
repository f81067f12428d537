"""What a report says, as values: built by :mod:`agent.reporting.build`, rendered by
:mod:`agent.reporting.render` (table, JSON, CSV, markdown, HTML) and summarised by the digest.

Every renderer shows these same figures, so the formats cannot disagree. Money is Decimal (USD),
tokens are floats holding whole counts, durations are seconds, ratios are 0-1. ``None`` means
"unknown" (no data), never zero. ``SCHEMA_VERSION`` versions the JSON rendering: bump it when a
key changes meaning or disappears (adding keys does not).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Decimal

SCHEMA_VERSION = 1


@dataclass(frozen=True, slots=True)
class Period:
    """[start, end) in UTC; ``label`` as the user asked ("2026-11", "2026-W48",
    "2026-11-03..2026-11-10"); ``timezone`` is the zone days and months are cut in."""

    start: datetime
    end: datetime
    label: str
    timezone: str = "UTC"


@dataclass(frozen=True, slots=True)
class SpendSource:
    """One source of money for the period: "metered" (rate card x observed time) or a billing
    source as stored ("runpod", "lambda", "vast", "focus:<provider>")."""

    source: str
    kind: str  # metered | billed
    usd: Decimal


@dataclass(frozen=True, slots=True)
class Totals:
    spend_usd: Decimal  # what the period cost: billed where providers billed more, else metered
    metered_usd: Decimal
    billed_usd: Decimal | None  # None: no billing records for the period
    useful_tokens: float
    output_tokens: float
    total_tokens: float  # output + (computed) prompt tokens
    cost_per_million_tokens_usd: Decimal | None  # metered cost / useful tokens
    previous_cost_per_million_tokens_usd: Decimal | None  # the same over the previous period
    gpu_hours: float
    busy_gpu_hours: float
    idle_loaded_gpu_hours: float  # allocated to a serving target, not busy
    unallocated_gpu_hours: float
    utilization_ratio: float | None  # busy / observed
    idle_cost_usd: Decimal
    requests: float
    generated_tokens: float = 0.0  # every output token generated, abandoned work included
    abandoned_tokens: float | None = None  # None: no engine here counts abandoned work
    abandoned_cost_usd: Decimal | None = None
    cost_unknown_reason: str | None = None  # set: cost per million tokens is unknown
    work: Work = field(default_factory=lambda: Work())
    energy: Energy = field(default_factory=lambda: Energy())


@dataclass(frozen=True, slots=True)
class Work:
    """Real work beside NVML's busy flag: SM activity (GPM or dcgm-exporter profiling) over the
    GPU-hours a source gave it. None: no source gave SM activity (never the flag's figure)."""

    sm_observed_gpu_hours: float = 0.0
    sm_active_gpu_hours: float | None = None
    sm_idle_cost_usd: Decimal | None = None  # cost x (1 - SM activity) over those hours
    # The flag's idle dollars over the same hours, to set beside sm_idle_cost_usd.
    flag_idle_cost_usd: Decimal | None = None


@dataclass(frozen=True, slots=True)
class Energy:
    """The GPUs' energy (their counters, or power x time where a GPU has none), what it costs
    at ``[energy] usd_per_kwh`` and its CO2 at the facility's PUE and grid intensity; None:
    unknown."""

    gpu_kwh: float | None = None
    facility_kwh: float | None = None  # x PUE
    basis: str | None = None  # energy_counter | power_integrated | both "+"-joined
    cost_usd: Decimal | None = None
    co2_grams: float | None = None
    joules_per_useful_token: float | None = None
    co2_grams_per_million_tokens: float | None = None


@dataclass(frozen=True, slots=True)
class Latency:
    """Quantiles of one histogram over the period, by the bucket arithmetic
    (histogram_quantile over the period's bucket increases); None without observations."""

    p50_seconds: float | None = None
    p95_seconds: float | None = None
    p99_seconds: float | None = None
    count: float = 0.0


@dataclass(frozen=True, slots=True)
class ModelRow:
    model: str
    cost_usd: Decimal
    useful_tokens: float
    output_tokens: float
    total_tokens: float
    requests: float
    cost_per_million_tokens_usd: Decimal | None
    previous_cost_per_million_tokens_usd: Decimal | None
    ttft: Latency = field(default_factory=Latency)
    e2e: Latency = field(default_factory=Latency)
    generated_tokens: float = 0.0
    abandoned_tokens: float | None = None  # None: the engine cannot tell (not zero)
    abandoned_cost_usd: Decimal | None = None
    # Requests finished with reason "abort" (clients gone; Dynamo's disconnected clients);
    # None where no engine of the model counts finish reasons.
    abandoned_requests: float | None = None
    # How useful tokens were counted: "completed_requests" (per-request histograms, exact to
    # the request) or "token_counters" (the engine's token counters), "+"-joined when mixed.
    useful_tokens_source: str = ""
    cost_unknown_reason: str | None = None  # set: cost and cost per million tokens unknown
    idle_cost_usd: Decimal = Decimal(0)  # its share of its targets' allocated time not busy
    energy: Energy = field(default_factory=lambda: Energy())  # its targets' share
    efficiency: Efficiency = field(default_factory=lambda: Efficiency())
    slo: SloRow | None = None  # None: no [[slo]] applies to the model
    serving: Serving = field(default_factory=lambda: Serving())

    @property
    def tokens_counted(self) -> bool:
        """Whether any source counted its tokens: Ollama's have none (unknown, not 0 tokens)."""
        return bool(self.useful_tokens_source) or self.useful_tokens > 0


@dataclass(frozen=True, slots=True)
class SloRow:
    """A model's latency objective (``[[slo]]``) over the period (agent.reporting.slo_parts):
    the share of requests within all its thresholds, as a point figure where the histograms
    give one and always as the bounds they allow; ``met`` None: the bounds straddle the
    objective."""

    objective: float
    thresholds: str  # "ttft <= 0.5s, e2e <= 10s"
    attainment: float | None
    lower: float | None
    upper: float | None
    exact: bool
    met: bool | None
    basis: str  # "spans" (each request judged on its own: exact) or "histograms"
    requests: float
    good_requests: float | None
    missed_cost_usd: Decimal | None  # the model's cost by the share of requests that missed
    unmeasured: str | None = None  # thresholds no histogram measures ("itl, queue")
    # Spans only (histograms count requests, not their tokens): the output tokens delivered
    # within the objective, and the model's cost per million of them (goodput's price).
    good_tokens: float | None = None
    good_token_cost_per_million_usd: Decimal | None = None


@dataclass(frozen=True, slots=True)
class Efficiency:
    """Model FLOPs and memory-bandwidth utilization from the engine's own estimates (vLLM's
    ``estimated_flops_per_gpu``/``..._bytes_per_gpu`` counters) against the peak of the GPU
    it ran on (agent.cost.gpu_peaks); None: no estimate, or a GPU whose peak is not known."""

    mfu_ratio: float | None = None
    mbu_ratio: float | None = None
    mfu_target_ratio: float | None = None  # cost.mfu_target
    mfu_gap_usd: Decimal | None = None  # what an MFU at the target would have saved
    basis: str | None = None  # e.g. "vllm_estimated_flops vs NVIDIA H100 80GB HBM3 peak"


@dataclass(frozen=True, slots=True)
class Serving:
    """Serving efficiency beside cost (agent.reporting.serving_parts): prefix-cache hits and
    the dollars they saved, speculative-decoding acceptance and the KV-cache and queue peaks.
    None: the engine does not report it (never 0); each ``*_basis`` says where a figure is from."""

    prefix_cache_hit_ratio: float | None = None  # cached / all prompt tokens
    cached_prompt_tokens: float | None = None
    cache_saved_usd: Decimal | None = None  # cached tokens at the model's cost per computed token
    prefix_cache_basis: str | None = None
    spec_decode_acceptance_ratio: float | None = None  # accepted / draft tokens
    spec_decode_basis: str | None = None
    kv_cache_peak_ratio: float | None = None  # the window's highest KV-cache usage, 0-1
    requests_waiting_peak: float | None = None  # the window's longest queue
    kv_cache_basis: str | None = None


@dataclass(frozen=True, slots=True)
class TargetRow:
    """A serving target's GPU time and cost from the ledger's allocations, and what its
    allocated time that was not busy cost (its idle dollars)."""

    host: str
    target: str
    gpu_hours: float
    busy_gpu_hours: float
    cost_usd: Decimal
    idle_cost_usd: Decimal
    cost_unknown_reason: str | None = None


@dataclass(frozen=True, slots=True)
class HostRow:
    host: str
    cost_usd: Decimal
    useful_tokens: float
    cost_per_million_tokens_usd: Decimal | None
    previous_cost_per_million_tokens_usd: Decimal | None
    gpu_hours: float
    utilization_ratio: float | None
    cost_unknown_reason: str | None = None


@dataclass(frozen=True, slots=True)
class GpuRow:
    host: str
    gpu_uuid: str
    gpu_index: str
    gpu_name: str | None  # from gpuwatch_gpu_info, when known
    cost_usd: Decimal
    idle_cost_usd: Decimal
    observed_hours: float
    busy_hours: float
    utilization_ratio: float | None
    vram_peak_bytes: float | None  # the highest memory used seen in the period
    vram_total_bytes: float | None
    cost_unknown_reason: str | None = None  # set: no rate for some of its time
    # Used by several targets: how its cost was split among them ("sm_utilization", "memory",
    # both joined by "+" where it changed, "equal"), and that in words; None: not shared.
    shared_split: str | None = None
    shared_split_note: str | None = None
    # Real work: SM activity over the hours a profiling source covered (None: none did), and
    # which basis the GPU's busy time has ("sm_active", "utilization_flag", or both).
    sm_active_hours: float | None = None
    sm_active_ratio: float | None = None
    sm_idle_cost_usd: Decimal | None = None
    activity_basis: str = "utilization_flag"
    energy_kwh: float | None = None
    energy_basis: str | None = None
    co2_grams: float | None = None


@dataclass(frozen=True, slots=True)
class MigRow:
    """A MIG instance of a report's GPU (agent.reporting.mig_parts), or its GPU's free slices
    (``mig_instance`` "(free)"): its share of the GPU by slices or memory, its cost and idle
    cost, its busy fraction (its SM activity, else the presence of processes) and its targets."""

    host: str
    gpu_uuid: str  # the parent GPU
    gpu_index: str
    mig_instance: str
    slices: float | None
    share_ratio: float | None  # its part of the GPU (time-weighted)
    split_basis: str  # "slices" or "memory" (both joined by "+" where it changed)
    cost_usd: Decimal
    idle_cost_usd: Decimal
    observed_hours: float
    busy_ratio: float | None
    activity_basis: str  # "sm_active", "presence", both joined by "+", or "free"
    targets: tuple[str, ...]
    cost_unknown_reason: str | None = None


@dataclass(frozen=True, slots=True)
class GroupRow:
    """A team's or a project's figures (:mod:`agent.cost.teams`): its targets' allocated cost
    and tokens. "(unlabelled)": targets without the label; "(no target)": GPU time no target
    held (nobody's, all idle)."""

    name: str
    cost_usd: Decimal
    useful_tokens: float
    cost_per_million_tokens_usd: Decimal | None
    idle_cost_usd: Decimal
    gpu_hours: float
    utilization_ratio: float | None
    targets: tuple[str, ...]  # "host/target"
    cost_unknown_reason: str | None = None  # set: cost, idle cost and cost per M unknown


@dataclass(frozen=True, slots=True)
class PodRow:
    """A Kubernetes pod's or namespace's (``pod`` "") share of the GPUs (agent.cost.pods_read):
    "(unattributed)": GPU processes in no known pod; "(no pod)": GPU time nobody held."""

    namespace: str
    pod: str
    cost_usd: Decimal
    idle_cost_usd: Decimal
    gpu_hours: float
    utilization_ratio: float | None
    useful_tokens: float | None  # None: unknown (no target served in it alone)
    cost_per_million_tokens_usd: Decimal | None
    split_basis: str  # sm_utilization | memory | request | whole_gpu, "+"-joined
    team: str | None  # a namespace's label ([[labels]] namespace = ...)
    project: str | None
    targets: tuple[str, ...]  # "host/target" served in it
    hosts: tuple[str, ...]
    cost_unknown_reason: str | None = None


@dataclass(frozen=True, slots=True)
class TenantRow:
    """A gateway tenant's (API key, user, team) share of its models' cost (agent.cost.tenants):
    "(unattributed)": tokens of those models no tenant accounts for. Cost None: unknown."""

    name: str
    cost_usd: Decimal | None
    useful_tokens: float
    cost_per_million_tokens_usd: Decimal | None
    idle_cost_usd: Decimal | None
    idle_ratio: float | None  # idle cost / cost
    list_price_usd: Decimal | None  # what the gateway's list prices charged; None: not said
    list_minus_cost_usd: Decimal | None  # > 0: charged more than its GPU time cost
    models: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class TeamBudgetRow:
    """A team's ``[[budget.teams]]`` budget: its metered cost month to date at the period's end
    and the month-end forecast, as the team's budget alerts compute them."""

    team: str
    monthly_usd: Decimal | None
    month: str
    spent_usd: Decimal
    used_ratio: float | None
    forecast_usd: Decimal
    forecast_ratio: float | None


@dataclass(frozen=True, slots=True)
class AlertRow:
    """One rule's alerts that fired in the period: how many times, and for how long in total
    (firing time clipped to the period; still firing counts up to the period's end)."""

    rule: str
    count: int
    firing_seconds: float


@dataclass(frozen=True, slots=True)
class QueueIncident:
    """A QueueGrowing alert that fired in the period."""

    host: str
    target: str
    model: str
    fired_at: datetime
    resolved_at: datetime | None
    summary: str


@dataclass(frozen=True, slots=True)
class Budget:
    monthly_usd: Decimal | None  # None: no budget configured
    month: str  # "YYYY-MM" the figures are for (the period's last month)
    spent_usd: Decimal  # month to date at the period's end (billed where larger)
    used_ratio: float | None
    forecast_usd: Decimal  # month-end at the pace observed over the last 24 h
    forecast_ratio: float | None
    forecast_basis: str = ""  # "at $2.72/h observed over the last 0.2 h"


@dataclass(frozen=True, slots=True)
class Recommendation:
    """One concrete change, with the numbers that justify it. ``kind``: "serverless", "api",
    "pod" (keep the pod), "smaller_gpu", "consolidate" or "replica"."""

    kind: str
    title: str
    detail: str
    saving_usd_per_month: Decimal | None = None


@dataclass(frozen=True, slots=True)
class DailySpend:
    day: date  # in the period's timezone
    busy_usd: Decimal
    idle_usd: Decimal  # the cost of the time the GPUs were not busy


@dataclass(frozen=True, slots=True)
class ModelDay:
    model: str
    day: date
    cost_per_million_tokens_usd: Decimal | None


@dataclass(frozen=True, slots=True)
class GpuDay:
    host: str
    gpu_uuid: str
    gpu_index: str
    day: date
    utilization_ratio: float | None


@dataclass(frozen=True, slots=True)
class DataExtent:
    """The stored data a report's window holds: its first and last instants (None: no data).
    Everything stored up to ``last`` is in the report (agent.cost.provisional)."""

    first: datetime | None
    last: datetime | None

    @property
    def empty(self) -> bool:
        return self.last is None


@dataclass(frozen=True, slots=True)
class Report:
    generated_at: datetime
    period: Period
    previous_period: Period
    hosts_filter: tuple[str, ...]  # empty: every host
    models_filter: tuple[str, ...]  # empty: every model
    useful_tokens_rule: str  # "output" or "output+prompt"
    totals: Totals
    spend_sources: tuple[SpendSource, ...]
    models: tuple[ModelRow, ...]
    hosts: tuple[HostRow, ...]
    gpus: tuple[GpuRow, ...]
    top_waste: tuple[GpuRow, ...]  # the five GPUs with the highest idle cost
    alerts: tuple[AlertRow, ...]
    queue_incidents: tuple[QueueIncident, ...]
    budget: Budget
    recommendations: tuple[Recommendation, ...]
    daily_spend: tuple[DailySpend, ...]
    model_days: tuple[ModelDay, ...]
    gpu_days: tuple[GpuDay, ...]
    data: DataExtent = DataExtent(None, None)
    targets: tuple[TargetRow, ...] = ()
    teams: tuple[GroupRow, ...] = ()  # by the configured labels (agent.config.teams)
    projects: tuple[GroupRow, ...] = ()
    team_budgets: tuple[TeamBudgetRow, ...] = ()
    tenants: tuple[TenantRow, ...] = ()  # behind [[gateways]] (agent.reporting.tenant_parts)
    namespaces: tuple[PodRow, ...] = ()  # Kubernetes (agent.reporting.pod_parts)
    pods: tuple[PodRow, ...] = ()
    mig_instances: tuple[MigRow, ...] = ()  # the GPUs' MIG instances (agent.cost.mig)
    schema_version: int = SCHEMA_VERSION
