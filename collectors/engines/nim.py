"""NVIDIA NIM for LLMs (``/v1/metrics``) to the canonical engine signals.

NIM's LLM containers serve vLLM's metrics under vLLM-style names without the ``vllm:`` prefix,
labelled ``model_name`` (NIM docs, "Observability for NVIDIA NIM for LLMs"): the meaning is
vLLM V0's, so the rules are vllm.py's with the names NIM prints. Where NIM differs:
- finished requests by reason are ``request_finish_total{finished_reason}``; beside them
  ``request_success_total`` and ``request_failure_total`` carry no reason, and how the failures
  overlap the finishes is not documented, so only the former is read (counted once);
- KV usage is ``gpu_cache_usage_perc`` (a 0-1 fraction despite "perc"); ``num_request_max`` is
  a limit, not a load, and is not read.
A NIM whose backend prints ``vllm:`` names is vLLM to gpuwatch (``engine = "vllm"``, or auto).

The unprefixed names are generic, so a body is NIM's only when it has the running and waiting
gauges *and* a token counter together, and none of the prefixed engines' families (those are
detected first).
"""

from __future__ import annotations

from collections.abc import Mapping

from collectors.base import Sample
from collectors.engines.exposition import Exposition
from collectors.engines.rules import Agg, Context, Counter, Gauge, Histogram, Mapper

NAME = "nim"

RULES = (
    Gauge("gpuwatch_engine_requests_running", ("num_requests_running",)),
    Gauge("gpuwatch_engine_requests_waiting", ("num_requests_waiting",)),
    Gauge("gpuwatch_engine_kv_cache_usage_ratio", ("gpu_cache_usage_perc",), agg=Agg.MAX),
    Counter("gpuwatch_engine_prompt_tokens_total", ("prompt_tokens_total",)),
    Counter("gpuwatch_engine_generation_tokens_total", ("generation_tokens_total",)),
    Counter(
        "gpuwatch_engine_requests_finished_total",
        ("request_finish_total",),
        split=("finished_reason", "reason"),
    ),
    # Observed once per finished request, as vLLM V0's (vllm.py says what that buys).
    Counter(
        "gpuwatch_engine_completed_generation_tokens_total", ("request_generation_tokens_sum",)
    ),
    Counter("gpuwatch_engine_requests_completed_total", ("request_generation_tokens_count",)),
    Counter("gpuwatch_engine_completed_prompt_tokens_total", ("request_prompt_tokens_sum",)),
    Histogram("gpuwatch_engine_ttft_seconds", ("time_to_first_token_seconds",)),
    Histogram(
        "gpuwatch_engine_inter_token_latency_seconds",
        ("inter_token_latency_seconds", "time_per_output_token_seconds"),
    ),
    Histogram("gpuwatch_engine_e2e_latency_seconds", ("e2e_request_latency_seconds",)),
    Histogram("gpuwatch_engine_queue_time_seconds", ("request_queue_time_seconds",)),
)

# Every series map_samples reads (the scrape keeps only these families of a body).
READS = tuple(src for rule in RULES for src in rule.sources)

# The families (as the parser names them: counters without ``_total``) that make a body NIM's.
_GAUGES = frozenset({"num_requests_running", "num_requests_waiting"})
_TOKENS = frozenset({"prompt_tokens", "generation_tokens"})


def detect(exposition: Exposition) -> bool:
    names = set(exposition.names())
    return names >= _GAUGES and bool(_TOKENS & names)


def map_samples(exposition: Exposition, context: Context) -> list[Sample]:
    def model_of(labels: Mapping[str, str]) -> str:
        return labels.get("model_name") or context.model

    return Mapper(exposition, context, model_of).apply_all(RULES)
