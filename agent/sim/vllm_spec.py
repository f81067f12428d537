"""The table machinery of the vLLM simulator: buckets, family specs and the family builder.

Shared by both engine generations (vllm_v0.py, vllm_v1.py); what each version prints is in
those modules, and vllm.py picks between them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from agent.sim.expo import Family, Labels, Scalar, histogram
from agent.sim.traffic import Gauges, Request

Version = tuple[int, int, int]
ALWAYS: Version = (0, 0, 0)
NEVER: Version = (99, 0, 0)

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

CACHE_CONFIG: Labels = (
    ("block_size", "16"),
    ("cache_dtype", "auto"),
    ("enable_prefix_caching", "True"),
    ("gpu_memory_utilization", "0.9"),
    ("num_cpu_blocks", "2048"),
    ("num_gpu_blocks", "27264"),
    ("swap_space", "4"),
)
# What a real vLLM 0.32.0 labels it with (tests/fixtures/vllm-real): 37 labels with engine,
# 38 with the name, more than gpuwatch's old default label_limit of 30 allowed.
CACHE_CONFIG_WIDE: Labels = (
    ("_block_size_resolved", "True"),
    ("block_size", "128"),
    ("cache_dtype", "auto"),
    ("cache_hit_alignment_tokens", "None"),
    ("effective_attention_block_size", "128"),
    ("enable_mamba_shared_prefix_checkpoint", "False"),
    ("enable_prefix_caching", "True"),
    ("gpu_memory_utilization", "0.92"),
    ("hash_block_size", "None"),
    ("is_attention_free", "False"),
    ("kv_cache_dtype_skip_layers", "[]"),
    ("kv_cache_layout", "None"),
    ("kv_cache_max_concurrency", "512.0"),
    ("kv_cache_memory_bytes", "1073741824"),
    ("kv_cache_size_tokens", "1048576"),
    ("kv_offloading_backend", "native"),
    ("kv_offloading_size", "None"),
    ("kv_sharing_fast_prefill", "False"),
    ("mamba_block_size", "None"),
    ("mamba_cache_dtype", "auto"),
    ("mamba_cache_mode", "none"),
    ("mamba_page_size_padded", "None"),
    ("mamba_ssm_cache_dtype", "float32"),
    ("num_cpu_blocks", "None"),
    ("num_gpu_blocks", "8192"),
    ("num_gpu_blocks_override", "None"),
    ("prefix_cache_retention_interval", "0"),
    ("prefix_caching_hash_algo", "sha256"),
    ("prefix_match_unit", "None"),
    ("replayssm_buffer_len", "16"),
    ("skip_page_size_padded", "None"),
    ("sliding_window", "None"),
    ("swa_bounded_replay", "True"),
    ("use_kda_recoverssm", "False"),
    ("use_replayssm", "False"),
    ("user_specified_block_size", "False"),
)
WIDE_CACHE_CONFIG_SINCE = (0, 30, 0)


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
class Child:
    """One model_name (x engine) child: its labels, requests and gauges."""

    labels: Labels
    requests: tuple[Request, ...]
    gauges: Gauges
    # Streams dropped mid-way: in the token counters (the engine did the work), in no
    # per-request histogram and no finish reason.
    dropped: tuple[Request, ...] = ()

    def observed(self, metric: str) -> tuple[float, ...]:
        return tuple(v for r in self.requests for v in r.observations(metric))

    def total(self, get: Callable[[Request], int]) -> float:
        return float(sum(get(r) for r in self.requests))

    def worked(self, get: Callable[[Request], int]) -> float:
        """``total`` with the dropped streams: what the engine's token counters count."""
        return self.total(get) + float(sum(get(r) for r in self.dropped))


# A plain family's value for one child; the functions below are the ones the tables use.
Value = Callable[[Child], float]


def zero(c: Child) -> float:
    return 0.0


def running(c: Child) -> float:
    return c.gauges.running


def waiting(c: Child) -> float:
    return c.gauges.waiting


def kv_usage(c: Child) -> float:
    return c.gauges.kv_usage


def prompt(c: Child) -> float:
    return c.worked(lambda r: r.prompt_tokens)


def cached(c: Child) -> float:
    return c.worked(lambda r: r.cached_tokens)


def generated(c: Child) -> float:
    return c.worked(lambda r: r.generation_tokens)


# The work estimates of --enable-mfu-metrics (vllm/v1/metrics/perf.py), for one stated model
# shape, Llama-3.1-8B in BF16 on one GPU per rank: a matmul does 2 FLOPs per weight per token
# computed (cache hits compute nothing); decoding re-reads the weights once per step, shared by
# the batch, and each generated token reads its context's KV; every computed token writes its
# KV. Attention's own FLOPs are left out: a plausible magnitude, not vLLM's exact formulas.
EST_PARAMS = 8.03e9
EST_WEIGHT_BYTES = 2 * EST_PARAMS
EST_KV_BYTES_PER_TOKEN = 2 * 32 * 8 * 128 * 2  # K and V x layers x KV heads x head dim x BF16
EST_DECODE_BATCH = 16  # requests sharing one read of the weights per decode step


