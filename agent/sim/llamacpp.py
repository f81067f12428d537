"""llama.cpp server's /metrics ("llamacpp", started with --metrics), per engine-metrics.md §4.

Hand-written text: HELP, TYPE and one unlabelled sample per family, counters before gauges
(the server iterates a JSON object keyed "counter", "gauge"). Values are C++ doubles through
``operator<<``: 6 significant digits, like printf ``%g`` (``143``, ``0.5``, ``2.16578e+06``),
so a counter past 999999 loses precision in the text (:func:`cpp_double`): keep test traffic
under a million tokens, or compare with that rounding.

One model (the first unless told; router mode serves one model per ``?model=``), summed over
engines. From the requests:
- ``prompt_tokens_total`` counts computed prompt tokens only (cached excluded, as the newer
  builds' HELP says), ``prompt_tokens_cached_total`` the cached ones;
- ``prompt_seconds_total`` and ``tokens_predicted_seconds_total`` sum prefill and decode time;
- ``n_decode_total`` counts one llama_decode() call per generated token (batch size 1: the
  prompt's call yields the first token); ``n_tokens_max`` is the largest prompt + generation;
- ``prompt_tokens_seconds`` / ``predicted_tokens_seconds`` are throughputs over the requests
  since the last /metrics read (the server resets that bucket on every read; see
  ``Traffic.reset_throughput_window``), 0 when there were none;
- ``requests_processing`` and ``requests_deferred`` are the running and waiting gauges.
Speculative decoding is off: its counters stay 0, the per-position one is absent.
"""

from __future__ import annotations

from collections.abc import Sequence

from agent.sim.traffic import Request, Snapshot

VERSIONS = ("llamacpp",)


def cpp_double(value: float) -> str:
    """``std::ostream << double`` with the default precision: printf's %g."""
    return f"{value:g}"


def _sum(reqs: Sequence[Request], attr: str) -> float:
    return float(sum(getattr(r, attr) for r in reqs))


def render(snap: Snapshot, model: str | None = None) -> str:
    name = snap.models[0] if model is None else model
    reqs = snap.select(name)
    window = snap.window(name)
    gauges = [snap.gauges_of(name, e) for e in snap.engines]
    counters = (
        (
            "prompt_tokens_total",
            "Number of prompt tokens processed, excluding cached tokens.",
            _sum(reqs, "computed_prompt_tokens"),
        ),
        ("prompt_seconds_total", "Prompt process time", _sum(reqs, "prefill_time")),
        (
            "tokens_predicted_total",
            "Number of generation tokens processed.",
            _sum(reqs, "generation_tokens"),
        ),
        ("tokens_predicted_seconds_total", "Predict process time", _sum(reqs, "decode_time")),
        ("n_decode_total", "Total number of llama_decode() calls", _sum(reqs, "generation_tokens")),
        (
            "n_tokens_max",
            "Largest observed n_tokens.",
            float(max((r.prompt_tokens + r.generation_tokens for r in reqs), default=0)),
        ),
        (
            "prompt_tokens_cached_total",
            "Number of prompt tokens served from the cache.",
            _sum(reqs, "cached_tokens"),
        ),
        ("spec_decode_num_drafts_total", "Number of speculative drafts.", 0.0),
        ("spec_decode_num_draft_tokens_total", "Number of speculative draft tokens.", 0.0),
        ("spec_decode_num_accepted_tokens_total", "Number of accepted speculative tokens.", 0.0),
    )
    gauge_values = (
        (
            "prompt_tokens_seconds",
            "Average prompt throughput in tokens/s.",
            _rate(window, "computed_prompt_tokens", "prefill_time"),
        ),
        (
            "predicted_tokens_seconds",
            "Average generation throughput in tokens/s.",
            _rate(window, "generation_tokens", "decode_time"),
        ),
        (
            "requests_processing",
            "Number of requests processing.",
            float(sum(g.running for g in gauges)),
        ),
        (
            "requests_deferred",
            "Number of requests deferred.",
            float(sum(g.waiting for g in gauges)),
        ),
        (
            "n_busy_slots_per_decode",
            "Average number of busy slots per llama_decode() call",
            1.0 if window else 0.0,
        ),
    )
    return "".join(_family(n, "counter", h, v) for n, h, v in counters) + "".join(
        _family(n, "gauge", h, v) for n, h, v in gauge_values
    )


def _rate(reqs: Sequence[Request], tokens: str, seconds: str) -> float:
    spent = _sum(reqs, seconds)
    return _sum(reqs, tokens) / spent if spent else 0.0


def _family(name: str, kind: str, help_: str, value: float) -> str:
    return (
        f"# HELP llamacpp:{name} {help_}\n"
        f"# TYPE llamacpp:{name} {kind}\n"
        f"llamacpp:{name} {cpp_double(value)}\n"
    )
