"""vLLM, V0 (0.6+) and V1 (0.8+ to 0.33), to the canonical engine signals.

Versions differ by name, not by meaning, so each signal lists its sources newest first:
``kv_cache_usage_perc`` (0.9.2+) before ``gpu_cache_usage_perc`` (V0, and V1 until 0.11), and
``inter_token_latency_seconds`` (0.10.2+) before ``time_per_output_token_seconds`` (removed 0.15).
Computed prompt tokens exist only where vLLM says which were cache hits:
``prompt_tokens_by_source_total{source="local_compute"}`` (0.16+).

Useful tokens exact to the request: the per-request histograms ``request_generation_tokens``,
``request_prompt_tokens`` and ``request_prefill_kv_computed_tokens`` (0.13+) are observed once
per finished request, so their ``_sum`` counts what finished requests used and their ``_count``
the requests; they become the ``completed`` counters. ``generation_tokens_total`` also counts
what streams a client dropped mid-way consumed (vLLM does not count those as aborted).

Speculative decoding (V1, only when vLLM runs with a draft method):
``spec_decode_num_draft_tokens_total`` and ``spec_decode_num_accepted_tokens_total`` become the
spec-decode counters; their ratio over a window is the acceptance rate. No other engine here
maps one (llama.cpp's server has like-named counters, not mapped yet).

Work estimates (V1, e.g. 0.32; incremented only with ``--enable-mfu-metrics``, registered and
left at 0 without it): ``estimated_flops_per_gpu_total`` and
``estimated_{read,write}_bytes_per_gpu_total`` count what vLLM's analytic model says each step
cost one GPU of its rank. Per model they take
the *mean* over DP ranks (``engine``), not the sum: the deployment's per-GPU figure, which
agent.cost.efficiency divides by one GPU's peak.
"""

from __future__ import annotations

from collections.abc import Mapping

from collectors.base import Sample
from collectors.engines.exposition import Exposition
from collectors.engines.rules import Agg, Context, Counter, Gauge, Histogram, Mapper

NAME = "vllm"

RULES = (
    Gauge("gpuwatch_engine_requests_running", ("vllm:num_requests_running",)),
    Gauge("gpuwatch_engine_requests_waiting", ("vllm:num_requests_waiting",)),
    Gauge(
        "gpuwatch_engine_kv_cache_usage_ratio",
        ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),  # a 0-1 fraction despite "perc"
        agg=Agg.MAX,
    ),
    Counter("gpuwatch_engine_prompt_tokens_total", ("vllm:prompt_tokens_total",)),
    Counter(
        "gpuwatch_engine_prompt_tokens_computed_total",
        ("vllm:prompt_tokens_by_source_total",),
        where={"source": "local_compute"},
    ),
    Counter("gpuwatch_engine_generation_tokens_total", ("vllm:generation_tokens_total",)),
    Counter(
        "gpuwatch_engine_requests_finished_total",
        ("vllm:request_success_total",),
        split=("finished_reason", "reason"),
    ),
    Counter("gpuwatch_engine_preemptions_total", ("vllm:num_preemptions_total",)),
    # Observed once per finished request: what completed requests generated and read, which
    # the token counters exceed by what a client abandoned mid-stream (not an "abort" to vLLM).
    Counter(
        "gpuwatch_engine_completed_generation_tokens_total", ("vllm:request_generation_tokens_sum",)
    ),
    Counter("gpuwatch_engine_requests_completed_total", ("vllm:request_generation_tokens_count",)),
    Counter("gpuwatch_engine_completed_prompt_tokens_total", ("vllm:request_prompt_tokens_sum",)),
    Counter(
        "gpuwatch_engine_completed_prompt_tokens_computed_total",
        ("vllm:request_prefill_kv_computed_tokens_sum",),
    ),
    Counter(
        "gpuwatch_engine_estimated_flops_total",
        ("vllm:estimated_flops_per_gpu_total",),
        agg=Agg.MEAN,
    ),
    Counter(
        "gpuwatch_engine_estimated_read_bytes_total",
        ("vllm:estimated_read_bytes_per_gpu_total",),
        agg=Agg.MEAN,
    ),
    Counter(
        "gpuwatch_engine_estimated_write_bytes_total",
        ("vllm:estimated_write_bytes_per_gpu_total",),
        agg=Agg.MEAN,
    ),
    # Only with speculative decoding (vllm/v1/spec_decode/metrics.py): tokens the draft model
    # proposed and those the target model accepted, summed over DP ranks like every counter.
    Counter(
        "gpuwatch_engine_spec_decode_draft_tokens_total",
        ("vllm:spec_decode_num_draft_tokens_total",),
    ),
    Counter(
        "gpuwatch_engine_spec_decode_accepted_tokens_total",
        ("vllm:spec_decode_num_accepted_tokens_total",),
    ),
    Histogram("gpuwatch_engine_ttft_seconds", ("vllm:time_to_first_token_seconds",)),
    Histogram(
        "gpuwatch_engine_inter_token_latency_seconds",
        ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
    ),
    Histogram("gpuwatch_engine_e2e_latency_seconds", ("vllm:e2e_request_latency_seconds",)),
    Histogram("gpuwatch_engine_queue_time_seconds", ("vllm:request_queue_time_seconds",)),
)

# Every series map_samples reads (the scrape keeps only these families of a body).
READS = tuple(src for rule in RULES for src in rule.sources)


def detect(exposition: Exposition) -> bool:
    return any(name.startswith("vllm:") for name in exposition.names())


def map_samples(exposition: Exposition, context: Context) -> list[Sample]:
    def model_of(labels: Mapping[str, str]) -> str:
        return labels.get("model_name") or context.model

    return Mapper(exposition, context, model_of).apply_all(RULES)
