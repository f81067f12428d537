"""The OTLP/gRPC receiver (``TraceService/Export``): vLLM's and SGLang's exporters speak gRPC
unless told ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf``.

Bounded like the HTTP receiver: messages over ``max_request_bytes`` are refused by gRPC itself
(RESOURCE_EXHAUSTED), exports over the span rate get UNAVAILABLE (which OTLP exporters retry
with backoff), and a small worker pool serves them. There is no URL path to name a target: the
span's ``service.name`` (or the box's only target) places it.
"""

from __future__ import annotations

from collections.abc import Collection
from concurrent.futures import ThreadPoolExecutor

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from collectors.otlp.inbox import SpanInbox
from collectors.otlp.receive import receive

WORKERS = 4


class _TraceService(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, inbox: SpanInbox) -> None:
        self.inbox = inbox

    def Export(  # noqa: N802 (the proto's name)
        self, request: ExportTraceServiceRequest, context: grpc.ServicerContext
    ) -> ExportTraceServiceResponse:
        if not receive(self.inbox, request, None).accepted:
            context.abort(grpc.StatusCode.UNAVAILABLE, "over [otlp] max_spans_per_second")
        return ExportTraceServiceResponse()


def start_grpc(
    address: tuple[str, int], inbox: SpanInbox, max_request_bytes: int, _: Collection[str] = ()
) -> tuple[grpc.Server, int]:
    """A started server and the port it bound (0 in ``address``: any free port)."""
    server = grpc.server(
        ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="gpuwatch-otlp-grpc"),
        options=[
            ("grpc.max_receive_message_length", max_request_bytes),
            ("grpc.so_reuseport", 0),
        ],  # fmt: skip
    )
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(_TraceService(inbox), server)
    host, port = address
    bound = server.add_insecure_port(f"[{host}]:{port}" if ":" in host else f"{host}:{port}")
    if bound == 0:
        raise OSError(f"cannot listen on {host}:{port}")
    server.start()
    return server, bound