def _computed(r: Request) -> int:
    return r.computed_prompt_tokens + r.generation_tokens


def _kv_read(r: Request) -> int:
    # Generated token i reads the prompt and the i tokens before it.
    g = r.generation_tokens
    return EST_KV_BYTES_PER_TOKEN * (g * r.prompt_tokens + g * (g - 1) // 2)


def estimated_flops(c: Child) -> float:
    return 2 * EST_PARAMS * c.worked(_computed)


def estimated_read_bytes(c: Child) -> float:
    generated_ = c.worked(lambda r: r.generation_tokens)
    return EST_WEIGHT_BYTES * generated_ / EST_DECODE_BATCH + c.worked(_kv_read)


def estimated_write_bytes(c: Child) -> float:
    return EST_KV_BYTES_PER_TOKEN * c.worked(_computed)


def preempted(c: Child) -> float:
    return c.total(lambda r: r.preemptions)


def hit_rate(c: Child) -> float:
    queried = prompt(c)
    return cached(c) / queried if queried else 0.0


@dataclass(frozen=True)
class Spec:
    """One plain family. Histograms name an observable and buckets (None: 1-2-5 buckets)."""

    kind: str
    name: str
    help: str
    value: Value = zero
    observe: str = ""
    buckets: tuple[float, ...] | None = None
    since: Version = ALWAYS
    until: Version = NEVER  # first version without it

    def in_version(self, v: Version) -> bool:
        return self.since <= v < self.until


def gauge(
    name: str, help_: str, value: Value = zero, since: Version = ALWAYS, until: Version = NEVER
) -> Spec:
    return Spec("gauge", name, help_, value, since=since, until=until)


def counter(
    name: str, help_: str, value: Value = zero, since: Version = ALWAYS, until: Version = NEVER
) -> Spec:
    return Spec("counter", name, help_, value, since=since, until=until)


def hist(
    name: str,
    help_: str,
    observe: str,
    buckets: tuple[float, ...] | None,
    since: Version = ALWAYS,
    until: Version = NEVER,
) -> Spec:
    return Spec(
        "histogram", name, help_, observe=observe, buckets=buckets, since=since, until=until
    )


H_PROMPT = "Number of prefill tokens processed."
H_GENERATION = "Number of generation tokens processed."
H_PREEMPT = "Cumulative number of preemption from the engine."
H_TTFT = "Histogram of time to first token in seconds."
H_TPOT = "Histogram of time per output token in seconds."
H_QUEUE = "Histogram of time spent in WAITING phase for request."
H_INFERENCE = "Histogram of time spent in RUNNING phase for request."
H_PREFILL = "Histogram of time spent in PREFILL phase for request."
H_DECODE = "Histogram of time spent in DECODE phase for request."
H_ITERATION = "Histogram of number of tokens per engine_step."
H_GPU_KV = "GPU KV-cache usage. 1 means 100 percent usage."

# Request-parameter histograms, shared by V0 and V1 (1-2-5 buckets unless given).
REQUEST_PARAMS = (
    hist("vllm:request_prompt_tokens", H_PROMPT, "prompt_tokens", None),
    hist("vllm:request_generation_tokens", H_GENERATION, "generation_tokens", None),
    hist(
        "vllm:request_max_num_generation_tokens",
        "Histogram of maximum number of requested generation tokens.",
        "max_tokens",
        None,
    ),
    hist("vllm:request_params_n", "Histogram of the n request parameter.", "n", N_PARAM),
    hist(
        "vllm:request_params_max_tokens",
        "Histogram of the max_tokens request parameter.",
        "max_tokens",
        None,
    ),
)


class Builder:
    """Collects the families of one render."""

    def __init__(
        self,
        children: Sequence[Child],
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

    def add(self, specs: Sequence[Spec], v: Version = ALWAYS) -> None:
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
        count: Callable[[Child, str], float],
    ) -> None:
        # Children are created value-major (vLLM loops over the label value, then the engine).
        series = tuple(
            Scalar(c.labels + ((label, v),), float(count(c, v)))
            for v in values
            for c in self.children
        )
        self.families.append(Family(name, "counter", help_, series, self.created))


def finish_reason(r: Request, v: Version) -> str:
    """The finished_reason vLLM ``v`` reports: "error" exists from 0.14, before it is "abort"."""
    return "abort" if r.finish_reason == "error" and v < (0, 14, 0) else r.finish_reason
