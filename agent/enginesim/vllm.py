"""vLLM's /metrics, per version, following /work/shared/reference/engine-metrics.md §1 and §8.

Versions: "vllm-0.6" (V0 engine of 0.6.6), "vllm-0.8.5", "vllm-0.10" (0.10.2) and "vllm-0.33"
(V1 engine). Families, labels, buckets and HELP texts differ per version; HELP texts follow
vLLM's source where it was read (missing spaces included), otherwise they are ours.

What each request contributes (see traffic.Request):
- prompt_tokens_total counts every prompt token, cached ones included; prefix-cache queries
  and hits count prompt and cached tokens (tokens in every version, even where 0.8.x's HELP
  says blocks);
- TTFT, e2e, queue, prefill, decode, inference and the per-request token histograms observe
  every finished request, aborted and failed ones included; time_per_output_token and
  inter_token_latency observe each ITL; request_time_per_output_token observes the per-request
  mean TPOT of requests with at least two tokens;
- finished_reason "error" exists from 0.14 (so in "vllm-0.33" only); older versions count an
  engine error as "abort".

V0 (0.6.6) disables created series, so it never prints _created, and creates label children
lazily: nothing before the first stats log; after it the gauges and plain counters (incremented
by 0), while each histogram and each finished_reason appears with the first request that
observes it. The simulator shows the state after the first stats log: gauges and counters at
0, histograms and request_success with HELP and TYPE only.

V1 pre-creates every model_name x engine (x finished_reason) child at 0 and, in single-process
mode, prints a _created family after each counter and histogram. In multiprocess mode
(``multiprocess=True``: several API servers, 0.9+) there is no _created and no
python_*/process_* family, histograms print _sum first, and in 0.9.2-0.11 ``kv_cache_usage_perc``
has no multiprocess mode: one series per API-server process with a ``pid`` label
(:data:`API_SERVER_PIDS`; each shows the current value, so summing over pid double-counts).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from agent.enginesim.expo import Family, Labels, Scalar, histogram
from agent.enginesim.pyruntime import http_families, python_families
from agent.enginesim.traffic import Gauges, Request, Snapshot

Version = tuple[int, int, int]
V1_VERSIONS: dict[str, Version] = {
    "vllm-0.8.5": (0, 8, 5),
    "vllm-0.10": (0, 10, 2),
    "vllm-0.33": (0, 33, 0),
}
VERSIONS = ("vllm-0.6", *V1_VERSIONS)
API_SERVER_PIDS = (2201, 2202)
_ALWAYS: Version = (0, 0, 0)
_NEVER: Version = (99, 0, 0)

V0_TTFT = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
)
TTFT = V0_TTFT + (20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
V0_TPOT = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)
TPOT = V0_TPOT + (5.0, 7.5, 10.0, 20.0, 40.0, 80.0)  # also ITL and per-request TPOT
V0_LATENCY = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0)
LATENCY = V0_LATENCY + (120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
ITERATION_TOKENS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
V0_CAPTURE_SIZES = (1, 2, 4) + tuple(8 * i for i in range(1, 33))  # V0 iteration_tokens
N_PARAM = (1, 2, 5, 10, 20)
PREEMPTIONS = (1, 2, 3, 4, 5, 10, 20)

_CACHE_CONFIG: Labels = (
    ("block_size", "16"),
    ("cache_dtype", "auto"),
    ("enable_prefix_caching", "True"),
    ("gpu_memory_utilization", "0.9"),
    ("num_cpu_blocks", "2048"),
    ("num_gpu_blocks", "27264"),
    ("swap_space", "4"),
)


def build_1_2_5_buckets(max_value: int) -> tuple[int, ...]:
    """vLLM's 1, 2, 5, 10, 20, 50, ... up to ``max_value`` (request token histograms)."""
    out: list[int] = []
    exponent = 0
    while True:
        for m in (1, 2, 5):
            value = m * 10**exponent
            if value > max_value:
                return tuple(out)
            out.append(value)
        exponent += 1


@dataclass(frozen=True)
class _Child:
    """One model_name (x engine) child: its labels, requests and gauges."""

    labels: Labels
    requests: tuple[Request, ...]
    gauges: Gauges

    def observed(self, metric: str) -> tuple[float, ...]:
        return tuple(v for r in self.requests for v in r.observations(metric))

    def total(self, get: Callable[[Request], int]) -> float:
        return float(sum(get(r) for r in self.requests))


