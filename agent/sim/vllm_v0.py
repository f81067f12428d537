"""vLLM's V0 engine (0.6.6) /metrics families, in registration order.

V0 disables created series, so it never prints _created, and creates label children lazily:
nothing before the first stats log; after it the gauges and plain counters (incremented by 0),
while each histogram and each finished_reason appears with the first request that observes it.
The simulator shows the state after the first stats log: gauges and counters at 0, histograms
and request_success with HELP and TYPE only.
"""

from __future__ import annotations

from collections.abc import Sequence

from agent.sim.expo import Family, Scalar
from agent.sim.traffic import Snapshot
from agent.sim.vllm_spec import (
    CACHE_CONFIG,
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
    REQUEST_PARAMS,
    V0_CAPTURE_SIZES,
    V0_LATENCY,
    V0_TPOT,
    V0_TTFT,
    Builder,
    Child,
    Spec,
    build_1_2_5_buckets,
    counter,
    finish_reason,
    gauge,
    generated,
    hist,
    hit_rate,
    kv_usage,
    preempted,
    prompt,
    running,
    waiting,
)

# V0 (0.6.6) in registration order; request_success is inserted after the token histograms.
V0_SPECS = (
    gauge("vllm:num_requests_running", "Number of requests currently running on GPU.", running),
    gauge("vllm:num_requests_swapped", "Number of requests swapped to CPU."),
    gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", waiting),
    gauge("vllm:gpu_cache_usage_perc", H_GPU_KV, kv_usage),
    gauge("vllm:cpu_cache_usage_perc", "CPU KV-cache usage. 1 means 100 percent usage."),
    gauge("vllm:cpu_prefix_cache_hit_rate", "CPU prefix cache block hit rate."),
    gauge("vllm:gpu_prefix_cache_hit_rate", "GPU prefix cache block hit rate.", hit_rate),
    counter("vllm:num_preemptions", H_PREEMPT, preempted),
    counter("vllm:prompt_tokens", H_PROMPT, prompt),
    counter("vllm:generation_tokens", H_GENERATION, generated),
    # Declared but never incremented: no child is ever created.
    Spec("empty-counter", "vllm:tokens", "Number of prefill plus generation tokens processed."),
    hist("vllm:iteration_tokens_total", H_ITERATION, "iteration_tokens", V0_CAPTURE_SIZES),
    hist("vllm:time_to_first_token_seconds", H_TTFT, "ttft", V0_TTFT),
    hist("vllm:time_per_output_token_seconds", H_TPOT, "itl", V0_TPOT),
    hist(
        "vllm:e2e_request_latency_seconds",
        "Histogram of end to end request latency in seconds.",
        "e2e",
        V0_LATENCY,
    ),
    hist("vllm:request_queue_time_seconds", H_QUEUE, "queue", V0_LATENCY),
    hist("vllm:request_inference_time_seconds", H_INFERENCE, "inference", V0_LATENCY),
    hist("vllm:request_prefill_time_seconds", H_PREFILL, "prefill", V0_LATENCY),
    hist("vllm:request_decode_time_seconds", H_DECODE, "decode", V0_LATENCY),
    hist(
        "vllm:time_in_queue_requests",
        "Histogram of time the request spent in the queue in seconds.",
        "queue",
        V0_LATENCY,
    ),
    # Observed only with --collect-detailed-traces, which the simulated server does not use.
    Spec(
        "empty-histogram",
        "vllm:model_forward_time_milliseconds",
        "Histogram of time spent in the model forward pass in ms.",
    ),
    Spec(
        "empty-histogram",
        "vllm:model_execute_time_milliseconds",
        "Histogram of time spent in the model execute function in ms.",
    ),
    *REQUEST_PARAMS,
)
# Speculative decoding is off: declared, never set. Then the deprecated throughput gauges,
# which the simulator reports for an idle interval.
V0_TAIL_SPECS = (
    Spec(
        "empty-gauge", "vllm:spec_decode_draft_acceptance_rate", "Speulative token acceptance rate."
    ),
    Spec("empty-gauge", "vllm:spec_decode_efficiency", "Speculative decoding system efficiency."),
    Spec("empty-counter", "vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens."),
    Spec("empty-counter", "vllm:spec_decode_num_draft_tokens", "Number of draft tokens."),
    Spec("empty-counter", "vllm:spec_decode_num_emitted_tokens", "Number of emitted tokens."),
    gauge("vllm:avg_prompt_throughput_toks_per_s", "Average prefill throughput in tokens/s."),
    gauge(
        "vllm:avg_generation_throughput_toks_per_s", "Average generation throughput in tokens/s."
    ),
)


def v0_families(snap: Snapshot) -> list[Family]:
    """The engine families of V0, after the first stats log (no python_*/process_*)."""
    if len(snap.engines) != 1:
        raise ValueError("vLLM V0 has no data parallelism: use engines=1")
    children = [
        Child(
            (("model_name", m),),
            snap.select(m),
            snap.gauges_of(m, snap.engines[0]),
            snap.dropped_of(m),
        )
        for m in snap.models
    ]
    b = Builder(children, None, build_1_2_5_buckets(snap.max_model_len), lazy=True)
    info = Family(
        "vllm:cache_config_info",
        "gauge",
        "Information of the LLMEngine CacheConfig",
        (Scalar(CACHE_CONFIG, 1.0),),
    )
    b.families.append(info)
    b.add(V0_SPECS)
    b.families.append(_v0_request_success(children))
    b.add(V0_TAIL_SPECS)
    return b.families


def _v0_request_success(children: Sequence[Child]) -> Family:
    # Lazily created: one child per finished_reason seen, in order of first appearance.
    series: list[Scalar] = []
    for c in children:
        seen: dict[str, int] = {}
        for r in c.requests:
            reason = finish_reason(r, (0, 6, 6))
            seen[reason] = seen.get(reason, 0) + 1
        series.extend(
            Scalar(c.labels + (("finished_reason", k),), float(n)) for k, n in seen.items()
        )
    return Family(
        "vllm:request_success",
        "counter",
        "Count of successfully processed requests.",
        tuple(series),
    )
