"""NVIDIA NIM for LLMs' ``/v1/metrics`` ("nim"), as the Datadog test capture of
``meta/llama-3.1-8b-instruct`` shows it (tests/fixtures/engines-real/nim).

prometheus_client, created series off: vLLM V0's families without the ``vllm:`` prefix,
labelled ``model_name`` only (summed over engines), in the capture's order and with its buckets.
From the requests:
- the token counters count every request's tokens, streams a client dropped included (as
  vLLM's do); the per-request histograms, ``request_finish_total{finished_reason}`` (reasons as
  they occur) and the latency histograms see finished requests only;
- ``time_per_output_token_seconds`` observes every inter-token gap (169 gaps for 174 tokens of
  5 requests in the capture); ``request_success_total`` counts stop and length,
  ``request_failure_total`` engine errors.
No queue-time histogram (the capture has none).
"""

from __future__ import annotations

from collections.abc import Sequence

from agent.sim.expo import Family, Labels, Scalar, histogram, render_text
from agent.sim.traffic import Request, Snapshot

VERSIONS = ("nim",)
MAX_REQUESTS = 64.0

TTFT = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
        10.0)  # fmt: skip
TPOT = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)
E2E = (1.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0)
TOKENS = (1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0,
          10000.0, 20000.0, 50000.0, 100000.0)  # fmt: skip


def render(snap: Snapshot) -> str:
    return render_text(families(snap))


def families(snap: Snapshot) -> list[Family]:
    out: dict[str, Family] = {}
    for model in snap.models:
        for f in _model_families(snap, model):
            old = out.get(f.name)  # a second model: its series join the first's
            series = f.series if old is None else old.series + f.series
            out[f.name] = Family(f.name, f.kind, f.help, series)
    return list(out.values())


def _model_families(snap: Snapshot, model: str) -> list[Family]:
    labels: Labels = (("model_name", model),)
    done = snap.select(model)
    every = done + snap.dropped_of(model)
    gauges = [snap.gauges_of(model, e) for e in snap.engines]

    def scalar(name: str, kind: str, help_: str, value: float) -> Family:
        return Family(name, kind, help_, (Scalar(labels, float(value)),))

    def hist(name: str, help_: str, bounds: Sequence[float], values: Sequence[float]) -> Family:
        return Family(name, "histogram", help_, (histogram(labels, bounds, values),))

    reasons = _reasons(done)
    return [
        scalar("num_requests_running", "gauge", "Number of requests currently running on GPU.",
               sum(g.running for g in gauges)),
        scalar("num_requests_waiting", "gauge", "Number of requests waiting to be processed.",
               sum(g.waiting for g in gauges)),
        scalar("num_request_max", "gauge", "Max number of concurrently running requests.",
               MAX_REQUESTS),
        scalar("gpu_cache_usage_perc", "gauge", "GPU KV-cache usage. 1 means 100 percent usage.",
               max(g.kv_usage for g in gauges)),
        scalar("prompt_tokens", "counter", "Number of prefill tokens processed.",
               sum(r.prompt_tokens for r in every)),
        scalar("generation_tokens", "counter", "Number of generation tokens processed.",
               sum(r.generation_tokens for r in every)),
        hist("time_to_first_token_seconds", "Histogram of time to first token in seconds.",
             TTFT, [r.ttft for r in done]),
        hist("time_per_output_token_seconds", "Histogram of time per output token in seconds.",
             TPOT, [v for r in done for v in r.itls]),
        hist("e2e_request_latency_seconds",
             "Histogram of end to end request latency in seconds.",
             E2E, [r.e2e_latency for r in done]),
        hist("request_prompt_tokens", "Number of prefill tokens processed.", TOKENS,
             [float(r.prompt_tokens) for r in done]),
        hist("request_generation_tokens", "Number of generation tokens processed.", TOKENS,
             [float(r.generation_tokens) for r in done]),
        Family("request_finish", "counter",
               "Count of finished requests, differentiated by finish reason as label.",
               tuple(Scalar((("finished_reason", k),) + labels, float(n))
                     for k, n in reasons)),
        scalar("request_success", "counter", "Count of successful requests.",
               sum(1 for r in done if r.successful)),
        scalar("request_failure", "counter", "Count of failed requests.",
               sum(1 for r in done if r.finish_reason == "error")),
    ]  # fmt: skip


def _reasons(done: Sequence[Request]) -> list[tuple[str, int]]:
    """(finished_reason, count), first seen first: vLLM V0 creates each child lazily."""
    seen: dict[str, int] = {}
    for r in done:
        seen[r.finish_reason] = seen.get(r.finish_reason, 0) + 1
    return list(seen.items())
