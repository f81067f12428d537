"""NVIDIA Triton Inference Server (any backend; TensorRT-LLM's in particular) to the canonical
engine signals.

Triton labels every per-model series with ``model`` and ``version``; versions of one model are
summed (they serve under one name). An ensemble and its steps (``preprocessing``,
``tensorrt_llm``, ``postprocessing``) are each a model of their own, each counting the same
request once: they are kept apart, never added up.

What Triton core gives (every backend):
- ``nv_inference_request_success`` / ``nv_inference_request_failure``: finished requests. The
  failure counter carries ``reason`` (REJECTED, CANCELED, BACKEND, OTHER) from 24.x on; a
  cancelled request is abandoned work ("abort"), the others are errors. Before that it has no
  reason and every failure is an error.
- ``nv_inference_pending_request_count``: requests waiting in the scheduler (the queue).
- ``nv_inference_first_response_histogram_ms`` (``--metrics-config histogram_latencies=true``,
  24.x on): time to first response, in **milliseconds**, so each ``le`` and the ``_sum`` are
  divided by 1000. The default buckets are 100, 500, 2000 and 5000 ms.
- ``nv_inference_{request,queue,compute_*}_duration_us``: cumulative **microsecond counters**,
  the sum of every request's time and nothing else. A sum over a count is a mean, not a
  distribution, so none of them feeds a canonical latency histogram: end-to-end and queue
  latency are not counted for Triton. The ``_summary_us`` summaries (opt-in) are quantiles of a
  sliding window, which cannot be aggregated either; not read.
- No token counters: Triton counts requests and inferences (a batch of n is n), not tokens.

What the TensorRT-LLM backend adds (custom metrics, 23.11 on), per ``model="tensorrt_llm"``:
- ``nv_trt_llm_request_metrics{request_type}``: ``scheduled`` (in this iteration's batch: the
  running requests), ``waiting`` (queued in the batch manager; newer backends only, preferred
  over Triton's pending count where present), ``context``, ``active``, ``max``.
- ``nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type}``: ``fraction`` (newer backends)
  is the KV usage; without it, ``used`` over ``max`` blocks.
- Iteration gauges (``total_context_tokens``, V1's ``total_generation_tokens``) hold one
  iteration's tokens, not a running total: not token counters, not mapped.

TensorRT-LLM without Triton (``trtllm-serve``'s ``/prometheus/metrics``, and a Dynamo TRT-LLM
worker, which re-exports them) is read here too, under ``engine="triton"``: its
``MetricsCollector`` (tensorrt_llm/metrics/collector.py: vLLM's names behind ``trtllm_``, the
collector's own prefix in 2026 builds, which Dynamo's worker adds to older ones; labelled
``model_name`` and ``engine_type``) gives the running and waiting
gauges, ``kv_cache_utilization`` (used over max blocks), token counters and
``prompt_cached_tokens_total`` (so computed prompt tokens), ``request_success_total`` by
``finished_reason``, the speculative-decoding counters and the TTFT, per-request TPOT, e2e and
queue histograms (seconds). Builds before the prefix print the same histograms bare at
``/prometheus/metrics`` (vllm-project/aibrix#2004 shows one); those are not recognised (their
names are NIM's, without NIM's gauges).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

from collectors.base import Sample
from collectors.engines.exposition import Exposition
from collectors.engines.rules import Context, Counter, Gauge, Histogram, Mapper

NAME = "triton"

SUCCESS = "nv_inference_request_success_total"
FAILURE = "nv_inference_request_failure_total"
PENDING = "nv_inference_pending_request_count"
TRT_REQUESTS = "nv_trt_llm_request_metrics"
TRT_KV = "nv_trt_llm_kv_cache_block_metrics"
FIRST_RESPONSE_MS = "nv_inference_first_response_histogram_ms"

# Triton's failure reasons; CANCELED is the client's (or a timeout's) doing: abandoned work.
CANCELED = "CANCELED"

# trtllm-serve's own (``trtllm_``): the same signals as vLLM's, where they differ from Triton's.
SERVE_WAITING = "trtllm_num_requests_waiting"
SERVE_KV = "trtllm_kv_cache_utilization"
SERVE_PROMPT = "trtllm_prompt_tokens_total"
SERVE_CACHED = "trtllm_prompt_cached_tokens_total"

TRITON_RULES = (
    Gauge("gpuwatch_engine_requests_running", (TRT_REQUESTS,), where={"request_type": "scheduled"}),
    Counter("gpuwatch_engine_requests_finished_total", (SUCCESS,), labels={"reason": "completed"}),
    Histogram("gpuwatch_engine_ttft_seconds", (FIRST_RESPONSE_MS,), divide_by=1000.0),
)
SERVE_RULES = (
    Gauge("gpuwatch_engine_requests_running", ("trtllm_num_requests_running",)),
    Counter("gpuwatch_engine_prompt_tokens_total", (SERVE_PROMPT,)),
    Counter("gpuwatch_engine_generation_tokens_total", ("trtllm_generation_tokens_total",)),
    Counter(
        "gpuwatch_engine_requests_finished_total",
        ("trtllm_request_success_total",),
        split=("finished_reason", "reason"),
    ),
    Counter(
        "gpuwatch_engine_spec_decode_draft_tokens_total",
        ("trtllm_spec_decode_num_draft_tokens_total",),
    ),
    Counter(
        "gpuwatch_engine_spec_decode_accepted_tokens_total",
        ("trtllm_spec_decode_num_accepted_tokens_total",),
    ),
    Histogram("gpuwatch_engine_ttft_seconds", ("trtllm_time_to_first_token_seconds",)),
    # Per request, its mean time per output token (as TGI's), not every gap.
    Histogram(
        "gpuwatch_engine_inter_token_latency_seconds", ("trtllm_time_per_output_token_seconds",)
    ),
    Histogram("gpuwatch_engine_e2e_latency_seconds", ("trtllm_e2e_request_latency_seconds",)),
    Histogram("gpuwatch_engine_queue_time_seconds", ("trtllm_request_queue_time_seconds",)),
)
RULES = TRITON_RULES + SERVE_RULES

# Every series map_samples reads (the scrape keeps only these families of a body).
READS = tuple(src for rule in RULES for src in rule.sources) + (
    FAILURE, PENDING, TRT_KV, SERVE_WAITING, SERVE_KV, SERVE_CACHED,
)  # fmt: skip


def detect(exposition: Exposition) -> bool:
    prefixes = ("nv_inference_", "nv_trt_llm_", "trtllm_")
    return any(name.startswith(prefixes) for name in exposition.names())


def _model_of(labels: Mapping[str, str]) -> str:
    return labels.get("model") or labels.get("model_name", "")


def map_samples(exposition: Exposition, context: Context) -> list[Sample]:
    def model_of(labels: Mapping[str, str]) -> str:
        return _model_of(labels) or context.model

    mapper = Mapper(exposition, context, model_of)
    mapper.apply_all(RULES)
    _failures(mapper)
    _waiting(mapper)
    _kv_usage(mapper)
    _computed_prompt(mapper)
    return mapper.samples


def _failures(mapper: Mapper) -> None:
    """Failures by reason: CANCELED is "abort", any other reason (or none, before 24.x) "error"."""
    totals: dict[tuple[str, str], float] = defaultdict(float)
    for labels, value in mapper.rows(FAILURE):
        reason = "abort" if labels.get("reason") == CANCELED else "error"
        totals[(mapper.model_of(labels), reason)] += value
    for (model, reason), value in totals.items():
        mapper.emit("gpuwatch_engine_requests_finished_total", value, model, {"reason": reason})


def _waiting(mapper: Mapper) -> None:
    """The batch manager's queue where TensorRT-LLM reports it, else Triton's pending count:
    one source per model, never both added (they count the same waiting requests)."""
    engine = mapper.counter_value((TRT_REQUESTS,), {"request_type": "waiting"})
    pending = mapper.counter_value((PENDING,))
    serve = mapper.counter_value((SERVE_WAITING,))  # trtllm-serve's (no Triton around it)
    for model, value in {**pending, **engine, **serve}.items():
        mapper.emit("gpuwatch_engine_requests_waiting", value, model)


def _kv_usage(mapper: Mapper) -> None:
    fraction = _kv_max(mapper, "fraction")
    for labels, value in mapper.rows(SERVE_KV):  # trtllm-serve's used over max blocks
        model = mapper.model_of(labels)
        fraction[model] = max(value, fraction.get(model, value))
    used, total = _kv_max(mapper, "used"), _kv_max(mapper, "max")
    for model in used.keys() & total.keys() - fraction.keys():
        if total[model] > 0:
            fraction[model] = used[model] / total[model]
    for model, value in fraction.items():
        mapper.emit("gpuwatch_engine_kv_cache_usage_ratio", value, model)


def _kv_max(mapper: Mapper, kind: str) -> dict[str, float]:
    """Per model, the largest value of one ``kv_cache_block_type`` over its instances (a KV
    cache is as full as its fullest instance, as ``Agg.MAX`` reads other engines)."""
    out: dict[str, float] = {}
    for labels, value in mapper.rows(TRT_KV, {"kv_cache_block_type": kind}):
        model = mapper.model_of(labels)
        out[model] = max(value, out.get(model, value))
    return out


def _computed_prompt(mapper: Mapper) -> None:
    """trtllm-serve counts a request's prompt tokens and their cache hits when it finishes,
    both at once: the difference is what was computed."""
    prompt = mapper.counter_value((SERVE_PROMPT,))
    cached = mapper.counter_value((SERVE_CACHED,))
    for model, value in prompt.items():
        if model in cached:
            computed = value - cached[model]
            mapper.emit("gpuwatch_engine_prompt_tokens_computed_total", computed, model)
