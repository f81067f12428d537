"""What one request span says about its request: the latencies and token counts vLLM and
SGLang put on it, read from the OTLP protobuf types.

Both engines name them alike (``gen_ai.latency.*``, ``gen_ai.usage.*``; vLLM's
``vllm/tracing/utils.py`` SpanAttributes, SGLang's ``sglang/srt/observability/trace.py``): a span
that carries ``gen_ai.latency.e2e`` is a finished request. Other spans (SGLang's per-thread
slices, a gateway's own) say nothing of a request's latency and are skipped, not rejected.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, Span

TTFT = "gen_ai.latency.time_to_first_token"
E2E = "gen_ai.latency.e2e"
QUEUE = "gen_ai.latency.time_in_queue"
DECODE = "gen_ai.latency.time_in_model_decode"
OUTPUT_TOKENS = "gen_ai.usage.completion_tokens"
PROMPT_TOKENS = "gen_ai.usage.prompt_tokens"
MODELS = ("gen_ai.response.model", "gen_ai.request.model")  # absent from vLLM 0.32's spans
SERVICE = "service.name"
_WANTED = frozenset({TTFT, E2E, QUEUE, DECODE, OUTPUT_TOKENS, PROMPT_TOKENS, *MODELS})


@dataclass(frozen=True, slots=True)
class SpanFacts:
    """One finished request. A latency the span does not carry is None (unknown)."""

    service: str | None  # the resource's service.name (names a target when it matches one)
    model: str | None  # gen_ai.response.model / gen_ai.request.model, where the engine sets it
    e2e: float
    ttft: float | None
    queue: float | None
    tpot: float | None  # mean time per output token after the first (decode / (tokens - 1))
    output_tokens: int | None
    prompt_tokens: int | None


def request_facts(resources: Iterable[ResourceSpans]) -> Iterator[SpanFacts]:
    """The request spans of an export, in order; spans without an end-to-end latency skipped."""
    for resource_spans in resources:
        service = _text(_find(resource_spans.resource.attributes, SERVICE))
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                facts = _facts(span, service)
                if facts is not None:
                    yield facts


def _facts(span: Span, service: str | None) -> SpanFacts | None:
    values = {kv.key: kv.value for kv in span.attributes if kv.key in _WANTED}
    e2e = _seconds(values.get(E2E))
    if e2e is None:
        return None
    tokens = _count(values.get(OUTPUT_TOKENS))
    decode = _seconds(values.get(DECODE))
    model = next((m for m in (_text(values.get(k)) for k in MODELS) if m), None)
    return SpanFacts(
        service=service,
        model=model,
        e2e=e2e,
        ttft=_seconds(values.get(TTFT)),
        queue=_seconds(values.get(QUEUE)),
        tpot=_tpot(decode, tokens),
        output_tokens=tokens,
        prompt_tokens=_count(values.get(PROMPT_TOKENS)),
    )


def _tpot(decode: float | None, tokens: int | None) -> float | None:
    """vLLM's benchmark --goodput judges ``tpot`` this way: the decode time over the output
    tokens after the first. One token or none has no inter-token time at all: 0, within any
    threshold (it cannot have been slow between tokens)."""
    if decode is None or tokens is None:
        return None
    return decode / (tokens - 1) if tokens > 1 else 0.0


def _find(attributes: Iterable[KeyValue], key: str) -> AnyValue | None:
    return next((kv.value for kv in attributes if kv.key == key), None)


def _text(value: AnyValue | None) -> str | None:
    if value is None or value.WhichOneof("value") != "string_value":
        return None
    return value.string_value or None


def _seconds(value: AnyValue | None) -> float | None:
    """A latency in seconds: a double (as both engines send it) or an integer; negative, NaN or
    infinite values (a clock step between two timestamps) are unknown, not 0."""
    number = _number(value)
    return number if number is not None and math.isfinite(number) and number >= 0 else None


def _count(value: AnyValue | None) -> int | None:
    number = _number(value)
    if number is None or not math.isfinite(number) or number < 0 or number != int(number):
        return None
    return int(number)


def _number(value: AnyValue | None) -> float | None:
    if value is None:
        return None
    kind = value.WhichOneof("value")
    if kind == "double_value":
        return value.double_value
    if kind == "int_value":
        return float(value.int_value)
    return None
