"""SGLang 0.5's /metrics ("sglang-0.5"), following engine-metrics.md §2.

SGLang always serves a MultiProcessCollector registry, so: no _created, no python_*/process_*
families, a family shows up only once it has a child (nothing lazily created is printed before
its first event), histograms print _sum first, and gauges declared without a multiprocess
mode (``num_retracted_reqs``, ``num_paused_reqs``) carry a ``pid`` label (the scheduler's:
:data:`SCHEDULER_PID_BASE` plus the engine index).

Labels:
- scheduler side (running/queue gauges, token usage, queue time): model_name, engine_type
  ("unified"), tp_rank, pp_rank, moe_ep_rank, plus dp_rank when there are several engines;
- tokenizer side (token and request counters, TTFT, ITL, TPOT, e2e): model_name and
  engine_type, summed over engines; ``is_streaming`` ("true"/"false") on the token counters,
  TTFT, per-request TPOT and e2e;
- ``priority=""`` on every series with ``priority=True`` (the "" series holds the totals; the
  simulator has no per-priority breakdown).

Counters move when a request finishes: every request counts in num_requests_total and the
token counters, aborted ones also in num_aborted_requests_total. cached_tokens_total has
``cache_source="device"`` only (every simulated cache hit is on the device). Gauges are shown
as after the scheduler's first stats log: ``token_usage`` is the KV usage rounded to 2
decimals, ``num_used_tokens`` that share of :data:`MAX_TOTAL_NUM_TOKENS`, ``cache_hit_rate``
the cached share of all prompt tokens so far (a ratio), ``gen_throughput`` 0 (idle).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from agent.sim.expo import Family, Labels, Scalar, histogram
from agent.sim.traffic import Request, Snapshot

VERSIONS = ("sglang-0.5",)
SCHEDULER_PID_BASE = 910
MAX_TOTAL_NUM_TOKENS = 262144

TTFT = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400)
E2E = TTFT + (600, 1200, 1800, 2400)
ITL = (
    0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060, 0.080,
    0.100, 0.200, 0.400, 0.600, 0.800, 1, 2, 4, 6, 8,
)  # fmt: skip
QUEUE = (
    0.0, 0.001, 0.005, 0.01, 0.05, 0.1, 0.2, 0.5, 1, 2, 3, 4, 5, 10, 15, 20, 30, 40, 50, 60, 70,
    80, 90, 100, 200, 300, 400, 500, 600, 700, 800, 900, 1000, 1200, 1400, 1600, 1800, 2000,
    2500, 3000,
)  # fmt: skip


def _streaming(value: bool) -> str:
    return "true" if value else "false"


def families(snap: Snapshot, *, priority: bool = False) -> list[Family]:
    extra: Labels = (("priority", ""),) if priority else ()
    out: list[Family] = []
    for model in snap.models:
        for engine in snap.engines:
            out.extend(_scheduler(snap, model, engine, extra))
        out.extend(_tokenizer(snap.select(model), _tokenizer_labels(model) + extra))
    return _merge(out)


def _tokenizer_labels(model: str) -> Labels:
    return (("model_name", model), ("engine_type", "unified"))


def _scheduler_labels(model: str, engine: str, dp: bool) -> Labels:
    ranks = (("tp_rank", "0"), ("pp_rank", "0"), ("moe_ep_rank", "0"))
    return _tokenizer_labels(model) + ranks + ((("dp_rank", engine),) if dp else ())


def _scheduler(snap: Snapshot, model: str, engine: str, extra: Labels) -> list[Family]:
    labels = _scheduler_labels(model, engine, len(snap.engines) > 1) + extra
    g = snap.gauges_of(model, engine)
    reqs = snap.select(model, engine)
    prompt = sum(r.prompt_tokens for r in reqs)
    hit_rate = sum(r.cached_tokens for r in reqs) / prompt if prompt else 0.0
    pid = (("pid", str(SCHEDULER_PID_BASE + int(engine))),)

    def gauge(name: str, help_: str, value: float, pid_label: Labels = ()) -> Family:
        return Family(name, "gauge", help_, (Scalar(labels + pid_label, float(value)),))

    queue = tuple(r.queue_time for r in reqs)
    return [
        gauge("sglang:num_running_reqs", "The number of running requests.", g.running),
        gauge(
            "sglang:num_used_tokens",
            "The number of used tokens.",
            round(g.kv_usage * MAX_TOTAL_NUM_TOKENS),
        ),
        gauge("sglang:token_usage", "The token usage.", round(g.kv_usage, 2)),
        gauge("sglang:gen_throughput", "The generation throughput (token/s).", 0.0),
        gauge("sglang:num_queue_reqs", "The number of requests in the waiting queue.", g.waiting),
        gauge(
            "sglang:num_grammar_queue_reqs",
            "The number of requests in the grammar waiting queue.",
            0,
        ),
        gauge("sglang:cache_hit_rate", "The prefix cache hit rate.", hit_rate),
        gauge(
            "sglang:max_total_num_tokens",
            "Maximum total number of tokens in the KV cache pool.",
            MAX_TOTAL_NUM_TOKENS,
        ),
        gauge("sglang:num_retracted_reqs", "The number of retracted requests.", 0, pid),
        gauge(
            "sglang:num_paused_reqs", "The number of paused requests by async weight sync.", 0, pid
        ),
        Family(
            "sglang:queue_time_seconds",
            "histogram",
            "Histogram of queueing time in seconds.",
            (histogram(labels, QUEUE, queue),) if reqs else (),
        ),
    ]


def _split(reqs: Sequence[Request], labels: Labels) -> list[tuple[Labels, tuple[Request, ...]]]:
    """(labels with is_streaming, requests) for each is_streaming value seen, first seen first."""
    seen: list[bool] = []
    for r in reqs:
        if r.streaming not in seen:
            seen.append(r.streaming)
    return [
        (labels + (("is_streaming", _streaming(s)),), tuple(r for r in reqs if r.streaming == s))
        for s in seen
    ]


def _tokenizer(reqs: Sequence[Request], labels: Labels) -> list[Family]:
    parts = _split(reqs, labels)

    def counter(name: str, help_: str, get: Callable[[Request], int]) -> Family:
        series = tuple(Scalar(ls, float(sum(get(r) for r in rs))) for ls, rs in parts)
        return Family(name, "counter", help_, series)

    def streaming_histogram(name: str, help_: str, metric: str, bounds: Sequence[float]) -> Family:
        series = tuple(
            histogram(ls, bounds, values)
            for ls, rs in parts
            if (values := tuple(v for r in rs for v in r.observations(metric)))
        )
        return Family(name, "histogram", help_, series)

    aborted = sum(1 for r in reqs if r.finish_reason == "abort")
    itls = tuple(v for r in reqs for v in r.itls)
    some = bool(reqs)
    return [
        counter(
            "sglang:prompt_tokens", "Number of prefill tokens processed.", lambda r: r.prompt_tokens
        ),
        counter(
            "sglang:generation_tokens",
            "Number of generation tokens processed.",
            lambda r: r.generation_tokens,
        ),
        Family(
            "sglang:cached_tokens",
            "counter",
            "Number of cached prompt tokens.",
            (
                Scalar(
                    labels + (("cache_source", "device"),),
                    float(sum(r.cached_tokens for r in reqs)),
                ),
            )
            if some
            else (),
        ),
        Family(
            "sglang:num_requests",
            "counter",
            "Number of requests processed.",
            (Scalar(labels, float(len(reqs))),) if some else (),
        ),
        Family(
            "sglang:num_aborted_requests",
            "counter",
            "Number of requests aborted.",
            (Scalar(labels, float(aborted)),) if aborted else (),
        ),
        streaming_histogram(
            "sglang:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            "ttft",
            TTFT,
        ),
        Family(
            "sglang:inter_token_latency_seconds",
            "histogram",
            "Histogram of inter-token latency in seconds.",
            (histogram(labels, ITL, itls),) if itls else (),
        ),
        streaming_histogram(
            "sglang:request_time_per_output_token_seconds",
            "Histogram of time per output token in seconds.",
            "tpot",
            ITL,
        ),
        streaming_histogram(
            "sglang:e2e_request_latency_seconds",
            "Histogram of End-to-end request latency in seconds",
            "e2e",
            E2E,
        ),
    ]


def _merge(families: Sequence[Family]) -> list[Family]:
    """One family per name, series concatenated in order (several models or engines)."""
    merged: dict[str, Family] = {}
    for f in families:
        old = merged.get(f.name)
        merged[f.name] = f if old is None else Family(f.name, f.kind, f.help, old.series + f.series)
    return list(merged.values())
