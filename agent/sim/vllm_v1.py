"""vLLM's V1 engine /metrics families (0.8.5 to 0.33), in registration order.

V1 pre-creates every model_name x engine (x finished_reason) child at 0 and, in single-process
mode, prints a _created family after each counter and histogram. In multiprocess mode
(``mp``: several API servers, 0.9+) there is no _created (the caller passes ``created=None``)
and in 0.9.2-0.11 ``kv_cache_usage_perc`` has no multiprocess mode: one series per API-server
process with a ``pid`` label (:data:`API_SERVER_PIDS`; each shows the current value, so
summing over pid double-counts).
"""

from __future__ import annotations

from agent.sim.expo import Family, Scalar
from agent.sim.traffic import Gauges, Snapshot
from agent.sim.vllm_spec import (
    CACHE_CONFIG,
    CACHE_CONFIG_WIDE,
    H_DECODE,
    H_GENERATION,
    H_GPU_KV,
    H_INFERENCE,
    H_ITERATION,
    H_PREEMPT,
    H_PREFILL,
    H_PROMPT,
    H_QUEUE,
    H_TPOT,
    H_TTFT,
    ITERATION_TOKENS,
    LATENCY,
    PREEMPTIONS,
    REQUEST_PARAMS,
    TPOT,
    TTFT,
    WIDE_CACHE_CONFIG_SINCE,
    Builder,
    Child,
    Version,
    build_1_2_5_buckets,
    cached,
    counter,
    estimated_flops,
    estimated_read_bytes,
    estimated_write_bytes,
    finish_reason,
    gauge,
    generated,
    hist,
    kv_usage,
    preempted,
    prompt,
    running,
    waiting,
)
from agent.sim.vllm_spec_decode import spec_decode_families

API_SERVER_PIDS = (2201, 2202)

_DEPRECATED_FROM: Version = (0, 9, 2)
_ITL_FROM: Version = (0, 10, 2)

_ESTIMATES_FROM: Version = (0, 32, 0)  # seen in a real 0.32 (tests/fixtures); older not checked
_H_ESTIMATE = " per GPU (for Model Flops Utilization calculations)."