Value = Callable[[_Child], float]


def _zero(c: _Child) -> float:
    return 0.0


def _running(c: _Child) -> float:
    return c.gauges.running


def _waiting(c: _Child) -> float:
    return c.gauges.waiting


def _kv_usage(c: _Child) -> float:
    return c.gauges.kv_usage


def _prompt(c: _Child) -> float:
    return c.total(lambda r: r.prompt_tokens)


def _cached(c: _Child) -> float:
    return c.total(lambda r: r.cached_tokens)


def _generated(c: _Child) -> float:
    return c.total(lambda r: r.generation_tokens)


def _preempted(c: _Child) -> float:
    return c.total(lambda r: r.preemptions)


def _hit_rate(c: _Child) -> float:
    queried = _prompt(c)
    return _cached(c) / queried if queried else 0.0


@dataclass(frozen=True)
class Spec:
    """One plain family. Histograms name an observable and buckets (None: 1-2-5 buckets)."""

    kind: str
    name: str
    help: str
    value: Value = _zero
    observe: str = ""
    buckets: tuple[float, ...] | None = None
    since: Version = _ALWAYS
    until: Version = _NEVER  # first version without it

    def in_version(self, v: Version) -> bool:
        return self.since <= v < self.until


def _gauge(
    name: str, help_: str, value: Value = _zero, since: Version = _ALWAYS, until: Version = _NEVER
) -> Spec:
    return Spec("gauge", name, help_, value, since=since, until=until)


def _counter(
    name: str, help_: str, value: Value = _zero, since: Version = _ALWAYS, until: Version = _NEVER
) -> Spec:
    return Spec("counter", name, help_, value, since=since, until=until)


def _hist(
    name: str,
    help_: str,
    observe: str,
    buckets: tuple[float, ...] | None,
    since: Version = _ALWAYS,
    until: Version = _NEVER,
) -> Spec:
    return Spec(
        "histogram", name, help_, observe=observe, buckets=buckets, since=since, until=until
    )


_H_PROMPT = "Number of prefill tokens processed."
_H_GENERATION = "Number of generation tokens processed."
_H_PREEMPT = "Cumulative number of preemption from the engine."
_H_TTFT = "Histogram of time to first token in seconds."
_H_TPOT = "Histogram of time per output token in seconds."
_H_QUEUE = "Histogram of time spent in WAITING phase for request."
_H_INFERENCE = "Histogram of time spent in RUNNING phase for request."
_H_PREFILL = "Histogram of time spent in PREFILL phase for request."
_H_DECODE = "Histogram of time spent in DECODE phase for request."
_H_ITERATION = "Histogram of number of tokens per engine_step."
_H_GPU_KV = "GPU KV-cache usage. 1 means 100 percent usage."

# Request-parameter histograms, shared by V0 and V1 (1-2-5 buckets unless given).
_REQUEST_PARAMS = (
    _hist("vllm:request_prompt_tokens", _H_PROMPT, "prompt_tokens", None),
    _hist("vllm:request_generation_tokens", _H_GENERATION, "generation_tokens", None),
    _hist(
        "vllm:request_max_num_generation_tokens",
        "Histogram of maximum number of requested generation tokens.",
        "max_tokens",
        None,
    ),
    _hist("vllm:request_params_n", "Histogram of the n request parameter.", "n", N_PARAM),
    _hist(
        "vllm:request_params_max_tokens",
        "Histogram of the max_tokens request parameter.",
        "max_tokens",
        None,
    ),
)

