"""Request spans as vLLM sends them (vllm/v1/engine/output_processor.py ``do_tracing``: span
``llm_request`` with ``gen_ai.*`` attributes), through the OpenTelemetry SDK's own exporters."""

from __future__ import annotations

import socket
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter


@dataclass(frozen=True)
class Request:
    e2e: float
    ttft: float = 0.1
    queue: float = 0.01
    output_tokens: int = 100
    prompt_tokens: int = 20


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def tracer_for(exporter: SpanExporter, service: str = "vllm") -> Iterator[TracerProvider]:
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))  # exported as each span ends
    try:
        yield provider
    finally:
        provider.shutdown()


def send(provider: TracerProvider, requests: Sequence[Request]) -> None:
    tracer = provider.get_tracer("vllm.llm_engine")
    for r in requests:
        attributes: dict[str, str | int | float] = {
            "gen_ai.latency.time_to_first_token": r.ttft,
            "gen_ai.latency.e2e": r.e2e,
            "gen_ai.latency.time_in_queue": r.queue,
            "gen_ai.latency.time_in_model_decode": r.e2e - r.ttft,
            "gen_ai.usage.prompt_tokens": r.prompt_tokens,
            "gen_ai.usage.completion_tokens": r.output_tokens,
            "gen_ai.request.id": "cmpl-1",
        }
        tracer.start_span("llm_request", attributes=attributes).end()
