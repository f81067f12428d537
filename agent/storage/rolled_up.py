"""What the rollup job keeps: the metrics that reports, cost signals and alerts read from the
rollup tables, and nothing else.

Every other series stays raw only (kept for the raw retention): a rollup row per series per
minute for every ``_created`` series, gauge and histogram bucket was most of a box's database,
and nothing read it. The rollup still *reads* other series as inputs (``_created`` series
and ``gpuwatch_target_up`` for restarts and births, the GPU readings for the cost ledger).

Readers take the names from here through :func:`rolled_up`, so a reader cannot ask for a metric
the rollup does not write: it fails when its module is imported, in every test that uses it.
"""

from __future__ import annotations

# Counters whose restart-safe increases reports and the cost summaries read (``rollups``).
GENERATION_TOKENS = "gpuwatch_engine_generation_tokens_total"
PROMPT_TOKENS_COMPUTED = "gpuwatch_engine_prompt_tokens_computed_total"
PROMPT_TOKENS = "gpuwatch_engine_prompt_tokens_total"
REQUESTS_FINISHED = "gpuwatch_engine_requests_finished_total"
# The same, counted per finished request where the engine says (vLLM's per-request histograms):
# useful tokens exact to the request, and what clients abandoned as the difference.
COMPLETED_GENERATION_TOKENS = "gpuwatch_engine_completed_generation_tokens_total"
COMPLETED_PROMPT_TOKENS = "gpuwatch_engine_completed_prompt_tokens_total"
COMPLETED_PROMPT_TOKENS_COMPUTED = "gpuwatch_engine_completed_prompt_tokens_computed_total"
REQUESTS_COMPLETED = "gpuwatch_engine_requests_completed_total"
# vLLM's per-GPU work estimates (--enable-mfu-metrics): a model's MFU and MBU in reports.
ESTIMATED_FLOPS = "gpuwatch_engine_estimated_flops_total"
ESTIMATED_READ_BYTES = "gpuwatch_engine_estimated_read_bytes_total"
ESTIMATED_WRITE_BYTES = "gpuwatch_engine_estimated_write_bytes_total"
# Speculative decoding (vLLM with a draft method): the report's acceptance rate per model.
SPEC_DECODE_DRAFT_TOKENS = "gpuwatch_engine_spec_decode_draft_tokens_total"
SPEC_DECODE_ACCEPTED_TOKENS = "gpuwatch_engine_spec_decode_accepted_tokens_total"
# Requests and their output tokens judged from their own OTLP spans against the model's
# objective (collectors.otlp): the objectives' exact basis, one row per series per minute.
SLO_SPAN_REQUESTS = "gpuwatch_slo_span_requests_total"
SLO_SPAN_OUTPUT_TOKENS = "gpuwatch_slo_span_output_tokens_total"
# A gateway's counters per tenant and model (collectors.gateways): each tenant's share of a
# model's tokens, and the gateway's list-price spend against the real cost (agent.cost.tenants).
GATEWAY_PROMPT_TOKENS = "gpuwatch_gateway_prompt_tokens_total"
GATEWAY_GENERATION_TOKENS = "gpuwatch_gateway_generation_tokens_total"
GATEWAY_SPEND = "gpuwatch_gateway_spend_usd_total"
# Gauges whose highest value per window the report reads (``rollups.max``): VRAM per GPU.
MEMORY_USED = "gpuwatch_gpu_memory_used_bytes"
MEMORY_TOTAL = "gpuwatch_gpu_memory_total_bytes"
# The same, per engine series: the KV-cache peak and the longest queue, which the report's
# serving efficiency and its replica advice read. One row per series per minute (hour, day)
# each: a vLLM target adds two series per model (per API-server pid in 0.9.2-0.11 for KV).
KV_CACHE_USAGE = "gpuwatch_engine_kv_cache_usage_ratio"
REQUESTS_WAITING = "gpuwatch_engine_requests_waiting"
# Ticks per rule that split a shared GPU's cost (``rollups.count``; agent.cost.split_basis).
SPLIT_BASIS = "gpuwatch_gpu_split_basis_info"
# Ticks a target's processes ran in a Kubernetes pod (``rollups.count``; agent.cost.pods_read):
# which pod's useful tokens a target's are.
TARGET_POD = "gpuwatch_target_pod_info"

# Histograms (base names) whose bucket increases the report's latency quantiles and the alert
# inputs' 24 h baseline read: one ``histogram_rollups`` row per histogram and bucket time.
TTFT = "gpuwatch_engine_ttft_seconds"
E2E = "gpuwatch_engine_e2e_latency_seconds"
# Read by the latency objectives ([[slo]] itl and queue thresholds) only.
ITL = "gpuwatch_engine_inter_token_latency_seconds"
QUEUE = "gpuwatch_engine_queue_time_seconds"

SERIES_ROLLUPS = frozenset(
    {
        GENERATION_TOKENS,
        PROMPT_TOKENS_COMPUTED,
        PROMPT_TOKENS,
        REQUESTS_FINISHED,
        COMPLETED_GENERATION_TOKENS,
        COMPLETED_PROMPT_TOKENS,
        COMPLETED_PROMPT_TOKENS_COMPUTED,
        REQUESTS_COMPLETED,
        ESTIMATED_FLOPS,
        ESTIMATED_READ_BYTES,
        ESTIMATED_WRITE_BYTES,
        SPEC_DECODE_DRAFT_TOKENS,
        SPEC_DECODE_ACCEPTED_TOKENS,
        SLO_SPAN_REQUESTS,
        SLO_SPAN_OUTPUT_TOKENS,
        GATEWAY_PROMPT_TOKENS,
        GATEWAY_GENERATION_TOKENS,
        GATEWAY_SPEND,
        MEMORY_USED,
        MEMORY_TOTAL,
        KV_CACHE_USAGE,
        REQUESTS_WAITING,
        SPLIT_BASIS,
        TARGET_POD,
    }
)
HISTOGRAM_ROLLUPS = frozenset({TTFT, E2E, ITL, QUEUE})
BUCKET_SUFFIX = "_bucket"


class NotRolledUp(ValueError):
    """A reader asked for a metric the rollup job does not write."""


def rolled_up(*metrics: str) -> tuple[str, ...]:
    """``metrics``, after checking that each has rollup rows (``rollups`` for a series metric,
    ``histogram_rollups`` for a histogram's base name)."""
    missing = [m for m in metrics if m not in SERIES_ROLLUPS and m not in HISTOGRAM_ROLLUPS]
    if missing:
        raise NotRolledUp(
            f"not rolled up: {', '.join(missing)}; add it to agent/storage/rolled_up.py"
        )
    return metrics


def histogram_of(metric: str) -> str | None:
    """The rolled-up histogram a ``_bucket`` series belongs to, if any."""
    if not metric.endswith(BUCKET_SUFFIX):
        return None
    base = metric.removesuffix(BUCKET_SUFFIX)
    return base if base in HISTOGRAM_ROLLUPS else None