# V0 (0.6.6) in registration order; request_success is inserted after the token histograms.
V0_SPECS = (
    _gauge("vllm:num_requests_running", "Number of requests currently running on GPU.", _running),
    _gauge("vllm:num_requests_swapped", "Number of requests swapped to CPU."),
    _gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", _waiting),
    _gauge("vllm:gpu_cache_usage_perc", _H_GPU_KV, _kv_usage),
    _gauge("vllm:cpu_cache_usage_perc", "CPU KV-cache usage. 1 means 100 percent usage."),
    _gauge("vllm:cpu_prefix_cache_hit_rate", "CPU prefix cache block hit rate."),
    _gauge("vllm:gpu_prefix_cache_hit_rate", "GPU prefix cache block hit rate.", _hit_rate),
    _counter("vllm:num_preemptions", _H_PREEMPT, _preempted),
    _counter("vllm:prompt_tokens", _H_PROMPT, _prompt),
    _counter("vllm:generation_tokens", _H_GENERATION, _generated),
    # Declared but never incremented: no child is ever created.
    Spec("empty-counter", "vllm:tokens", "Number of prefill plus generation tokens processed."),
    _hist("vllm:iteration_tokens_total", _H_ITERATION, "iteration_tokens", V0_CAPTURE_SIZES),
    _hist("vllm:time_to_first_token_seconds", _H_TTFT, "ttft", V0_TTFT),
    _hist("vllm:time_per_output_token_seconds", _H_TPOT, "itl", V0_TPOT),
    _hist(
        "vllm:e2e_request_latency_seconds",
        "Histogram of end to end request latency in seconds.",
        "e2e",
        V0_LATENCY,
    ),
    _hist("vllm:request_queue_time_seconds", _H_QUEUE, "queue", V0_LATENCY),
    _hist("vllm:request_inference_time_seconds", _H_INFERENCE, "inference", V0_LATENCY),
    _hist("vllm:request_prefill_time_seconds", _H_PREFILL, "prefill", V0_LATENCY),
    _hist("vllm:request_decode_time_seconds", _H_DECODE, "decode", V0_LATENCY),
    _hist(
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
    *_REQUEST_PARAMS,
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
    _gauge("vllm:avg_prompt_throughput_toks_per_s", "Average prefill throughput in tokens/s."),
    _gauge(
        "vllm:avg_generation_throughput_toks_per_s", "Average generation throughput in tokens/s."
    ),
)

_DEPRECATED_FROM: Version = (0, 9, 2)
_ITL_FROM: Version = (0, 10, 2)

# V1 plain families in registration order; the others are built in _v1_families.
V1_SCHEDULER_SPECS = (
    _gauge("vllm:num_requests_running", "Number of requests in model execution batches.", _running),
    _gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", _waiting),
)
V1_CACHE_SPECS = (
    _gauge("vllm:gpu_cache_usage_perc", _H_GPU_KV, _kv_usage, until=_DEPRECATED_FROM),
    _gauge(
        "vllm:gpu_cache_usage_perc",
        _H_GPU_KV + "DEPRECATED: Use vllm:kv_cache_usage_perc instead.",
        _kv_usage,
        since=_DEPRECATED_FROM,
        until=(0, 12, 0),
    ),
    _counter(
        "vllm:gpu_prefix_cache_queries",
        "GPU prefix cache queries, in terms of number of queried blocks.",
        _prompt,
        until=(0, 9, 0),
    ),
    _counter(
        "vllm:gpu_prefix_cache_hits",
        "GPU prefix cache hits, in terms of number of cached blocks.",
        _cached,
        until=(0, 9, 0),
    ),
    _counter(
        "vllm:gpu_prefix_cache_queries",
        "GPU prefix cache queries, in terms of number of queriedtokens. "
        "DEPRECATED: Use vllm:prefix_cache_queries instead.",
        _prompt,
        since=(0, 9, 0),
        until=(0, 12, 0),
    ),
    _counter(
        "vllm:gpu_prefix_cache_hits",
        "GPU prefix cache hits, in terms of number of cached tokens. "
        "DEPRECATED: Use vllm:prefix_cache_hits instead.",
        _cached,
        since=(0, 9, 0),
        until=(0, 12, 0),
    ),
)
V1_PREFIX_SPECS = (
    _counter(
        "vllm:prefix_cache_queries",
        "Prefix cache queries, in terms of number of queried tokens.",
        _prompt,
        since=_DEPRECATED_FROM,
    ),
    _counter(
        "vllm:prefix_cache_hits",
        "Prefix cache hits, in terms of number of cached tokens.",
        _cached,
        since=_DEPRECATED_FROM,
    ),
    # KV-connector and multimodal caches: not simulated, but pre-created at 0.
    _counter(
        "vllm:external_prefix_cache_queries",
        "External prefix cache queries from KV connector cross-instance cache sharing, "
        "in terms of number of queried tokens.",
        since=(0, 12, 0),
    ),
    _counter(
        "vllm:external_prefix_cache_hits",
        "External prefix cache hits from KV connector cross-instance cache sharing, "
        "in terms of number of cached tokens.",
        since=(0, 12, 0),
    ),
    _counter(
        "vllm:mm_cache_queries",
        "Multi-modal cache queries, in terms of number of queried items.",
        since=(0, 12, 0),
    ),
    _counter(
        "vllm:mm_cache_hits",
        "Multi-modal cache hits, in terms of number of cached items.",
        since=(0, 12, 0),
    ),
    _counter("vllm:num_preemptions", _H_PREEMPT, _preempted),
    _counter("vllm:prompt_tokens", _H_PROMPT, _prompt),
)
V1_HISTOGRAM_SPECS = (
    _REQUEST_PARAMS[0],
    _REQUEST_PARAMS[1],
    _hist("vllm:iteration_tokens_total", _H_ITERATION, "iteration_tokens", ITERATION_TOKENS),
    *_REQUEST_PARAMS[2:],
    _hist(
        "vllm:request_prefill_kv_computed_tokens",
        "Histogram of new KV tokens computed during prefill (excluding cached tokens).",
        "computed_prompt_tokens",
        None,
        since=(0, 13, 0),
    ),
    _hist("vllm:time_to_first_token_seconds", _H_TTFT, "ttft", TTFT),
    _hist("vllm:time_per_output_token_seconds", _H_TPOT, "itl", TPOT, until=_ITL_FROM),
    _hist(
        "vllm:time_per_output_token_seconds",
        _H_TPOT + "DEPRECATED: Use vllm:inter_token_latency_seconds instead.",
        "itl",
        TPOT,
        since=_ITL_FROM,
        until=(0, 15, 0),
    ),
    _hist(
        "vllm:inter_token_latency_seconds",
        "Histogram of inter-token latency in seconds.",
        "itl",
        TPOT,
        since=_ITL_FROM,
    ),
    _hist(
        "vllm:request_time_per_output_token_seconds",
        "Histogram of time_per_output_token_seconds per request.",
        "tpot",
        TPOT,
        since=(0, 11, 0),
    ),
    _hist(
        "vllm:e2e_request_latency_seconds",
        "Histogram of e2e request latency in seconds.",
        "e2e",
        LATENCY,
    ),
    _hist("vllm:request_queue_time_seconds", _H_QUEUE, "queue", LATENCY),
    _hist("vllm:request_inference_time_seconds", _H_INFERENCE, "inference", LATENCY),
    _hist("vllm:request_prefill_time_seconds", _H_PREFILL, "prefill", LATENCY),
    _hist("vllm:request_decode_time_seconds", _H_DECODE, "decode", LATENCY),
    _hist(
        "vllm:request_num_preemptions",
        "Histogram of number of preemptions per request.",
        "preemptions",
        PREEMPTIONS,
        since=(0, 30, 0),
    ),
)


class _Builder:
    """Collects the families of one render."""

    def __init__(
        self,
        children: Sequence[_Child],
        created: float | None,
        one_two_five: tuple[float, ...],
        *,
        lazy: bool = False,
    ) -> None:
        self.children = children
        self.created = created
        self.one_two_five = one_two_five
        self.lazy = lazy  # V0: a histogram child appears with its first observation
        self.families: list[Family] = []

    def add(self, specs: Sequence[Spec], v: Version = _ALWAYS) -> None:
        for spec in specs:
            if spec.in_version(v):
                self.families.append(self._family(spec))

    def _family(self, spec: Spec) -> Family:
        if spec.kind.startswith("empty-"):
            return Family(spec.name, spec.kind.removeprefix("empty-"), spec.help, ())
        if spec.kind != "histogram":
            scalars = tuple(Scalar(c.labels, float(spec.value(c))) for c in self.children)
            created = self.created if spec.kind == "counter" else None
            return Family(spec.name, spec.kind, spec.help, scalars, created)
        bounds = self.one_two_five if spec.buckets is None else spec.buckets
        observed = ((c, c.observed(spec.observe)) for c in self.children)
        series = tuple(
            histogram(c.labels, bounds, values) for c, values in observed if values or not self.lazy
        )
        return Family(spec.name, "histogram", spec.help, series, self.created)

    def by_label(
        self,
        name: str,
        help_: str,
        label: str,
        values: Sequence[str],
        count: Callable[[_Child, str], float],
    ) -> None:
        # Children are created value-major (vLLM loops over the label value, then the engine).
        series = tuple(
            Scalar(c.labels + ((label, v),), float(count(c, v)))
            for v in values
            for c in self.children
        )
        self.families.append(Family(name, "counter", help_, series, self.created))


def families(version: str, snap: Snapshot, *, multiprocess: bool = False) -> list[Family]:
    """Every family of that vLLM version's /metrics, in registration order."""
    if version == "vllm-0.6":
        if multiprocess:
            raise ValueError("the simulator renders V0 in single-process mode only")
        return python_families(snap) + _v0_families(snap)
    v = V1_VERSIONS[version]
    if multiprocess and v < (0, 9, 0):
        raise ValueError(f"{version} has no multiprocess mode (since 0.9)")
    created = None if multiprocess else snap.started_at
    runtime = [] if multiprocess else python_families(snap)
    engine = _v1_families(v, snap, created, multiprocess)
    return runtime + engine + http_families(snap, created=created)


def _finish_reason(r: Request, v: Version) -> str:
    return "abort" if r.finish_reason == "error" and v < (0, 14, 0) else r.finish_reason


def _v0_families(snap: Snapshot) -> list[Family]:
    if len(snap.engines) != 1:
        raise ValueError("vLLM V0 has no data parallelism: use engines=1")
    children = [
        _Child((("model_name", m),), snap.select(m), snap.gauges_of(m, snap.engines[0]))
        for m in snap.models
    ]
    b = _Builder(children, None, build_1_2_5_buckets(snap.max_model_len), lazy=True)
    info = Family(
        "vllm:cache_config_info",
        "gauge",
        "Information of the LLMEngine CacheConfig",
        (Scalar(_CACHE_CONFIG, 1.0),),
    )
    b.families.append(info)
    b.add(V0_SPECS)
    b.families.append(_v0_request_success(children))
    b.add(V0_TAIL_SPECS)
    return b.families


def _v0_request_success(children: Sequence[_Child]) -> Family:
    # Lazily created: one child per finished_reason seen, in order of first appearance.
    series: list[Scalar] = []
    for c in children:
        seen: dict[str, int] = {}
        for r in c.requests:
            reason = _finish_reason(r, (0, 6, 6))
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


def _v1_families(v: Version, snap: Snapshot, created: float | None, mp: bool) -> list[Family]:
    children = [
        _Child((("model_name", m), ("engine", e)), snap.select(m, e), snap.gauges_of(m, e))
        for m in snap.models
        for e in snap.engines
    ]
    b = _Builder(children, created, build_1_2_5_buckets(snap.max_model_len))
    b.add(V1_SCHEDULER_SPECS, v)
    if v >= (0, 20, 0):
        _waiting_by_reason(b)
    b.add(V1_CACHE_SPECS, v)
    if v >= _DEPRECATED_FROM:
        _kv_cache_usage(b, v, mp)
    b.add(V1_PREFIX_SPECS, v)
    _v1_token_counters(b, v)
    b.add(V1_HISTOGRAM_SPECS, v)
    _v1_info(b, v, snap)
    return b.families


def _waiting_by_reason(b: _Builder) -> None:
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


def _kv_cache_usage(b: _Builder, v: Version, mp: bool) -> None:
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


def _by_source(c: _Child, source: str) -> float:
    # All cache hits are local and on the device; nothing comes from a KV connector.
    if source == "local_compute":
        return c.total(lambda r: r.computed_prompt_tokens)
    return _cached(c) if source in ("local_cache_hit", "device") else 0.0


def _v1_token_counters(b: _Builder, v: Version) -> None:
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
                _counter(
                    "vllm:prompt_tokens_cached",
                    "Number of cached prompt tokens (local + external).",
                    _cached,
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
    b.add((_counter("vllm:generation_tokens", _H_GENERATION, _generated),))
    reasons = ["stop", "length", "abort"]
    reasons += ["error"] if v >= (0, 14, 0) else []
    reasons += ["repetition"] if v >= (0, 20, 0) else []
    b.by_label(
        "vllm:request_success",
        "Count of successfully processed requests.",
        "finished_reason",
        reasons,
        lambda c, k: float(sum(1 for r in c.requests if _finish_reason(r, v) == k)),
    )


def _v1_info(b: _Builder, v: Version, snap: Snapshot) -> None:
    # cache_config_info carries the CacheConfig fields and engine, but no model_name.
    series = tuple(Scalar(_CACHE_CONFIG + (("engine", e),), 1.0) for e in snap.engines)
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
