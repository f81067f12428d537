"""LMDeploy's api_server (``lmdeploy:*``, 0.9.2+ with metrics on) to the canonical engine signals.

Names and labels from ``lmdeploy/metrics/loggers.py`` (PrometheusStatLogger): every series has
``model_name`` and ``engine`` (the DP rank; with DP > 1 each rank's api_server serves its own
/metrics), and the registry disables ``_created`` series, so restarts show as decreases.
Versions (first tag holding the change): 0.9.2 (#3534) brought the families; 0.10.0 (#3811,
Turbomind metrics) added ``iter_token_latency``; 0.12.3 (#4410) renamed the
finished/unfinished gauges to succeeded/failed (not read either way); 0.14.0 added the
speculative-decoding counters (#4625) and ``cached_tokens_total`` (#4670, counted when a
request finishes, while ``prompt_tokens_total`` moves at its first step: their difference is
not read as computed tokens).

``request_success_total`` counts every finished request by ``finished_reason``, the string of
LMDeploy's ``ResponseType``: ``ResponseType.FINISH`` (and ``SUCCESS``) completed, ``CANCEL``
abandoned ("abort"), every other value an error. Its per-request histograms
(``request_generation_tokens`` ...) observe cancelled requests too, so they cannot tell useful
from abandoned tokens: not mapped as ``completed_*``. The inter-token histogram is
``iter_token_latency`` (seconds, despite the name); queue time is ``request_queue_time_seconds``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

from collectors.base import Sample
from collectors.engines.exposition import Exposition
from collectors.engines.rules import Agg, Context, Counter, Gauge, Histogram, Mapper

NAME = "lmdeploy"

FINISHED = "lmdeploy:request_success_total"
COMPLETED = frozenset({"ResponseType.FINISH", "ResponseType.SUCCESS"})
CANCELLED = "ResponseType.CANCEL"

RULES = (
    Gauge("gpuwatch_engine_requests_running", ("lmdeploy:num_requests_running",)),
    Gauge("gpuwatch_engine_requests_waiting", ("lmdeploy:num_requests_waiting",)),
    Gauge("gpuwatch_engine_kv_cache_usage_ratio", ("lmdeploy:gpu_cache_usage_perc",), agg=Agg.MAX),
    Counter("gpuwatch_engine_prompt_tokens_total", ("lmdeploy:prompt_tokens_total",)),
    Counter("gpuwatch_engine_generation_tokens_total", ("lmdeploy:generation_tokens_total",)),
    Counter(
        "gpuwatch_engine_spec_decode_draft_tokens_total",
        ("lmdeploy:spec_decode_num_draft_tokens_total",),
    ),
    Counter(
        "gpuwatch_engine_spec_decode_accepted_tokens_total",
        ("lmdeploy:spec_decode_num_accepted_tokens_total",),
    ),
    Histogram("gpuwatch_engine_ttft_seconds", ("lmdeploy:time_to_first_token_seconds",)),
    Histogram("gpuwatch_engine_inter_token_latency_seconds", ("lmdeploy:iter_token_latency",)),
    Histogram("gpuwatch_engine_e2e_latency_seconds", ("lmdeploy:e2e_request_latency_seconds",)),
    Histogram("gpuwatch_engine_queue_time_seconds", ("lmdeploy:request_queue_time_seconds",)),
)

# Every series map_samples reads (the scrape keeps only these families of a body).
READS = tuple(src for rule in RULES for src in rule.sources) + (FINISHED,)


def detect(exposition: Exposition) -> bool:
    return any(name.startswith("lmdeploy:") for name in exposition.names())


def map_samples(exposition: Exposition, context: Context) -> list[Sample]:
    def model_of(labels: Mapping[str, str]) -> str:
        return labels.get("model_name") or context.model

    mapper = Mapper(exposition, context, model_of)
    mapper.apply_all(RULES)
    _finished(mapper)
    return mapper.samples


def reason_of(finished_reason: str) -> str:
    """The canonical reason of one of LMDeploy's ``ResponseType`` strings."""
    if finished_reason in COMPLETED:
        return "completed"
    return "abort" if finished_reason == CANCELLED else "error"


def _finished(mapper: Mapper) -> None:
    totals: dict[tuple[str, str], float] = defaultdict(float)
    for labels, value in mapper.rows(FINISHED):
        key = (mapper.model_of(labels), reason_of(labels.get("finished_reason", "")))
        totals[key] += value
    for (model, reason), value in totals.items():
        mapper.emit("gpuwatch_engine_requests_finished_total", value, model, {"reason": reason})
