"""The OTLP receiver as engines reach it: the OpenTelemetry SDK's own HTTP and gRPC exporters
(the ones vLLM and SGLang use), raw OTLP/JSON and bad bodies over real HTTP on 127.0.0.1, and
the ``otlp`` collector's counters a user sees on /metrics."""

from __future__ import annotations

import gzip
import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime

import httpx
import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter

from collectors.base import Sample
from collectors.otlp.collector import WAIT_TICKS, SpanCollector
from collectors.otlp.grpc_server import start_grpc
from collectors.otlp.http import OtlpHttpServer
from collectors.otlp.inbox import SpanInbox
from collectors.otlp.objective import Objective
from tests.collectors.otlp_helpers import Request, send, tracer_for

NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
E2E_1S = Objective("e2e<=1s", e2e=1.0)
LIMIT = 64 * 1024


@pytest.fixture
def inbox() -> SpanInbox:
    return SpanInbox(max_pending=1000, spans_per_second=10_000)


@pytest.fixture
def http_url(inbox: SpanInbox) -> Iterator[str]:
    server = OtlpHttpServer(("127.0.0.1", 0), inbox, ("vllm-0", "vllm-1"), LIMIT)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/v1/traces"
    finally:
        server.shutdown()
        server.server_close()


def collector(inbox: SpanInbox, **targets: str | None) -> SpanCollector:
    objectives = {"llama-8b": E2E_1S}
    return SpanCollector("box", inbox, objectives.get, targets or {"vllm-0": "llama-8b"})


def counters(c: SpanCollector) -> dict[tuple[str, str], float]:
    """(metric, result) -> value after two ticks (a new counter shows 0 on its first)."""
    c.collect(NOW)
    return {(s.metric, s.labels["result"]): s.value for s in c.collect(NOW) if "result" in s.labels}


def test_the_sdk_http_exporter_delivers_requests_judged_exactly(
    inbox: SpanInbox, http_url: str
) -> None:
    with tracer_for(HttpExporter(endpoint=http_url), service="vllm-0") as provider:
        send(provider, [Request(e2e=0.6)] * 9 + [Request(e2e=3.0, output_tokens=40)])
    assert counters(collector(inbox)) == {
        ("gpuwatch_slo_span_requests_total", "met"): 9,
        ("gpuwatch_slo_span_requests_total", "missed"): 1,
        ("gpuwatch_slo_span_output_tokens_total", "met"): 900,
        ("gpuwatch_slo_span_output_tokens_total", "missed"): 40,
    }


def test_a_new_counter_shows_zero_first_so_its_first_requests_are_an_increase(
    inbox: SpanInbox, http_url: str
) -> None:
    with tracer_for(HttpExporter(endpoint=http_url), service="vllm-0") as provider:
        send(provider, [Request(e2e=0.5)])
    c = collector(inbox)
    first = [s for s in c.collect(NOW) if s.metric == "gpuwatch_slo_span_requests_total"]
    assert [(s.labels, s.value) for s in first] == [
        ({"host": "box", "model": "llama-8b", "objective": "e2e<=1s", "result": "met",
          "target": "vllm-0"}, 0.0)
    ]  # fmt: skip
    second = [s.value for s in c.collect(NOW) if s.metric == "gpuwatch_slo_span_requests_total"]
    assert second == [1.0]


def test_the_url_path_names_the_target_when_service_name_does_not(
    inbox: SpanInbox, http_url: str
) -> None:
    with tracer_for(HttpExporter(endpoint=http_url + "/vllm-1"), service="vllm") as provider:
        send(provider, [Request(e2e=0.5)])
    c = collector(inbox, **{"vllm-0": "llama-8b", "vllm-1": "llama-8b"})
    c.collect(NOW)
    targets = {s.labels.get("target") for s in c.collect(NOW) if "result" in s.labels}
    assert targets == {"vllm-1"}


