"""Triton Inference Server with the TensorRT-LLM backend ("triton-trtllm"), 24.x+ with
``--metrics-config histogram_latencies=true``, as its captures show it
(tests/fixtures/engines-real/triton).

prometheus-cpp writes it: ``# HELP`` and ``# TYPE``, labels sorted by name (``le`` last),
numbers in their shortest form (``3``, ``0.25``), a histogram's ``_count`` and ``_sum`` before
its buckets.
Every served model is a Triton model of ``version="1"``, all of its engines summed.

From the requests (a dropped stream is a cancelled request to Triton):
- ``nv_inference_request_success``: stop and length; ``nv_inference_request_failure{reason}``:
  CANCELED (abort and dropped), BACKEND (engine errors), OTHER and REJECTED 0;
- ``nv_inference_{request,queue,compute_infer}_duration_us``: the summed e2e, queue and
  inference times in whole microseconds (cumulative counters, as Triton's);
- ``nv_inference_first_response_histogram_ms``: TTFT in milliseconds, Triton's default buckets;
- ``nv_inference_pending_request_count``: the waiting gauge; TensorRT-LLM's
  ``nv_trt_llm_request_metrics``: scheduled (running), waiting, active, max;
  ``nv_trt_llm_kv_cache_block_metrics``: the KV usage as used, free and max blocks and their
  fraction.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from agent.sim.tgi import rust_float
from agent.sim.traffic import Request, Snapshot, cumulative_counts

VERSIONS = ("triton-trtllm",)
FIRST_RESPONSE_MS = (100.0, 500.0, 2000.0, 5000.0)
MAX_BLOCKS = 6239
MAX_REQUESTS = 512
Labels = Sequence[tuple[str, str]]


def _labels(labels: Labels) -> str:
    """Sorted by name, a bucket's ``le`` last (prometheus-cpp adds it after the metric's)."""
    ordered = sorted(labels, key=lambda kv: (kv[0] == "le", kv[0]))
    return "{" + ",".join(f'{k}="{v}"' for k, v in ordered) + "}"


def _family(name: str, kind: str, help_: str, lines: Sequence[str]) -> str:
    return f"# HELP {name} {help_}\n# TYPE {name} {kind}\n" + "".join(lines)


def _us(seconds: float) -> str:
    return str(round(seconds * 1_000_000))


def render(snap: Snapshot) -> str:
    per_model = [(m, snap.select(m) + snap.dropped_of(m)) for m in snap.models]

    def rows(name: str, value_of: Callable[[str, Sequence[Request]], object]) -> list[str]:
        return [f"{name}{_labels([('model', m), ('version', '1')])} {value_of(m, rs)}\n"
                for m, rs in per_model]  # fmt: skip

    out = [
        _family("nv_inference_request_success", "counter",
                "Number of successful inference requests, all batch sizes",
                rows("nv_inference_request_success",
                     lambda m, rs: sum(1 for r in rs if r.successful))),
        _family("nv_inference_request_failure", "counter",
                "Number of failed inference requests, all batch sizes", _failures(per_model)),
        _family("nv_inference_request_duration_us", "counter",
                "Cumulative inference request duration in microseconds (includes cached requests)",
                rows("nv_inference_request_duration_us",
                     lambda m, rs: _us(sum(r.e2e_latency for r in rs)))),
        _family("nv_inference_queue_duration_us", "counter",
                "Cumulative inference queuing duration in microseconds (includes cached requests)",
                rows("nv_inference_queue_duration_us",
                     lambda m, rs: _us(sum(r.queue_time for r in rs)))),
        _family("nv_inference_compute_infer_duration_us", "counter",
                "Cumulative compute inference duration in microseconds (does not include cached"
                " requests)",
                rows("nv_inference_compute_infer_duration_us",
                     lambda m, rs: _us(sum(r.inference_time for r in rs)))),
        _family("nv_inference_pending_request_count", "gauge",
                "Instantaneous number of pending requests awaiting execution per-model.",
                rows("nv_inference_pending_request_count",
                     lambda m, rs: sum(snap.gauges_of(m, e).waiting for e in snap.engines))),
        _family("nv_inference_first_response_histogram_ms", "histogram",
                "Duration from request to first response in milliseconds",
                [line for m, rs in per_model for line in _first_response(m, rs)]),
        _family("nv_trt_llm_request_metrics", "gauge", "TRT LLM request metrics",
                [line for m in snap.models for line in _requests(snap, m)]),
        _family("nv_trt_llm_kv_cache_block_metrics", "gauge", "TRT LLM KV cache block metrics",
                [line for m in snap.models for line in _kv_blocks(snap, m)]),
    ]  # fmt: skip
    return "".join(out)


def _failures(per_model: Sequence[tuple[str, Sequence[Request]]]) -> list[str]:
    lines = []
    for model, rs in per_model:
        canceled = sum(1 for r in rs if r.finish_reason in ("abort", "dropped"))
        backend = sum(1 for r in rs if r.finish_reason == "error")
        for reason, n in (("OTHER", 0), ("BACKEND", backend), ("CANCELED", canceled),
                          ("REJECTED", 0)):  # fmt: skip
            labels = _labels([("model", model), ("reason", reason), ("version", "1")])
            lines.append(f"nv_inference_request_failure{labels} {n}\n")
    return lines


def _first_response(model: str, rs: Sequence[Request]) -> list[str]:
    name = "nv_inference_first_response_histogram_ms"
    ms = [r.ttft * 1000 for r in rs]
    base = [("model", model), ("version", "1")]
    counts = cumulative_counts(ms, FIRST_RESPONSE_MS)
    les = [rust_float(b) for b in FIRST_RESPONSE_MS] + ["+Inf"]
    return [
        f"{name}_count{_labels(base)} {len(ms)}\n",
        f"{name}_sum{_labels(base)} {rust_float(sum(ms, 0.0))}\n",
        *(f"{name}_bucket{_labels([*base, ('le', le)])} {n}\n"
          for le, n in zip(les, counts, strict=True)),
    ]  # fmt: skip


def _requests(snap: Snapshot, model: str) -> list[str]:
    gauges = [snap.gauges_of(model, e) for e in snap.engines]
    running, waiting = sum(g.running for g in gauges), sum(g.waiting for g in gauges)
    values = (("context", 0), ("scheduled", running), ("max", MAX_REQUESTS),
              ("active", running + waiting), ("waiting", waiting))  # fmt: skip
    return [
        f"nv_trt_llm_request_metrics"
        f"{_labels([('model', model), ('request_type', t), ('version', '1')])} {n}\n"
        for t, n in values
    ]


def _kv_blocks(snap: Snapshot, model: str) -> list[str]:
    kv = max(snap.gauges_of(model, e).kv_usage for e in snap.engines)
    used = round(kv * MAX_BLOCKS)
    values = (
        ("fraction", rust_float(used / MAX_BLOCKS)), ("tokens_per", "64"), ("used", str(used)),
        ("free", str(MAX_BLOCKS - used)), ("max", str(MAX_BLOCKS)),
    )  # fmt: skip
    return [
        f"nv_trt_llm_kv_cache_block_metrics"
        f"{_labels([('kv_cache_block_type', t), ('model', model), ('version', '1')])} {v}\n"
        for t, v in values
    ]
