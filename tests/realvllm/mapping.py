"""What each canonical engine signal must equal in a real vLLM exposition, written out from
engine-metrics.md §1.2 rather than read from collectors/engines/vllm.py, and the comparison of
gpuwatch's samples (from ``collect --json`` or the mapper itself) with the raw bytes.

Used by the slow real-server test and by the fast test over the captured fixtures."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from tests.realvllm import promtext
from tests.realvllm.promtext import Raw


@dataclass(frozen=True)
class Source:
    sample: str  # the raw sample name
    where: Mapping[str, str]
    created: str  # the raw ``_created`` family restarts are told by
    combine: str = "sum"  # children summed, "max" (KV usage: the fullest rank) or "mean"


def _counter(sample: str, **where: str) -> Source:
    return Source(sample, where, sample.removesuffix("_total") + "_created")


def _per_gpu(sample: str) -> Source:  # one GPU's work per DP rank: the ranks' mean, not sum
    return Source(sample, {}, sample.removesuffix("_total") + "_created", "mean")


def _from_histogram(sample: str) -> Source:  # a histogram's _sum or _count as a counter
    base = sample.rsplit("_", 1)[0]
    return Source(sample, {}, base + "_created")


GAUGES = {
    "gpuwatch_engine_requests_running": Source("vllm:num_requests_running", {}, ""),
    "gpuwatch_engine_requests_waiting": Source("vllm:num_requests_waiting", {}, ""),
    "gpuwatch_engine_kv_cache_usage_ratio": Source("vllm:kv_cache_usage_perc", {}, "", "max"),
}
COUNTERS = {
    "gpuwatch_engine_prompt_tokens_total": _counter("vllm:prompt_tokens_total"),
    "gpuwatch_engine_prompt_tokens_computed_total": _counter(
        "vllm:prompt_tokens_by_source_total", source="local_compute"
    ),
    "gpuwatch_engine_generation_tokens_total": _counter("vllm:generation_tokens_total"),
    "gpuwatch_engine_preemptions_total": _counter("vllm:num_preemptions_total"),
    # Observed once per finished request: the useful work, exact to the request.
    "gpuwatch_engine_completed_generation_tokens_total": _from_histogram(
        "vllm:request_generation_tokens_sum"
    ),
    "gpuwatch_engine_completed_prompt_tokens_total": _from_histogram(
        "vllm:request_prompt_tokens_sum"
    ),
    "gpuwatch_engine_completed_prompt_tokens_computed_total": _from_histogram(
        "vllm:request_prefill_kv_computed_tokens_sum"
    ),
    "gpuwatch_engine_requests_completed_total": _from_histogram(
        "vllm:request_generation_tokens_count"
    ),
    # --enable-mfu-metrics: vLLM's estimates of one GPU's work (0 without the flag).
    "gpuwatch_engine_estimated_flops_total": _per_gpu("vllm:estimated_flops_per_gpu_total"),
    "gpuwatch_engine_estimated_read_bytes_total": _per_gpu(
        "vllm:estimated_read_bytes_per_gpu_total"
    ),
    "gpuwatch_engine_estimated_write_bytes_total": _per_gpu(
        "vllm:estimated_write_bytes_per_gpu_total"
    ),
}
FINISHED = ("gpuwatch_engine_requests_finished_total", "vllm:request_success_total")
HISTOGRAMS = {
    "gpuwatch_engine_ttft_seconds": "vllm:time_to_first_token_seconds",
    "gpuwatch_engine_inter_token_latency_seconds": "vllm:inter_token_latency_seconds",
    "gpuwatch_engine_e2e_latency_seconds": "vllm:e2e_request_latency_seconds",
    "gpuwatch_engine_queue_time_seconds": "vllm:request_queue_time_seconds",
}

Ours = dict[tuple[str, str], float]  # (metric, reason or le) -> value


def ours_of(samples: Iterable[tuple[str, Mapping[str, str], float]], model: str) -> Ours:
    """gpuwatch's samples of one model, keyed by metric and their one extra label."""
    out: Ours = {}
    for metric, labels, value in samples:
        if labels.get("model") != model:
            continue
        extra = labels.get("reason") or labels.get("le") or ""
        if "le" in labels:
            extra = repr(float(labels["le"]))
        out[(metric, extra)] = value
    return out


def expected(raw: Raw) -> Ours:
    """Every canonical sample the raw exposition calls for, and its value."""
    want: Ours = {}
    for canonical, src in GAUGES.items():
        pick = promtext.highest if src.combine == "max" else promtext.total
        _put(want, canonical, "", pick(raw, src.sample, **src.where))
    for canonical, src in COUNTERS.items():
        combine = _mean if src.combine == "mean" else promtext.total
        _put(want, canonical, "", combine(raw, src.sample, **src.where))
        created = canonical.removesuffix("_total") + "_created"
        if (canonical, "") in want:
            _put(want, created, "", promtext.highest(raw, src.created))
    canonical, sample = FINISHED
    for labels, value in promtext.rows(raw, sample):
        want[(canonical, labels["finished_reason"])] = value
        created = promtext.highest(raw, sample.removesuffix("_total") + "_created",
                                   finished_reason=labels["finished_reason"])  # fmt: skip
        _put(
            want, canonical.removesuffix("_total") + "_created", labels["finished_reason"], created
        )
    for canonical, base in HISTOGRAMS.items():
        for le, count in promtext.buckets(raw, base).items():
            want[(canonical + "_bucket", repr(le))] = count
        for suffix in ("_count", "_sum", "_created"):
            pick = promtext.highest if suffix == "_created" else promtext.total
            _put(want, canonical + suffix, "", pick(raw, base + suffix))
    return want


def _mean(raw: Raw, name: str, **where: str) -> float | None:
    values = [value for _labels, value in promtext.rows(raw, name, **where)]
    return sum(values) / len(values) if values else None


def _put(want: Ours, metric: str, extra: str, value: float | None) -> None:
    if value is not None:  # absent in the engine's output: absent in gpuwatch's, never zero
        want[(metric, extra)] = value


def mismatches(raw: Raw, ours: Ours) -> list[str]:
    """Each canonical sample that is missing, extra or different, one line each."""
    want = expected(raw)
    lines = [
        f"{m}{{{x}}}: gpuwatch {ours.get((m, x), 'absent')} != raw {v}"
        for (m, x), v in sorted(want.items())
        if ours.get((m, x)) != v
    ]
    lines += [f"{m}{{{x}}}: gpuwatch {v}, not in the raw exposition" for (m, x), v in
              sorted(ours.items()) if (m, x) not in want]  # fmt: skip
    return lines
