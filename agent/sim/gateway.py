"""A loopback LiteLLM (or any gateway) ``/metrics``: a captured body replayed, its counters
advanced at will, so a test scrapes a gateway over real HTTP on 127.0.0.1.

``GatewayReplay(capture)`` serves the capture as it is; ``advance(factor)`` multiplies every
counter sample (``*_total``) by ``factor`` (``2.0``: each key did as much again as the capture
shows), the ``_created`` series untouched, as a gateway that keeps running does;
``restart()`` serves the counters from 0 again (a LiteLLM restart). With ``token``, a request
without ``Authorization: Bearer <token>`` gets 401, as LiteLLM's /metrics with auth does.
"""

from __future__ import annotations

import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType

_COUNTER = re.compile(r"^(?P<series>[a-zA-Z_:][a-zA-Z0-9_:]*_total(?:\{.*\})?) (?P<value>\S+)$")


class GatewayReplay:
    def __init__(self, capture: str, *, token: str | None = None) -> None:
        self.capture = capture
        self.token = token
        self.factor = 1.0
        self.requests = 0
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        assert self._httpd is not None, "not started"
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/metrics"

    def advance(self, factor: float) -> None:
        with self._lock:
            self.factor = factor

    def restart(self) -> None:
        self.advance(0.0)

    def body(self) -> str:
        with self._lock:
            factor = self.factor
        return "\n".join(_scaled(line, factor) for line in self.capture.splitlines()) + "\n"

    def start(self) -> GatewayReplay:
        replay = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                replay.requests += 1
                if self.path.split("?")[0] != "/metrics":
                    return self._send(404, b"Not Found\n")
                if replay.token and self.headers.get("Authorization") != f"Bearer {replay.token}":
                    return self._send(401, b"Unauthorized\n")
                return self._send(200, replay.body().encode())

            def _send(self, status: int, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join()

    def __enter__(self) -> GatewayReplay:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _scaled(line: str, factor: float) -> str:
    m = _COUNTER.match(line)
    if m is None:
        return line
    return f"{m['series']} {float(m['value']) * factor!r}"
