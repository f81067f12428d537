"""Hugging Face TGI (v3) to the canonical engine signals.

TGI labels no series with a model (the target's configured model names it), has no
time-to-first-token histogram (left absent, not approximated), and gives token totals only as
the ``_sum`` of its per-request histograms. Its counters carry no ``_total`` in the exposition;
the parser adds it. The inter-token latency is TGI's per-request mean time per token.
"""

from __future__ import annotations

from collections.abc import Mapping

from collectors.base import Sample
from collectors.engines.exposition import Exposition
from collectors.engines.rules import Context, Counter, Gauge, Histogram, Mapper

NAME = "tgi"

RULES = (
    Gauge("gpuwatch_engine_requests_running", ("tgi_batch_current_size",)),
    Gauge("gpuwatch_engine_requests_waiting", ("tgi_queue_size",)),
    Counter("gpuwatch_engine_prompt_tokens_total", ("tgi_request_input_length_sum",)),
    Counter("gpuwatch_engine_generation_tokens_total", ("tgi_request_generated_tokens_sum",)),
    Counter(
        "gpuwatch_engine_requests_finished_total",
        ("tgi_request_success_total",),
        labels={"reason": "completed"},
    ),
    Counter(
        "gpuwatch_engine_requests_finished_total",
        ("tgi_request_failure_total",),
        labels={"reason": "error"},
    ),
    Histogram(
        "gpuwatch_engine_inter_token_latency_seconds", ("tgi_request_mean_time_per_token_duration",)
    ),
    Histogram("gpuwatch_engine_e2e_latency_seconds", ("tgi_request_duration",)),
    Histogram("gpuwatch_engine_queue_time_seconds", ("tgi_request_queue_duration",)),
)

# Every series map_samples reads (the scrape keeps only these families of a body).
READS = tuple(src for rule in RULES for src in rule.sources)


def detect(exposition: Exposition) -> bool:
    return any(name.startswith("tgi_") for name in exposition.names())


def map_samples(exposition: Exposition, context: Context) -> list[Sample]:
    def model_of(_labels: Mapping[str, str]) -> str:
        return context.model

    return Mapper(exposition, context, model_of).apply_all(RULES)
