"""NVIDIA Dynamo's HTTP frontend /metrics ("dynamo"), as ``lib/llm/src/http/service/metrics.rs``
registers it (tests/fixtures/engines-real/dynamo says which commit).

The Rust ``prometheus`` crate writes it: families sorted by name, labels sorted, ``le`` last,
numbers as Rust prints an f64 (:func:`agent.sim.tgi.rust_float`), histogram lines ``_bucket``..,
``_sum``, ``_count``; a labelled family with no child yet is not printed. Buckets are
``generate_log_buckets`` with the frontend's defaults (:func:`log_buckets`). The frontend
lower-cases model names.

From the requests (all chat completions; streaming ones ``request_type="stream"``):
- ``requests_total{status}``: ``success`` for stop and length, ``error`` for the rest;
  ``disconnected_clients`` (unlabelled, only ever incremented) counts the clients that went
  away: abort and dropped;
- ``inflight_requests`` is running plus waiting, ``queued_requests`` the waiting;
- ``output_tokens_total`` every generated token; ``input_sequence_tokens``,
  ``output_sequence_tokens``, TTFT, inter-token gaps and ``request_duration_seconds`` observe
  every request, dropped ones too (the frontend observes the sequence lengths when a request's
  collector is dropped, however it ended).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from agent.sim.tgi import rust_float
from agent.sim.traffic import Request, Snapshot, cumulative_counts

VERSIONS = ("dynamo",)
SUCCESS = frozenset({"stop", "length"})
GONE = frozenset({"abort", "dropped"})
# add(family, kind, help, text): one family's lines, gathered per family across models.
_Add = Callable[[str, str, str, str], None]


def _sig2(value: float) -> float:
    magnitude = math.floor(math.log10(abs(value)))
    scale = 10.0 ** (1 - magnitude)
    return round(value * scale) / scale


def log_buckets(low: float, high: float, count: int) -> tuple[float, ...]:
    """``generate_log_buckets``: 0, then count - 1 log-spaced values rounded to 2 significant
    figures, duplicates removed."""
    out = [0.0]
    for i in range(1, count):
        value = _sig2(math.exp(math.log(low) + (math.log(high) - math.log(low)) * i / (count - 1)))
        if value != out[-1]:
            out.append(value)
    return tuple(out)


TTFT = log_buckets(0.001, 480.0, 18)
ITL = log_buckets(0.001, 2.0, 13)
DURATION = log_buckets(1.0, 256.0, 10)
ISL = log_buckets(50.0, 128000.0, 12)
OSL = log_buckets(50.0, 32000.0, 10)


def _labels(labels: Sequence[tuple[str, str]]) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in labels) + "}" if labels else ""


def _histogram(name: str, model: str, bounds: Sequence[float], values: Sequence[float]) -> str:
    m = ("model", model)
    counts = cumulative_counts(values, bounds)
    les = [rust_float(b) for b in bounds] + ["+Inf"]
    pairs = zip(les, counts, strict=True)
    lines = [f"{name}_bucket{_labels([m, ('le', le)])} {n}\n" for le, n in pairs]
    lines.append(f"{name}_sum{_labels([m])} {rust_float(sum(values, 0.0))}\n")
    lines.append(f"{name}_count{_labels([m])} {len(values)}\n")
    return "".join(lines)


def render(snap: Snapshot) -> str:
    fams: dict[str, tuple[str, str, list[str]]] = {}

    def add(name: str, kind: str, help_: str, text: str) -> None:
        fams.setdefault(name, (kind, help_, []))[2].append(text)

    gone = sum(1 for m in snap.models for r in _every(snap, m) if r.finish_reason in GONE)
    add("dynamo_frontend_disconnected_clients", "gauge", "Number of disconnected clients",
        f"dynamo_frontend_disconnected_clients {gone}\n")  # fmt: skip
    for model in snap.models:
        _model(snap, model, add)
    return "".join(
        f"# HELP {name} {help_}\n# TYPE {name} {kind}\n" + "".join(texts)
        for name, (kind, help_, texts) in sorted(fams.items())
    )


def _every(snap: Snapshot, model: str) -> tuple[Request, ...]:
    return snap.select(model) + snap.dropped_of(model)


def _model(snap: Snapshot, model: str, add: _Add) -> None:
    every = _every(snap, model)
    name = model.lower()
    m = [("model", name)]
    gauges = [snap.gauges_of(model, e) for e in snap.engines]
    waiting = sum(g.waiting for g in gauges)
    inflight = sum(g.running for g in gauges) + waiting
    add(
        "dynamo_frontend_inflight_requests",
        "gauge",
        "Number of inflight requests",
        f"dynamo_frontend_inflight_requests{_labels(m)} {inflight}\n",
    )
    add(
        "dynamo_frontend_queued_requests",
        "gauge",
        "Number of requests in HTTP processing queue",
        f"dynamo_frontend_queued_requests{_labels(m)} {waiting}\n",
    )
    if not every:  # the remaining families get a child with the first request
        return
    add(
        "dynamo_frontend_output_tokens_total",
        "counter",
        "Total number of output tokens generated (updates in real-time)",
        f"dynamo_frontend_output_tokens_total{_labels(m)} "
        f"{sum(r.generation_tokens for r in every)}\n",
    )
    add(
        "dynamo_frontend_requests_total",
        "counter",
        "Total number of LLM requests processed",
        "".join(_requests(name, every)),
    )
    for family, help_, bounds, values in (
        (
            "dynamo_frontend_time_to_first_token_seconds",
            "Time to first token in seconds",
            TTFT,
            [r.ttft for r in every],
        ),
        (
            "dynamo_frontend_inter_token_latency_seconds",
            "Inter-token latency in seconds",
            ITL,
            [v for r in every for v in r.itls[: max(0, r.generation_tokens - 1)]],
        ),
        (
            "dynamo_frontend_request_duration_seconds",
            "Duration of LLM requests",
            DURATION,
            [r.e2e_latency for r in every],
        ),
        (
            "dynamo_frontend_input_sequence_tokens",
            "Input sequence length in tokens",
            ISL,
            [float(r.prompt_tokens) for r in every],
        ),
        (
            "dynamo_frontend_output_sequence_tokens",
            "Output sequence length in tokens",
            OSL,
            [float(r.generation_tokens) for r in every],
        ),
    ):
        add(family, "histogram", help_, _histogram(family, name, bounds, values))


def _requests(model: str, every: Sequence[Request]) -> list[str]:
    counts: dict[tuple[str, str], int] = {}
    for r in every:
        status = "success" if r.finish_reason in SUCCESS else "error"
        key = ("stream" if r.streaming else "unary", status)
        counts[key] = counts.get(key, 0) + 1
    return [
        "dynamo_frontend_requests_total"
        + _labels([("endpoint", "chat_completions"), ("model", model), ("request_type", kind),
                   ("status", status)])
        + f" {n}\n"
        for (kind, status), n in sorted(counts.items())
    ]  # fmt: skip