def test_the_sdk_grpc_exporter_delivers_too(inbox: SpanInbox) -> None:
    server, port = start_grpc(("127.0.0.1", 0), inbox, LIMIT)
    try:
        exporter = GrpcExporter(endpoint=f"127.0.0.1:{port}", insecure=True)
        with tracer_for(exporter, service="vllm-0") as provider:
            send(provider, [Request(e2e=0.2), Request(e2e=1.5)])
    finally:
        server.stop(grace=None)
    got = counters(collector(inbox))
    assert got[("gpuwatch_slo_span_requests_total", "met")] == 1
    assert got[("gpuwatch_slo_span_requests_total", "missed")] == 1


def _json_export(e2e: float, service: str = "vllm-0") -> dict[str, object]:
    """OTLP/JSON as the specification spells it: hex IDs, int64 as strings, camelCase."""
    return {"resourceSpans": [{
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": service}}]},
        "scopeSpans": [{"spans": [{
            "traceId": "5b8efff798038103d269b633813fc60c", "spanId": "eee19b7ec3c1b174",
            "name": "llm_request", "kind": 2,
            "startTimeUnixNano": "1764936000000000000", "endTimeUnixNano": "1764936001000000000",
            "attributes": [
                {"key": "gen_ai.latency.e2e", "value": {"doubleValue": e2e}},
                {"key": "gen_ai.usage.completion_tokens", "value": {"intValue": "7"}},
                {"key": "some.future.attribute", "value": {"boolValue": True}},
            ],
            "unknownFutureField": 1,
        }]}],
    }]}  # fmt: skip


def test_otlp_json_with_hex_ids_and_unknown_fields_is_read(inbox: SpanInbox, http_url: str) -> None:
    response = httpx.post(http_url, json=_json_export(0.4))
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert counters(collector(inbox))[("gpuwatch_slo_span_output_tokens_total", "met")] == 7


def test_gzip_protobuf_is_read_and_a_gzip_bomb_is_refused(inbox: SpanInbox, http_url: str) -> None:
    from google.protobuf import json_format
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    message = json_format.ParseDict(
        {"resourceSpans": [{"scopeSpans": [{"spans": [{"name": "llm_request", "attributes": [
            {"key": "gen_ai.latency.e2e", "value": {"doubleValue": 2.5}}]}]}]}]},
        ExportTraceServiceRequest(),
    )  # fmt: skip
    headers = {"Content-Type": "application/x-protobuf", "Content-Encoding": "gzip"}
    ok = httpx.post(http_url, content=gzip.compress(message.SerializeToString()), headers=headers)
    assert ok.status_code == 200
    bomb = httpx.post(http_url, content=gzip.compress(b"\0" * (LIMIT * 4)), headers=headers)
    assert bomb.status_code == 413 and "decompresses to more than" in bomb.text
    # The only target takes a span whose service.name names none.
    assert counters(collector(inbox))[("gpuwatch_slo_span_requests_total", "missed")] == 1


@pytest.mark.parametrize(
    ("content", "content_type", "status", "says"),
    [
        (b"\xff\xff\xff", "application/x-protobuf", 400, "not an OTLP protobuf trace export"),
        (b"{not json", "application/json", 400, "not JSON"),
        (b"[1, 2]", "application/json", 400, "an object with resourceSpans"),
        (b"hello", "text/plain", 415, "unsupported Content-Type"),
        (b"x" * (LIMIT + 1), "application/x-protobuf", 413, "over max_request_bytes"),
    ],
)
def test_a_bad_export_gets_a_clear_error_and_costs_nothing_already_received(
    inbox: SpanInbox, http_url: str, content: bytes, content_type: str, status: int, says: str
) -> None:
    assert httpx.post(http_url, json=_json_export(0.3)).status_code == 200
    bad = httpx.post(http_url, content=content, headers={"Content-Type": content_type})
    assert bad.status_code == status and says in bad.text
    assert counters(collector(inbox))[("gpuwatch_slo_span_requests_total", "met")] == 1


