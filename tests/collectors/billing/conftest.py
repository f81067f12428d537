"""A real HTTP server on 127.0.0.1 playing a provider's API, and ApiClients that never sleep.

Each test scripts the answers per path: replies played in order (the last one repeats), or a
function of the request. Every request is recorded. Answers are HTTP/1.0, so the connection
closes after each and no socket outlives a test. The provider samples are copies, in
tests/fixtures/billing/, of shared/reference/samples/billing/ (billing-apis.md, section 4).
"""

from __future__ import annotations

import contextlib
import json
import random
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest

from collectors.billing.http import ApiClient

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "billing"
TOKEN = "gw-test-key-6f1e2d3c4b5a"  # must never show up in an error or a log record


def sample(name: str) -> Any:
    """A provider sample, decoded (floats stay floats: the server re-encodes them exactly)."""
    return json.loads((FIXTURES / name).read_text())


@dataclass(frozen=True)
class Reply:
    status: int = 200
    body: object = None  # bytes go out as they are; anything else as JSON
    headers: Mapping[str, str] = field(default_factory=dict)
    delay_seconds: float = 0.0

    def payload(self) -> tuple[bytes, str]:
        if isinstance(self.body, bytes):
            return self.body, "text/html; charset=utf-8"
        return json.dumps(self.body).encode(), "application/json"


@dataclass(frozen=True)
class Seen:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]  # names lower-cased
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


Script = Callable[[Seen], Reply]


class FakeApi:
    """Serves scripted replies at ``url``; unknown paths answer 404."""

    def __init__(self) -> None:
        self._scripts: dict[str, Script] = {}
        self._seen: list[Seen] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._httpd = _Server(("127.0.0.1", 0), _Handler, self)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    @property
    def requests(self) -> list[Seen]:
        with self._lock:
            return list(self._seen)

    def answer(self, path: str, *replies: Reply) -> None:
        """Play ``replies`` in order for ``path``; the last one repeats."""
        queue = list(replies)

        def script(_: Seen) -> Reply:
            with self._lock:
                return queue.pop(0) if len(queue) > 1 else queue[0]

        self._scripts[path] = script

    def answer_with(self, path: str, script: Script) -> None:
        self._scripts[path] = script

    def start(self) -> FakeApi:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()  # wakes delayed replies
        self._httpd.shutdown()
        self._httpd.server_close()  # joins the handler threads
        self._thread.join()

    def _reply(self, seen: Seen) -> Reply:
        with self._lock:
            self._seen.append(seen)
        script = self._scripts.get(seen.path)
        if script is None:
            return Reply(404, {"title": "Not Found", "status": 404, "detail": "no such path"})
        return script(seen)


class _Server(ThreadingHTTPServer):
    daemon_threads = False
    block_on_close = True

    def __init__(
        self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], api: FakeApi
    ) -> None:
        self.api = api
        super().__init__(address, handler)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    timeout = 10

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self._handle()

    def do_POST(self) -> None:
        self._handle()

    def _handle(self) -> None:
        url = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        seen = Seen(
            method=self.command,
            path=url.path,
            query=dict(parse_qsl(url.query)),
            headers={k.lower(): v for k, v in self.headers.items()},
            body=self.rfile.read(length),
        )
        api = self.server.api
        reply = api._reply(seen)
        if reply.delay_seconds and api._stopping.wait(reply.delay_seconds):
            return
        body, ctype = reply.payload()
        # The client may have given up (a timeout test): normal here.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self.send_response(reply.status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)


class TopRandom(random.Random):
    """Jitter made predictable: always the top of the range (a real draw only approaches 1),
    so each backoff wait is its whole step: 1 s, 2 s, 4 s..."""

    def random(self) -> float:
        return 1.0


class FakeClock:
    """A monotonic clock that only the recorded sleeps move."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.fixture
def server() -> Iterator[FakeApi]:
    api = FakeApi().start()
    yield api
    api.stop()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


MakeApi = Callable[..., ApiClient]


@pytest.fixture
def make_api(server: FakeApi, clock: FakeClock) -> Iterator[MakeApi]:
    """ApiClient factory aimed at ``server``, sleeping on ``clock``; closes them all."""
    made: list[ApiClient] = []

    def make(provider: str = "vast", variable: str = "VAST_API_KEY", **options: Any) -> ApiClient:
        options.setdefault("sleep", clock.sleep)
        options.setdefault("clock", clock)
        options.setdefault("rng", TopRandom())
        options.setdefault("timeout_seconds", 5.0)
        client = ApiClient(provider, server.url, TOKEN, variable, **options)
        made.append(client)
        return client

    yield make
    for client in made:
        client.close()
