"""One export's journey into the inbox, shared by the HTTP and gRPC receivers: decode, bound,
pick out the request spans."""

from __future__ import annotations

from dataclasses import dataclass

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from collectors.otlp.facts import request_facts
from collectors.otlp.inbox import Arrival, SpanInbox


@dataclass(frozen=True, slots=True)
class Verdict:
    """``accepted`` False: refused for the rate, retry later (HTTP 429, gRPC UNAVAILABLE)."""

    accepted: bool
    spans: int
    requests: int


def receive(inbox: SpanInbox, export: ExportTraceServiceRequest, target: str | None) -> Verdict:
    spans = sum(len(s.spans) for r in export.resource_spans for s in r.scope_spans)
    if not inbox.admit(spans):
        return Verdict(False, spans, 0)
    arrivals = [Arrival(target, facts) for facts in request_facts(export.resource_spans)]
    inbox.put(arrivals, skipped=spans - len(arrivals))
    return Verdict(True, spans, len(arrivals))
