"""The OTLP/HTTP receiver: ``POST /v1/traces`` (or ``/v1/traces/<target>``, naming the target
its spans are for), binary protobuf or JSON, gzip or plain, answered in kind.

Bounded: a body over ``max_request_bytes`` (decompressed included) is refused with 413, an
export over the span rate with 429 and ``Retry-After`` (OTLP exporters retry those), and more
than ``MAX_CONNECTIONS`` exports at once with 503. A socket idle for ``READ_TIMEOUT`` seconds is
closed, so a slow client holds no thread for long. Error bodies are plain text; OTLP asks for a
``google.rpc.Status`` there, whose type is not in opentelemetry-proto, and exporters only log it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Collection
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from collectors.otlp.decode import JSON, PROTOBUF, BadExport, decode
from collectors.otlp.inbox import SpanInbox
from collectors.otlp.receive import receive

log = logging.getLogger(__name__)

PATH = "/v1/traces"
MAX_CONNECTIONS = 16
READ_TIMEOUT = 10.0


class OtlpHttpServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(
        self,
        address: tuple[str, int],
        inbox: SpanInbox,
        targets: Collection[str],
        max_request_bytes: int,
    ) -> None:
        self.inbox = inbox
        self.targets = frozenset(targets)
        self.max_request_bytes = max_request_bytes
        self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        super().__init__(address, _Handler)


class _Handler(BaseHTTPRequestHandler):
    server: OtlpHttpServer
    timeout = READ_TIMEOUT
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        if not self.server.slots.acquire(blocking=False):
            self._fail(HTTPStatus.SERVICE_UNAVAILABLE, "too many exports at once", retry=True)
            return
        try:
            self._export()
        finally:
            self.server.slots.release()

    def do_GET(self) -> None:  # noqa: N802
        self._fail(HTTPStatus.METHOD_NOT_ALLOWED, f"POST OTLP trace exports to {PATH}")

    def _export(self) -> None:
        placed, target = self._target()
        if not placed:
            return
        body = self._body()
        if body is None:
            return
        try:
            export = decode(body, self.headers.get("Content-Type", ""),
                            self.headers.get("Content-Encoding", ""),
                            self.server.max_request_bytes)  # fmt: skip
        except BadExport as exc:
            self.server.inbox.refuse("malformed")
            self._fail(HTTPStatus(exc.status), str(exc))
            return
        verdict = receive(self.server.inbox, export, target)
        if not verdict.accepted:
            self._fail(HTTPStatus.TOO_MANY_REQUESTS, "over [otlp] max_spans_per_second", True)
            return
        self._answer(ExportTraceServiceResponse())

    def _target(self) -> tuple[bool, str | None]:
        """(True, the target the path names or None for the plain path); (False, None): a bad
        path, already answered."""
        path = self.path.split("?", 1)[0].rstrip("/")
        if path == PATH:
            return True, None
        name = path.removeprefix(PATH + "/")
        if name != path and name in self.server.targets:
            return True, name
        if name != path:
            self.server.inbox.refuse("unknown_target")
            self._fail(HTTPStatus.NOT_FOUND, f"no target named {name!r} in [[targets]]")
        else:
            self._fail(HTTPStatus.NOT_FOUND, f"OTLP traces go to {PATH} or {PATH}/<target>")
        return False, None

    def _body(self) -> bytes | None:
        length = self.headers.get("Content-Length")
        if length is None or not length.isdigit():
            self._fail(HTTPStatus.LENGTH_REQUIRED, "a Content-Length is required")
            return None
        if int(length) > self.server.max_request_bytes:
            self.server.inbox.refuse("too_large")
            limit = self.server.max_request_bytes
            self._fail(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"over max_request_bytes ({limit})")
            return None
        return self.rfile.read(int(length))

    def _answer(self, response: ExportTraceServiceResponse) -> None:
        media = self.headers.get("Content-Type", "").split(";", 1)[0].strip().lower()
        if media == JSON:
            body, kind = json_format.MessageToJson(response).encode(), JSON
        else:
            body, kind = response.SerializeToString(), PROTOBUF
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _fail(self, status: HTTPStatus, message: str, retry: bool = False) -> None:
        body = (message + "\n").encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        if retry:
            self.send_header("Retry-After", "1")
        if status != HTTPStatus.TOO_MANY_REQUESTS and status >= 400 and self.command == "POST":
            # The unread rest of a refused body would be read as the next request.
            self.close_connection = True
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        log.debug("otlp %s: " + format, self.client_address[0], *args)
