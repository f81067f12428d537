"""SGLang (0.5, ``--enable-metrics``) to the canonical engine signals.

SGLang serves a multiprocess registry: no ``_created`` series, and gauges without a
multiprocess mode carry a ``pid`` label (summed or maxed away like any other label). When the
``priority`` label is present, the row with ``priority=""`` holds the totals; the others are a
breakdown of it and are skipped so nothing is counted twice.
"""

from __future__ import annotations

from collections.abc import Mapping

from collectors.base import Sample
from collectors.engines.exposition import Exposition
from collectors.engines.rules import Agg, Context, Counter, Gauge, Histogram, Mapper

NAME = "sglang"

RULES = (
    Gauge("gpuwatch_engine_requests_running", ("sglang:num_running_reqs",)),
    Gauge("gpuwatch_engine_requests_waiting", ("sglang:num_queue_reqs",)),
    Gauge("gpuwatch_engine_kv_cache_usage_ratio", ("sglang:token_usage",), agg=Agg.MAX),
    Counter("gpuwatch_engine_prompt_tokens_total", ("sglang:prompt_tokens_total",)),
    Counter("gpuwatch_engine_generation_tokens_total", ("sglang:generation_tokens_total",)),
    Counter(
        "gpuwatch_engine_requests_finished_total",
        ("sglang:num_aborted_requests_total",),
        labels={"reason": "abort"},
    ),
    Histogram("gpuwatch_engine_ttft_seconds", ("sglang:time_to_first_token_seconds",)),
    Histogram(
        "gpuwatch_engine_inter_token_latency_seconds", ("sglang:inter_token_latency_seconds",)
    ),
    Histogram("gpuwatch_engine_e2e_latency_seconds", ("sglang:e2e_request_latency_seconds",)),
    Histogram("gpuwatch_engine_queue_time_seconds", ("sglang:queue_time_seconds",)),
)


def detect(exposition: Exposition) -> bool:
    return any(name.startswith("sglang:") for name in exposition.names())


def map_samples(exposition: Exposition, context: Context) -> list[Sample]:
    def model_of(labels: Mapping[str, str]) -> str:
        # Builds of 2024 called the label "name".
        return labels.get("model_name") or labels.get("name") or context.model

    mapper = Mapper(exposition, context, model_of, keep=_totals_only)
    mapper.apply_all(RULES)
    _derived(mapper)
    return mapper.samples


def _totals_only(labels: Mapping[str, str]) -> bool:
    return labels.get("priority", "") == ""


PROMPT = "sglang:prompt_tokens_total"
CACHED = "sglang:cached_tokens_total"
REQUESTS = "sglang:num_requests_total"
ABORTED = "sglang:num_aborted_requests_total"
# Every series map_samples reads (the scrape keeps only these families of a body).
READS = tuple(src for rule in RULES for src in rule.sources) + (PROMPT, CACHED, REQUESTS, ABORTED)


def _derived(mapper: Mapper) -> None:
    """Counters SGLang gives only as differences: computed prompt tokens, completed requests."""
    prompt = mapper.counter_value((PROMPT,))
    cached = mapper.counter_value((CACHED,))
    for model, value in prompt.items():
        if model in cached:  # both move together, when a request finishes
            mapper.emit(
                "gpuwatch_engine_prompt_tokens_computed_total", value - cached[model], model
            )
    total = mapper.counter_value((REQUESTS,))
    aborted = mapper.counter_value((ABORTED,))
    for model, value in total.items():
        completed = value - aborted.get(model, 0.0)
        mapper.emit(
            "gpuwatch_engine_requests_finished_total", completed, model, {"reason": "completed"}
        )