# V1 plain families in registration order; the others are built in v1_families.
# Registered first, and moving only with --enable-mfu-metrics: the simulated server has it on.
V1_ESTIMATE_SPECS = (
    counter(
        "vllm:estimated_flops_per_gpu",
        "Estimated number of floating point operations" + _H_ESTIMATE,
        estimated_flops,
        since=_ESTIMATES_FROM,
    ),
    counter(
        "vllm:estimated_read_bytes_per_gpu",
        "Estimated number of bytes read from memory" + _H_ESTIMATE,
        estimated_read_bytes,
        since=_ESTIMATES_FROM,
    ),
    counter(
        "vllm:estimated_write_bytes_per_gpu",
        "Estimated number of bytes written to memory" + _H_ESTIMATE,
        estimated_write_bytes,
        since=_ESTIMATES_FROM,
    ),
)
V1_SCHEDULER_SPECS = (
    gauge("vllm:num_requests_running", "Number of requests in model execution batches.", running),
    gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", waiting),
)
V1_CACHE_SPECS = (
    gauge("vllm:gpu_cache_usage_perc", H_GPU_KV, kv_usage, until=_DEPRECATED_FROM),
    gauge(
        "vllm:gpu_cache_usage_perc",
        H_GPU_KV + "DEPRECATED: Use vllm:kv_cache_usage_perc instead.",
        kv_usage,
        since=_DEPRECATED_FROM,
        until=(0, 12, 0),
    ),
    counter(
        "vllm:gpu_prefix_cache_queries",
        "GPU prefix cache queries, in terms of number of queried blocks.",
        prompt,
        until=(0, 9, 0),
    ),
    counter(
        "vllm:gpu_prefix_cache_hits",
        "GPU prefix cache hits, in terms of number of cached blocks.",
        cached,
        until=(0, 9, 0),
    ),
    counter(
        "vllm:gpu_prefix_cache_queries",
        "GPU prefix cache queries, in terms of number of queriedtokens. "
        "DEPRECATED: Use vllm:prefix_cache_queries instead.",
        prompt,
        since=(0, 9, 0),
        until=(0, 12, 0),
    ),
    counter(
        "vllm:gpu_prefix_cache_hits",
        "GPU prefix cache hits, in terms of number of cached tokens. "
        "DEPRECATED: Use vllm:prefix_cache_hits instead.",
        cached,
        since=(0, 9, 0),
        until=(0, 12, 0),
    ),
)
V1_PREFIX_SPECS = (
    counter(
        "vllm:prefix_cache_queries",
        "Prefix cache queries, in terms of number of queried tokens.",
        prompt,
        since=_DEPRECATED_FROM,
    ),
    counter(
        "vllm:prefix_cache_hits",
        "Prefix cache hits, in terms of number of cached tokens.",
        cached,
        since=_DEPRECATED_FROM,
    ),
    # KV-connector and multimodal caches: not simulated, but pre-created at 0.
    counter(
        "vllm:external_prefix_cache_queries",
        "External prefix cache queries from KV connector cross-instance cache sharing, "
        "in terms of number of queried tokens.",
        since=(0, 12, 0),
    ),
    counter(
        "vllm:external_prefix_cache_hits",
        "External prefix cache hits from KV connector cross-instance cache sharing, "
        "in terms of number of cached tokens.",
        since=(0, 12, 0),
    ),
    counter(
        "vllm:mm_cache_queries",
        "Multi-modal cache queries, in terms of number of queried items.",
        since=(0, 12, 0),
    ),
    counter(
        "vllm:mm_cache_hits",
        "Multi-modal cache hits, in terms of number of cached items.",
        since=(0, 12, 0),
    ),
    counter("vllm:num_preemptions", H_PREEMPT, preempted),
    counter("vllm:prompt_tokens", H_PROMPT, prompt),
)
V1_HISTOGRAM_SPECS = (
    REQUEST_PARAMS[0],
    REQUEST_PARAMS[1],
    hist("vllm:iteration_tokens_total", H_ITERATION, "iteration_tokens", ITERATION_TOKENS),
    *REQUEST_PARAMS[2:],
    hist(
        "vllm:request_prefill_kv_computed_tokens",
        "Histogram of new KV tokens computed during prefill (excluding cached tokens).",
        "computed_prompt_tokens",
        None,
        since=(0, 13, 0),
    ),
    hist("vllm:time_to_first_token_seconds", H_TTFT, "ttft", TTFT),
    hist("vllm:time_per_output_token_seconds", H_TPOT, "itl", TPOT, until=_ITL_FROM),
    hist(
        "vllm:time_per_output_token_seconds",
        H_TPOT + "DEPRECATED: Use vllm:inter_token_latency_seconds instead.",
        "itl",
        TPOT,
        since=_ITL_FROM,
        until=(0, 15, 0),
    ),
    hist(
        "vllm:inter_token_latency_seconds",
        "Histogram of inter-token latency in seconds.",
        "itl",
        TPOT,
        since=_ITL_FROM,
    ),
    hist(
        "vllm:request_time_per_output_token_seconds",
        "Histogram of time_per_output_token_seconds per request.",
        "tpot",
        TPOT,
        since=(0, 11, 0),
    ),
    hist(
        "vllm:e2e_request_latency_seconds",
        "Histogram of e2e request latency in seconds.",
        "e2e",
        LATENCY,
    ),
    hist("vllm:request_queue_time_seconds", H_QUEUE, "queue", LATENCY),
    hist("vllm:request_inference_time_seconds", H_INFERENCE, "inference", LATENCY),
    hist("vllm:request_prefill_time_seconds", H_PREFILL, "prefill", LATENCY),
    hist("vllm:request_decode_time_seconds", H_DECODE, "decode", LATENCY),
    hist(
        "vllm:request_num_preemptions",
        "Histogram of number of preemptions per request.",
        "preemptions",
        PREEMPTIONS,
        since=(0, 30, 0),
    ),
)


def v1_families(
    v: Version, snap: Snapshot, created: float | None, mp: bool, spec_tokens: int = 0
) -> list[Family]:
    """The engine families of V1 version ``v``; ``created`` is None in multiprocess mode;
    ``spec_tokens`` > 0: speculative decoding with that many draft tokens per step."""
    children = [
        Child(
            (("model_name", m), ("engine", e)),
            snap.select(m, e),
            snap.gauges_of(m, e),
            snap.dropped_of(m, e),
        )
        for m in snap.models
        for e in snap.engines
    ]
    b = Builder(children, created, build_1_2_5_buckets(snap.max_model_len))
    b.add(V1_ESTIMATE_SPECS, v)
    b.add(V1_SCHEDULER_SPECS, v)
    if v >= (0, 20, 0):
        _waiting_by_reason(b)
    b.add(V1_CACHE_SPECS, v)
    if v >= _DEPRECATED_FROM:
        _kv_cache_usage(b, v, mp)
    b.add(V1_PREFIX_SPECS, v)
    _v1_token_counters(b, v)
    b.add(V1_HISTOGRAM_SPECS, v)
    if spec_tokens > 0:
        spec_decode_families(b, spec_tokens)
    _v1_info(b, v, snap)
    return b.families


