"""NVIDIA Dynamo's HTTP frontend (``dynamo_frontend_*``) to the canonical engine signals.

Names, labels and meanings from ``lib/llm/src/http/service/metrics.rs`` (and
``lib/runtime/src/metrics/prometheus_names.rs``): per-model series carry ``model`` (the name
lower-cased by the frontend). The frontend sees requests, not the engines behind it, so:
- ``inflight_requests`` counts a request from the HTTP handler to its last token, and
  ``queued_requests`` the part of that before its first token (queue and prefill): waiting is
  the queued, running the in-flight less the queued.
- ``output_tokens_total`` counts every output token as it streams (abandoned streams too): the
  generated tokens. ``input_sequence_tokens`` observes each request's prompt at its first
  token, so its ``_sum`` is the prompt tokens of every request that got one.
- ``output_sequence_tokens`` is observed when a request's collector is dropped, whether the
  request completed or its client went away: it cannot tell useful from abandoned output, so it
  is not mapped as ``completed_*`` (abandoned tokens stay unknown, never 0).
- ``requests_total{status}`` counts a request when it ends: ``success``, or ``error`` for any
  request that did not finish (a client that disconnected included). Builds that label
  ``error_type`` say which errors were cancellations (``cancelled``): those are "abort".
  Builds without it have ``disconnected_clients``, a gauge only ever incremented (a count since
  the frontend started, unlabelled): it becomes the "abort" count, attributed to the body's one
  model (the target's model where the body has several), and the errors less it the "error"
  count. So disconnected clients and cancellations are abandoned work, counted once.
- TTFT, inter-token latency and request duration (end to end, failed requests included) are
  histograms in seconds. There is no queue-time histogram and no KV usage at the frontend
  (workers export ``dynamo_component_*``; not read).
``DYN_METRICS_PREFIX`` renames the prefix (a NIM compatibility switch, marked for removal);
a renamed frontend is not recognised.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

from collectors.base import Sample
from collectors.engines.exposition import Exposition
from collectors.engines.rules import Context, Counter, Gauge, Histogram, Mapper

NAME = "dynamo"

PREFIX = "dynamo_frontend_"
INFLIGHT = "dynamo_frontend_inflight_requests"
QUEUED = "dynamo_frontend_queued_requests"
REQUESTS = "dynamo_frontend_requests_total"
DISCONNECTED = "dynamo_frontend_disconnected_clients"
FINISHED = "gpuwatch_engine_requests_finished_total"

RULES = (
    Gauge("gpuwatch_engine_requests_waiting", (QUEUED,)),
    Counter("gpuwatch_engine_generation_tokens_total", ("dynamo_frontend_output_tokens_total",)),
    Counter("gpuwatch_engine_prompt_tokens_total", ("dynamo_frontend_input_sequence_tokens_sum",)),
    Counter(FINISHED, (REQUESTS,), where={"status": "success"}, labels={"reason": "completed"}),
    Histogram("gpuwatch_engine_ttft_seconds", ("dynamo_frontend_time_to_first_token_seconds",)),
    Histogram(
        "gpuwatch_engine_inter_token_latency_seconds",
        ("dynamo_frontend_inter_token_latency_seconds",),
    ),
    Histogram("gpuwatch_engine_e2e_latency_seconds", ("dynamo_frontend_request_duration_seconds",)),
)

# Every series map_samples reads (the scrape keeps only these families of a body).
READS = tuple(src for rule in RULES for src in rule.sources) + (INFLIGHT, DISCONNECTED)


def detect(exposition: Exposition) -> bool:
    return any(name.startswith(PREFIX) for name in exposition.names())


def map_samples(exposition: Exposition, context: Context) -> list[Sample]:
    def model_of(labels: Mapping[str, str]) -> str:
        return labels.get("model") or context.model

    mapper = Mapper(exposition, context, model_of)
    mapper.apply_all(RULES)
    _running(mapper)
    _unfinished(mapper)
    return mapper.samples


def _running(mapper: Mapper) -> None:
    inflight = mapper.counter_value((INFLIGHT,))
    queued = mapper.counter_value((QUEUED,))
    for model, value in inflight.items():
        if model in queued:  # both move together; without the queue, running is not known
            mapper.emit("gpuwatch_engine_requests_running", value - queued[model], model)


def _unfinished(mapper: Mapper) -> None:
    """The error rows of requests_total as "abort" and "error" (see the module's docstring)."""
    errors = mapper.rows(REQUESTS, {"status": "error"})
    if any("error_type" in labels for labels, _ in errors):
        by_reason: dict[tuple[str, str], float] = defaultdict(float)
        for labels, value in errors:
            reason = "abort" if labels.get("error_type") == "cancelled" else "error"
            by_reason[(mapper.model_of(labels), reason)] += value
        for (model, reason), value in by_reason.items():
            mapper.emit(FINISHED, value, model, {"reason": reason})
        return
    error_total: dict[str, float] = defaultdict(float)
    for labels, value in errors:
        error_total[mapper.model_of(labels)] += value
    for model, value in _disconnected(mapper).items():
        mapper.emit(FINISHED, value, model, {"reason": "abort"})
        # A disconnect ends as an error too: counted once, as abandoned. Read in one body,
        # the two differ by no more than requests ending meanwhile; never below zero.
        if model in error_total:
            error_total[model] = max(0.0, error_total[model] - value)
    for model, value in error_total.items():
        mapper.emit(FINISHED, value, model, {"reason": "error"})


def _disconnected(mapper: Mapper) -> dict[str, float]:
    """Disconnected clients per model: the frontend's gauge has no labels (the body's one
    model, else the target's), a relabelled one a ``model``."""
    out: dict[str, float] = defaultdict(float)
    for labels, value in mapper.rows(DISCONNECTED):
        model = labels.get("model") or _one_model(mapper) or mapper.context.model
        out[model] += value
    return dict(out)


def _one_model(mapper: Mapper) -> str | None:
    models = {mapper.model_of(labels) for labels, _ in mapper.rows(REQUESTS)}
    models |= {mapper.model_of(labels) for labels, _ in mapper.rows(INFLIGHT)}
    return models.pop() if len(models) == 1 else None
