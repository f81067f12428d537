"""Benchmark: what does a request span cost the OTLP receiver, from the exporter's POST to the
tick's counters, and does the tick's part grow with what was received before?

    python bench/otlp.py [--spans 512] [--exports 200] [--rounds 5]

An export is what vLLM's BatchSpanProcessor sends: up to 512 ``llm_request`` spans with vLLM's
attributes (agent: tests/collectors/otlp_helpers.py), binary protobuf. Three figures per span,
each next to the baseline measured in the same run:

- baseline: protobuf's own ParseFromString of the export (the least any receiver pays);
- A: the receiver's path without the network: decode, the request facts of every span, the
  inbox, and the collector's tick judging them against an objective and counting them;
- B: the same over real HTTP on 127.0.0.1 (httpx, one connection kept alive), the collector's
  tick included.

Then the tick alone after ``--exports`` exports already counted: its cost is the new spans', not
the history's (the counters are one per target, model, objective and result).

Target: A under 50 us per span: 1 % of a core at 200 finished requests a second, more than a
busy vLLM box serves; and the tick flat in what was counted before (within 1.5 x).
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx  # noqa: E402
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (  # noqa: E402
    ExportTraceServiceRequest,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue  # noqa: E402
from opentelemetry.proto.resource.v1.resource_pb2 import Resource  # noqa: E402
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span  # noqa: E402

from bench.common import ms, timed, verdict  # noqa: E402
from collectors.otlp.collector import SpanCollector  # noqa: E402
from collectors.otlp.decode import PROTOBUF, decode  # noqa: E402
from collectors.otlp.http import OtlpHttpServer  # noqa: E402
from collectors.otlp.inbox import SpanInbox  # noqa: E402
from collectors.otlp.objective import Objective  # noqa: E402
from collectors.otlp.receive import receive  # noqa: E402

NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
LIMIT = 64 * 1024 * 1024
OBJECTIVE = Objective("ttft<=0.5s,e2e<=1s", ttft=0.5, e2e=1.0)


def _attr(key: str, value: float | int | str) -> KeyValue:
    if isinstance(value, str):
        return KeyValue(key=key, value=AnyValue(string_value=value))
    if isinstance(value, int):
        return KeyValue(key=key, value=AnyValue(int_value=value))
    return KeyValue(key=key, value=AnyValue(double_value=value))


def export(spans: int) -> bytes:
    """An export as vLLM 0.32 sends it (vllm/v1/engine/output_processor.py do_tracing)."""
    out = []
    for i in range(spans):
        e2e = 0.4 + (i % 10) * 0.1
        attributes = [
            _attr("gen_ai.latency.time_to_first_token", 0.05 + (i % 7) * 0.1),
            _attr("gen_ai.latency.e2e", e2e), _attr("gen_ai.latency.time_in_queue", 0.01),
            _attr("gen_ai.usage.prompt_tokens", 200), _attr("gen_ai.usage.completion_tokens", 120),
            _attr("gen_ai.latency.time_in_model_prefill", 0.03),
            _attr("gen_ai.latency.time_in_model_decode", e2e - 0.1),
            _attr("gen_ai.latency.time_in_model_inference", e2e - 0.05),
            _attr("gen_ai.request.id", f"cmpl-{i:08x}"), _attr("gen_ai.request.max_tokens", 256),
            _attr("gen_ai.request.top_p", 0.9), _attr("gen_ai.request.n", 1),
        ]  # fmt: skip
        span = Span(name="llm_request", kind=Span.SPAN_KIND_SERVER, start_time_unix_nano=1,
                    end_time_unix_nano=2, attributes=attributes)  # fmt: skip
        span.trace_id, span.span_id = i.to_bytes(16, "big"), i.to_bytes(8, "big")
        out.append(span)
    resource = Resource(attributes=[_attr("service.name", "vllm-0")])
    message = ExportTraceServiceRequest(
        resource_spans=[ResourceSpans(resource=resource, scope_spans=[ScopeSpans(spans=out)])]
    )
    return message.SerializeToString()


def collector(inbox: SpanInbox) -> SpanCollector:
    return SpanCollector("box", inbox, lambda _: OBJECTIVE, {"vllm-0": "llama-8b"})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spans", type=int, default=512)
    parser.add_argument("--exports", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    body, n = export(args.spans), args.spans
    print(f"one export: {n} spans, {len(body):,} bytes ({len(body) / n:.0f} bytes a span)")

    def parse(_: int) -> object:
        return ExportTraceServiceRequest.FromString(body)

    inbox = SpanInbox(max_pending=10_000_000, spans_per_second=1e12)
    counting = collector(inbox)

    def path(_: int) -> object:
        receive(inbox, decode(body, PROTOBUF, "", LIMIT), None)
        return list(counting.collect(NOW))

    base, full = timed(parse, args.rounds), timed(path, args.rounds)
    per = [t / n * 1e6 for t in full]
    print(f"baseline: protobuf ParseFromString, per export  {ms(base)}")
    print(f"A  decode, facts, inbox, judged and counted, per export  {ms(full)}")
    http_ms = _over_http(body, args.rounds)
    print(f"B  the same over HTTP on 127.0.0.1, per export  {ms(http_ms)}")
    fresh, after = _tick_flat(body, args.exports, args.rounds)
    print(f"tick with one export new, nothing before  {ms(fresh)}")
    print(f"tick with one export new, after {args.exports} exports counted  {ms(after)}")
    median = sorted(per)[len(per) // 2]
    print(f"target: A under 50 us per span: {median:.1f} us  {verdict(median < 50)}")
    ratio = sorted(after)[len(after) // 2] / sorted(fresh)[len(fresh) // 2]
    print(
        f"target: the tick flat in what was counted before: {ratio:.2f} x  {verdict(ratio < 1.5)}"
    )
    return 0


def _over_http(body: bytes, rounds: int) -> list[float]:
    inbox = SpanInbox(max_pending=10_000_000, spans_per_second=1e12)
    counting = collector(inbox)
    server = OtlpHttpServer(("127.0.0.1", 0), inbox, ("vllm-0",), LIMIT)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}/v1/traces"
    try:
        with httpx.Client(headers={"Content-Type": PROTOBUF}) as client:

            def post(_: int) -> object:
                assert client.post(url, content=body).status_code == 200
                return list(counting.collect(NOW))

            return timed(post, rounds)
    finally:
        server.shutdown()
        server.server_close()


def _tick_flat(body: bytes, exports: int, rounds: int) -> tuple[list[float], list[float]]:
    """The collector's tick over one new export, fresh and after ``exports`` counted."""
    message = decode(body, PROTOBUF, "", LIMIT)
    fresh_inbox, old_inbox = (SpanInbox(10_000_000, 1e12) for _ in range(2))
    fresh, old = collector(fresh_inbox), collector(old_inbox)
    for _ in range(exports):
        receive(old_inbox, message, None)
        old.collect(NOW)

    def tick(c: SpanCollector, inbox: SpanInbox) -> float:
        receive(inbox, message, None)
        start = time.perf_counter()
        list(c.collect(NOW))
        return time.perf_counter() - start

    return ([tick(fresh, fresh_inbox) for _ in range(rounds)],
            [tick(old, old_inbox) for _ in range(rounds)])  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