def _waiting_by_reason(b: Builder) -> None:
    series = tuple(
        Scalar(c.labels + (("reason", reason),), float(get(c.gauges)))
        for reason, get in (("capacity", _capacity), ("deferred", _deferred))
        for c in b.children
    )
    help_ = "Number of requests waiting to be processed, by reason."
    b.families.append(Family("vllm:num_requests_waiting_by_reason", "gauge", help_, series))


def _capacity(g: Gauges) -> int:
    return g.waiting_capacity


def _deferred(g: Gauges) -> int:
    return g.waiting_deferred


def _kv_cache_usage(b: Builder, v: Version, mp: bool) -> None:
    help_ = "KV-cache usage. 1 means 100 percent usage."
    if mp and v < (0, 12, 0):
        # No multiprocess_mode before 0.12: one series per API-server process.
        series = tuple(
            Scalar(c.labels + (("pid", str(pid)),), c.gauges.kv_usage)
            for c in b.children
            for pid in API_SERVER_PIDS
        )
    else:
        series = tuple(Scalar(c.labels, c.gauges.kv_usage) for c in b.children)
    b.families.append(Family("vllm:kv_cache_usage_perc", "gauge", help_, series))


_SOURCES = ("local_compute", "local_cache_hit", "external_kv_transfer")
_CACHE_SOURCES = ("device", "host", "p2p", "disk", "external_unspecified")


def _by_source(c: Child, source: str) -> float:
    # All cache hits are local and on the device; nothing comes from a KV connector.
    if source == "local_compute":
        return c.worked(lambda r: r.computed_prompt_tokens)
    return cached(c) if source in ("local_cache_hit", "device") else 0.0


def _v1_token_counters(b: Builder, v: Version) -> None:
    if v >= (0, 16, 0):
        b.by_label(
            "vllm:prompt_tokens_by_source",
            "Number of prompt tokens by source.",
            "source",
            _SOURCES,
            _by_source,
        )
        b.add(
            (
                counter(
                    "vllm:prompt_tokens_cached",
                    "Number of cached prompt tokens (local + external).",
                    cached,
                ),
            )
        )
    if v >= (0, 33, 0):
        b.by_label(
            "vllm:prompt_tokens_cached_by_source",
            "Number of cached prompt tokens by cache source.",
            "source",
            _CACHE_SOURCES,
            _by_source,
        )
    b.add((counter("vllm:generation_tokens", H_GENERATION, generated),))
    reasons = ["stop", "length", "abort"]
    reasons += ["error"] if v >= (0, 14, 0) else []
    reasons += ["repetition"] if v >= (0, 20, 0) else []
    b.by_label(
        "vllm:request_success",
        "Count of successfully processed requests.",
        "finished_reason",
        reasons,
        lambda c, k: float(sum(1 for r in c.requests if finish_reason(r, v) == k)),
    )


def _v1_info(b: Builder, v: Version, snap: Snapshot) -> None:
    # cache_config_info carries the CacheConfig fields and engine, but no model_name.
    def labels(engine: str) -> tuple[tuple[str, str], ...]:
        if v >= WIDE_CACHE_CONFIG_SINCE:  # as a real 0.32 prints them: sorted, engine among
            return tuple(sorted(CACHE_CONFIG_WIDE + (("engine", engine),)))
        return CACHE_CONFIG + (("engine", engine),)

    series = tuple(Scalar(labels(e), 1.0) for e in snap.engines)
    help_ = "Information of the LLMEngine CacheConfig"
    b.families.append(Family("vllm:cache_config_info", "gauge", help_, series))
    if v >= (0, 12, 0):
        states = (("awake", 1.0), ("weights_offloaded", 0.0), ("discard_all", 0.0))
        sleep = tuple(
            Scalar(c.labels + (("sleep_state", s),), x) for c in b.children for s, x in states
        )
        help_ = (
            "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine "
            "is awake; weights_offloaded = 1 means sleep level 1; discard_all = 1 means "
            "sleep level 2."
        )
        b.families.append(Family("vllm:engine_sleep_state", "gauge", help_, sleep))
    if v >= (0, 33, 0):
        # Labels model_name and reason only: no engine.
        rejections = tuple(
            Scalar((("model_name", m), ("reason", reason)), 0.0)
            for m in snap.models
            for reason in ("max_num_queued_reqs", "max_num_queued_tokens")
        )
        help_ = "Number of requests rejected at admission, by reason."
        b.families.append(
            Family("vllm:admission_rejections", "counter", help_, rejections, b.created)
        )
