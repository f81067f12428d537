"""Hugging Face TGI 3.x's /metrics ("tgi-3"), following engine-metrics.md §3.

TGI renders through the Rust crate metrics-exporter-prometheus 0.15, which writes:
- no HELP lines (TGI describes none of its metrics), a ``# TYPE`` line, the samples, and a
  blank line after each family; counters first, then gauges, then histograms (here sorted by
  name within each group);
- counters under their own name, without ``_total`` (``tgi_request_count 3``), as integers;
- gauges, ``le`` bounds and ``_sum`` as Rust's ``Display`` of an f64: the shortest digits that
  round-trip (Python's repr), never an exponent, no ``.0`` on whole numbers (:func:`rust_float`);
- histogram lines ``_bucket``.. (``le="+Inf"`` last), ``_sum``, ``_count``.

So ``le="0.00015000000000000001"``: the duration buckets are TGI's ``value *= 1.5`` loop from
0.0001, 35 times (:data:`DURATION_BUCKETS`), printed with all their float noise. The length
buckets are ``max / 100 * (x + 1)`` for x in 0..99 (max_input_tokens = max_model_len - 1,
max_total_tokens = max_model_len).

No label carries the model: the renderer shows one model (the first, unless told), summed over
engines. What the simulated router records (there is no TTFT histogram in TGI):
- ``tgi_request_count``: every request; ``tgi_request_input_length`` and
  ``tgi_request_max_new_tokens`` too (observed at validation);
- ``tgi_request_success`` and the other request histograms: successful requests (stop,
  length) only; ``tgi_request_mean_time_per_token_duration`` only those with 2+ tokens;
  ``tgi_request_validation_duration`` observes a fixed :data:`VALIDATION_SECONDS`;
- ``tgi_request_failure{err="generation"}``: engine errors. A client abort is a dropped
  stream: neither success nor failure;
- ``tgi_batch_forward_duration{method}``: every prefill (prefill time) and decode step (ITL).
Series appear with their first event, except the gauges, which are there from startup.
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal

from agent.sim.traffic import Request, Snapshot, cumulative_counts

VERSIONS = ("tgi-3",)
VALIDATION_SECONDS = 0.0004
MAX_BATCH_TOTAL_TOKENS = 262144


def _duration_buckets() -> tuple[float, ...]:
    out: list[float] = []
    value = 0.0001
    for _ in range(35):
        value *= 1.5
        out.append(value)
    return tuple(out)


DURATION_BUCKETS = _duration_buckets()


def linear_buckets(max_tokens: int) -> tuple[float, ...]:
    return tuple((max_tokens / 100.0) * (x + 1) for x in range(100))


def rust_float(value: float) -> str:
    """Rust's ``Display`` for f64: shortest round-trip digits, positional, no trailing .0."""
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "inf" if value > 0 else "-inf"
    text = format(Decimal(repr(float(value))), "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def _labels(labels: Sequence[tuple[str, str]]) -> str:
    # Insertion order, as the macro call gives them; no sorting.
    return "{" + ",".join(f'{k}="{v}"' for k, v in labels) + "}" if labels else ""


def _family(name: str, kind: str, lines: Sequence[str]) -> str:
    return f"# TYPE {name} {kind}\n" + "".join(lines) + "\n"


def _histogram_lines(
    name: str, labels: Sequence[tuple[str, str]], bounds: Sequence[float], values: Sequence[float]
) -> list[str]:
    counts = cumulative_counts(values, bounds)
    les = [rust_float(b) for b in bounds] + ["+Inf"]
    lines = [
        f"{name}_bucket{_labels([*labels, ('le', le)])} {n}\n"
        for le, n in zip(les, counts, strict=True)
    ]
    lines.append(f"{name}_sum{_labels(labels)} {rust_float(sum(values, 0.0))}\n")
    lines.append(f"{name}_count{_labels(labels)} {len(values)}\n")
    return lines


def render(snap: Snapshot, model: str | None = None) -> str:
    name = snap.models[0] if model is None else model
    reqs = snap.select(name)
    return (
        _counters(reqs)
        + _gauges(snap, name)
        + (_histograms(reqs, snap.max_model_len) if reqs else "")
    )


def _scalar_family(name: str, kind: str, value: str) -> str:
    return _family(name, kind, [f"{name} {value}\n"])


def _counters(reqs: Sequence[Request]) -> str:
    if not reqs:
        return ""
    steps = (("prefill", len(reqs)), ("decode", sum(r.generation_tokens - 1 for r in reqs)))
    out = [
        _family(name, "counter", [f'{name}{{method="{m}"}} {n}\n' for m, n in steps])
        for name in ("tgi_batch_inference_count", "tgi_batch_inference_success")
    ]
    out.append(_scalar_family("tgi_request_count", "counter", str(len(reqs))))
    if errors := sum(1 for r in reqs if r.finish_reason == "error"):
        line = f'tgi_request_failure{{err="generation"}} {errors}\n'
        out.append(_family("tgi_request_failure", "counter", [line]))
    if successes := sum(1 for r in reqs if r.successful):
        out.append(_scalar_family("tgi_request_success", "counter", str(successes)))
    return "".join(out)


def _gauges(snap: Snapshot, model: str) -> str:
    gauges = [snap.gauges_of(model, e) for e in snap.engines]
    kv = sum(g.kv_usage for g in gauges) / len(gauges)
    values = (
        ("tgi_batch_current_max_tokens", round(kv * MAX_BATCH_TOTAL_TOKENS)),
        ("tgi_batch_current_size", sum(g.running for g in gauges)),
        ("tgi_batch_max_total_tokens", MAX_BATCH_TOTAL_TOKENS),
        ("tgi_queue_size", sum(g.waiting for g in gauges)),
    )
    return "".join(_scalar_family(n, "gauge", rust_float(v)) for n, v in values)


def _histograms(reqs: Sequence[Request], max_model_len: int) -> str:
    ok = [r for r in reqs if r.successful]
    inputs = linear_buckets(max_model_len - 1)
    totals = linear_buckets(max_model_len)
    d = DURATION_BUCKETS
    # (name, labels, bounds, values); a family with no values has not been touched yet.
    series: list[tuple[str, list[tuple[str, str]], tuple[float, ...], list[float]]] = [
        ("tgi_batch_forward_duration", [("method", "prefill")], d, [r.prefill_time for r in reqs]),
        (
            "tgi_batch_forward_duration",
            [("method", "decode")],
            d,
            [v for r in reqs for v in r.itls],
        ),
        ("tgi_request_duration", [], d, [r.e2e_latency for r in ok]),
        ("tgi_request_generated_tokens", [], totals, [float(r.generation_tokens) for r in ok]),
        ("tgi_request_inference_duration", [], d, [r.inference_time for r in ok]),
        ("tgi_request_input_length", [], inputs, [float(r.prompt_tokens) for r in reqs]),
        ("tgi_request_max_new_tokens", [], totals, [float(r.max_tokens) for r in reqs]),
        (
            "tgi_request_mean_time_per_token_duration",
            [],
            d,
            [r.tpot for r in ok if r.tpot is not None],
        ),
        ("tgi_request_queue_duration", [], d, [r.queue_time for r in ok]),
        ("tgi_request_validation_duration", [], d, [VALIDATION_SECONDS] * len(ok)),
    ]
    lines: dict[str, list[str]] = {}
    for name, labels, bounds, values in series:
        if values:
            lines.setdefault(name, []).extend(_histogram_lines(name, labels, bounds, values))
    return "".join(_family(name, "histogram", ls) for name, ls in lines.items())
