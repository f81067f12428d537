"""A real HTTP /metrics endpoint over a :class:`Traffic`, with faults settable at runtime.

``EngineServer`` binds 127.0.0.1 on an ephemeral port and serves ``GET /metrics`` from a
daemon thread; use it as a context manager. Every request is recorded (method, path and
headers) so a test can check what a scraper sent. The state can change while it runs: each
answer renders a fresh snapshot.

Modes (``server.mode``, settable at any time):
- "ok": the current render, with the engine's Content-Type (vLLM 0.6 and SGLang answer
  ``Accept: application/openmetrics-text`` with OpenMetrics, as their make_asgi_app does);
- "malformed": the render plus a sample line prometheus_client's parser rejects;
- "oversized": a valid-looking body of more than ``oversized_bytes``, streamed without a
  Content-Length;
- "slow": the normal answer after ``slow_seconds``;
- "404" / "500": that status.
``rewrite`` (a function of the body) makes any other hostile answer.
With ``token`` set, a request without ``Authorization: Bearer <token>`` gets 401 first.
Answers are HTTP/1.0 (the connection closes after each), so no socket outlives a test.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from urllib.parse import parse_qs, urlsplit

from agent.sim.render import render_for_accept
from agent.sim.traffic import Traffic

MODES = ("ok", "malformed", "oversized", "slow", "404", "500")
MIB = 1024 * 1024
# Where each engine serves its metrics, where not at /metrics.
METRICS_PATHS = {"nim": "/v1/metrics", "ollama": "/api/ps"}


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str  # with the query string
    headers: tuple[tuple[str, str], ...]

    def header(self, name: str) -> str | None:
        """The first value of a header, case-insensitively; None when absent."""
        wanted = name.lower()
        return next((v for k, v in self.headers if k.lower() == wanted), None)


class EngineServer:
    """Serves ``render(version, traffic)`` at ``/metrics`` on 127.0.0.1:<ephemeral>."""

    def __init__(
        self,
        version: str,
        traffic: Traffic,
        *,
        token: str | None = None,
        mode: str = "ok",
        slow_seconds: float = 2.0,
        oversized_bytes: int = 11 * MIB,
        multiprocess: bool = False,
        priority: bool = False,
        spec_tokens: int = 0,
    ) -> None:
        # Render once: an unknown version or a bad option fails here, not in a handler thread.
        render_for_accept(
            version,
            traffic,
            "",
            multiprocess=multiprocess,
            priority=priority,
            spec_tokens=spec_tokens,
        )
        self.version = version
        self.traffic = traffic
        self.token = token
        self.mode = mode
        self.slow_seconds = slow_seconds
        self.oversized_bytes = oversized_bytes
        self.multiprocess = multiprocess
        self.priority = priority
        self.spec_tokens = spec_tokens  # vLLM V1 with speculative decoding (0: off)
        # A hostile or broken engine: each answer's body goes through this first (settable
        # at any time; the bad-input tests add NaN, huge label sets, repeated families).
        self.rewrite: Callable[[str], str] | None = None
        self._recorded: list[RecordedRequest] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def mode(self) -> str:
        return self._mode

    @mode.setter
    def mode(self, value: str) -> None:
        if value not in MODES:
            raise ValueError(f"unknown mode {value!r}; one of {MODES}")
        self._mode = value

    @property
    def path(self) -> str:
        return METRICS_PATHS.get(self.version, "/metrics")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}{self.path}"

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("server not started")
        return int(self._httpd.server_address[1])

    @property
    def requests(self) -> tuple[RecordedRequest, ...]:
        with self._lock:
            return tuple(self._recorded)

    def start(self) -> EngineServer:
        self._stopping.clear()
        self._httpd = _Server(("127.0.0.1", 0), _Handler, self)
        # A short poll interval makes stop() quick: shutdown() waits for the next poll.
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"enginesim-{self.version}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is None:
            return
        self._stopping.set()  # wakes "slow" handlers and ends "oversized" streams
        self._httpd.shutdown()
        self._httpd.server_close()  # joins the handler threads
        if self._thread is not None:
            self._thread.join()
        self._httpd = None

    def __enter__(self) -> EngineServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self._recorded.append(request)

    def _authorized(self, header: str | None) -> bool:
        return self.token is None or header == f"Bearer {self.token}"

    def _body(self, accept: str, query: str) -> tuple[str, str]:
        model = parse_qs(query).get("model", [None])[0]
        if model is not None and model not in self.traffic.models:
            model = None
        body, ctype = render_for_accept(
            self.version,
            self.traffic,
            accept,
            multiprocess=self.multiprocess,
            model=model,
            priority=self.priority,
            spec_tokens=self.spec_tokens,
        )
        if self.version == "llamacpp":
            # llama.cpp resets its throughput bucket on every /metrics read.
            self.traffic.reset_throughput_window(model)
        return body, ctype


class _Server(ThreadingHTTPServer):
    # Non-daemon handler threads, joined by server_close: nothing is left writing after stop().
    daemon_threads = False
    block_on_close = True

    def __init__(
        self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], sim: EngineServer
    ) -> None:
        self.sim = sim
        super().__init__(address, handler)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    timeout = 10  # a client that connects and says nothing does not hold stop() forever

    def log_message(self, format: str, *args: object) -> None:
        pass  # quiet: the tests read self.sim.requests instead

    def do_GET(self) -> None:
        sim = self.server.sim
        sim._record(RecordedRequest("GET", self.path, tuple(self.headers.items())))
        url = urlsplit(self.path)
        # The scraper may give up (timeout, size limit): normal in these tests.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self._answer(sim, url.path, url.query)

    def _answer(self, sim: EngineServer, path: str, query: str) -> None:
        if path != sim.path or sim.mode == "404":
            self._plain(404, "Not Found\n")
        elif not sim._authorized(self.headers.get("Authorization")):
            self._plain(401, "Unauthorized\n", (("WWW-Authenticate", "Bearer"),))
        elif sim.mode == "500":
            self._plain(500, "Internal Server Error\n")
        elif sim.mode == "oversized":
            body, ctype = sim._body("", query)
            self._stream(ctype, _oversized(body, sim.oversized_bytes), sim._stopping)
        else:
            if sim.mode == "slow" and sim._stopping.wait(sim.slow_seconds):
                return
            body, ctype = sim._body(self.headers.get("Accept", ""), query)
            if sim.mode == "malformed":
                body += _MALFORMED
            if sim.rewrite is not None:
                body = sim.rewrite(body)
            self._send(200, ctype, body.encode())

    def _plain(self, status: int, text: str, headers: tuple[tuple[str, str], ...] = ()) -> None:
        self._send(status, "text/plain; charset=utf-8", text.encode(), headers)

    def _send(
        self, status: int, ctype: str, body: bytes, headers: tuple[tuple[str, str], ...] = ()
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def _stream(self, ctype: str, chunks: Iterator[bytes], stopping: threading.Event) -> None:
        # HTTP/1.0 without Content-Length: the body ends when the connection closes.
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.end_headers()
        for chunk in chunks:
            if stopping.is_set():
                return
            self.wfile.write(chunk)


# An unterminated label set: prometheus_client's parser raises ValueError on it.
_MALFORMED = 'broken_metric{model_name="x",engine="0" 1.0\n'


def _oversized(body: str, size: int) -> Iterator[bytes]:
    """The real render, then a padding gauge family until more than ``size`` bytes."""
    head = body.encode() + b"# HELP enginesim_padding Padding.\n# TYPE enginesim_padding gauge\n"
    yield head
    sent = len(head)
    i = 0
    while sent <= size:
        lines = []
        for _ in range(1000):
            lines.append(f'enginesim_padding{{series="{i:09d}"}} 0.0\n')
            i += 1
        chunk = "".join(lines).encode()
        yield chunk
        sent += len(chunk)
