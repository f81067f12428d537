"""LMDeploy's api_server /metrics ("lmdeploy"), as ``lmdeploy/metrics/loggers.py``
(PrometheusStatLogger, 0.16) registers it: prometheus_client with created series off, every
series labelled ``model_name`` and ``engine`` (the DP rank; one api_server per rank serves only
its own, so this shows engine "0" with the traffic of every engine of the model).

From the requests (dropped streams included: LMDeploy cancels the session of a client that
went away, ``ResponseType.CANCEL``):
- the token counters count every request's prompt and generated tokens; the per-request token
  histograms (1-2-5 buckets up to the context length) observe every request too;
- ``request_success_total{finished_reason}`` has every ``ResponseType`` child from the start:
  stop and length are ``FINISH``, abort and dropped ``CANCEL``, engine errors
  ``INTERNAL_ENGINE_ERROR``;
- TTFT, inter-token gaps (``iter_token_latency``), e2e and queue time observe every request.
The speculative-decoding counters are registered and stay 0 (no drafting simulated).
"""

from __future__ import annotations

from collections.abc import Sequence

from agent.sim.expo import Family, Labels, Scalar, histogram, render_text
from agent.sim.traffic import Request, Snapshot
from agent.sim.vllm_spec import build_1_2_5_buckets

VERSIONS = ("lmdeploy",)

RESPONSE_TYPES = (
    "SUCCESS", "FINISH", "ENGINE_STOP_ERROR", "SESSION_REPEAT", "SESSION_NOT_EXIST",
    "HANDLER_NOT_EXIST", "INPUT_LENGTH_ERROR", "INTERNAL_ENGINE_ERROR", "CANCEL",
    "PREFIX_CACHE_CONFLICT", "NO_QUEUE", "NOT_SUPPORTED", "OUT_OF_MEMORY",
)  # fmt: skip
RESPONSE_OF = {"stop": "FINISH", "length": "FINISH", "abort": "CANCEL", "dropped": "CANCEL",
               "error": "INTERNAL_ENGINE_ERROR"}  # fmt: skip
TTFT = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
        10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)  # fmt: skip
ITL = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
       10.0, 20.0, 40.0, 80.0)  # fmt: skip
LATENCY = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
           120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)  # fmt: skip


def render(snap: Snapshot) -> str:
    out: dict[str, Family] = {}
    for model in snap.models:
        for f in _model_families(snap, model):
            old = out.get(f.name)  # a second model: its series join the first's
            series = f.series if old is None else old.series + f.series
            out[f.name] = Family(f.name, f.kind, f.help, series)
    return render_text(out.values())


def _model_families(snap: Snapshot, model: str) -> list[Family]:
    labels: Labels = (("engine", "0"), ("model_name", model))
    every = snap.select(model) + snap.dropped_of(model)
    gauges = [snap.gauges_of(model, e) for e in snap.engines]

    def scalar(name: str, kind: str, help_: str, value: float = 0.0) -> Family:
        return Family(name, kind, help_, (Scalar(labels, float(value)),))

    tokens = build_1_2_5_buckets(snap.max_model_len)  # as LMDeploy's, for its session length

    def hist(name: str, help_: str, bounds: Sequence[float], values: Sequence[float]) -> Family:
        return Family(name, "histogram", help_, (histogram(labels, bounds, values),))

    return [
        scalar("lmdeploy:num_requests_running", "gauge",
               "Number of requests in model execution batches.", sum(g.running for g in gauges)),
        scalar("lmdeploy:num_requests_waiting", "gauge",
               "Number of requests waiting to be processed.", sum(g.waiting for g in gauges)),
        scalar("lmdeploy:num_requests_succeeded", "gauge", "Number of current succeeded requests.",
               sum(1 for r in every if RESPONSE_OF[r.finish_reason] == "FINISH")),
        scalar("lmdeploy:num_requests_failed", "gauge", "Number of current failed requests.",
               sum(1 for r in every if RESPONSE_OF[r.finish_reason] != "FINISH")),
        scalar("lmdeploy:gpu_cache_usage_perc", "gauge",
               "GPU KV-cache usage. 1 means 100 percent usage.", max(g.kv_usage for g in gauges)),
        scalar("lmdeploy:prompt_tokens", "counter", "Number of prefill tokens processed.",
               sum(r.prompt_tokens for r in every)),
        scalar("lmdeploy:generation_tokens", "counter", "Number of generation tokens processed.",
               sum(r.generation_tokens for r in every)),
        scalar("lmdeploy:spec_decode_num_draft_tokens", "counter",
               "Number of speculative decoding draft tokens."),
        scalar("lmdeploy:spec_decode_num_accepted_tokens", "counter",
               "Number of speculative decoding accepted tokens."),
        _finished(every, labels),
        hist("lmdeploy:request_prompt_tokens", "Number of prefill tokens processed.", tokens,
             [float(r.prompt_tokens) for r in every]),
        hist("lmdeploy:request_generation_tokens", "Number of generation tokens processed.",
             tokens, [float(r.generation_tokens) for r in every]),
        hist("lmdeploy:time_to_first_token_seconds",
             "Histogram of time to first token in seconds.", TTFT, [r.ttft for r in every]),
        hist("lmdeploy:iter_token_latency", "Histogram of inter-token latency", ITL,
             [v for r in every for v in r.itls[: max(0, r.generation_tokens - 1)]]),
        hist("lmdeploy:e2e_request_latency_seconds",
             "Histogram of e2e request latency in seconds.", LATENCY,
             [r.e2e_latency for r in every]),
        hist("lmdeploy:request_queue_time_seconds",
             "Histogram of time spent in WAITING phase for request.", LATENCY,
             [r.queue_time for r in every]),
    ]  # fmt: skip


def _finished(every: Sequence[Request], labels: Labels) -> Family:
    counts = dict.fromkeys(RESPONSE_TYPES, 0)
    for r in every:
        counts[RESPONSE_OF[r.finish_reason]] += 1
    series = tuple(
        Scalar(labels + (("finished_reason", f"ResponseType.{t}"),), float(counts[t]))
        for t in RESPONSE_TYPES
    )
    return Family("lmdeploy:request_success", "counter",
                  "Count of successfully processed requests.", series)  # fmt: skip