def test_an_unknown_target_in_the_path_is_named(http_url: str) -> None:
    response = httpx.post(http_url + "/nope", json=_json_export(0.3))
    assert response.status_code == 404 and "no target named 'nope'" in response.text


def test_over_the_span_rate_the_export_is_refused_for_the_exporter_to_retry(
    http_url: str,
) -> None:
    slow = SpanInbox(max_pending=1000, spans_per_second=1)
    server = OtlpHttpServer(("127.0.0.1", 0), slow, ("vllm-0",), LIMIT)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_port}/v1/traces"
        assert httpx.post(url, json=_json_export(0.3)).status_code == 200
        refused = httpx.post(url, json=_json_export(0.3))
    finally:
        server.shutdown()
        server.server_close()
    assert refused.status_code == 429 and refused.headers["retry-after"] == "1"
    assert slow.snapshot()["refused_rate"] == 1


def test_the_backlog_keeps_the_newest_and_counts_what_it_dropped() -> None:
    small = SpanInbox(max_pending=2, spans_per_second=1000)
    from collectors.otlp.facts import SpanFacts
    from collectors.otlp.inbox import Arrival

    facts = [SpanFacts(None, "llama-8b", e2e, None, None, None, 1, 1) for e2e in (5, 0.1, 0.2)]
    small.put([Arrival("vllm-0", f) for f in facts], skipped=0)
    assert [a.facts.e2e for a in small.take()] == [0.1, 0.2]
    assert small.snapshot()["dropped_backlog"] == 1


def test_a_span_without_its_model_waits_for_the_scrape_then_gives_up(inbox: SpanInbox) -> None:
    from collectors.otlp.facts import SpanFacts
    from collectors.otlp.inbox import Arrival

    c = collector(inbox, **{"vllm-0": None})
    span = SpanFacts("vllm-0", None, 0.5, None, None, None, 3, 1)
    inbox.put([Arrival(None, span), Arrival(None, span)], skipped=0)
    c.collect(NOW)  # no scrape has named the target's model yet: the spans wait
    scrape = Sample(metric="gpuwatch_engine_requests_running", value=1, ts=NOW,
                    labels={"target": "vllm-0", "model": "llama-8b"})  # fmt: skip
    c.scraped({"vllm-0": (scrape,)})
    c.collect(NOW)
    assert counters(c)[("gpuwatch_slo_span_requests_total", "met")] == 2
    lost = SpanInbox(max_pending=10, spans_per_second=1000)
    d = collector(lost, **{"vllm-0": None})
    lost.put([Arrival(None, span)], skipped=0)
    for _ in range(WAIT_TICKS + 1):
        samples = list(d.collect(NOW))
    outcomes = {
        s.labels["outcome"]: s.value for s in samples if s.metric.startswith("gpuwatch_otlp")
    }
    assert outcomes["unplaced_model"] == 1


def test_spans_that_are_not_requests_are_skipped_not_counted(
    inbox: SpanInbox, http_url: str
) -> None:
    document = _json_export(0.3)
    spans = document["resourceSpans"][0]["scopeSpans"][0]["spans"]  # type: ignore[index]
    spans.append({"name": "Scheduler [TP 0]", "attributes": []})
    assert httpx.post(http_url, content=json.dumps(document),
                      headers={"Content-Type": "application/json"}).status_code == 200  # fmt: skip
    assert inbox.snapshot() == {"accepted": 1, "not_a_request": 1}


def test_an_export_larger_than_a_seconds_rate_goes_in_and_the_rate_still_holds() -> None:
    """Exporters batch up to 512 spans; at 100 spans a second such an export is let in when the
    bucket is full, and the next only once the debt is paid back (5.12 s later)."""
    now = [0.0]
    inbox = SpanInbox(max_pending=10_000, spans_per_second=100, clock=lambda: now[0])
    assert inbox.admit(512)
    now[0] = 4.0
    assert not inbox.admit(512)  # 4 s refilled 400 of the 412 owed
    now[0] = 5.2
    assert inbox.admit(512)
    assert inbox.snapshot()["refused_rate"] == 512
