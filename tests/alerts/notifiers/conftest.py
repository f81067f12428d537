"""A recording HTTP server on 127.0.0.1 with scripted replies, and notification builders.

The notifiers are tested through their real HTTP stacks (slack_sdk's urllib, httpx) against
this server: replies are scripted per path (status, headers, body, delay) and every request
is recorded with its method, path, headers and body.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from alerts.dedup import GroupKey, Notification, Reason, SentEntry
from alerts.model import AlertKey, AlertState, Severity, State

NOW = datetime(2026, 1, 15, 12, 0, tzinfo=UTC)


@dataclass(frozen=True)
class Reply:
    status: int = 200
    body: Any = b""  # bytes, str, or anything else sent as JSON
    headers: Mapping[str, str] = field(default_factory=dict)
    delay_seconds: float = 0.0

    def encoded(self) -> tuple[bytes, str]:
        if isinstance(self.body, bytes):
            return self.body, "text/plain"
        if isinstance(self.body, str):
            return self.body.encode(), "text/plain; charset=utf-8"
        return json.dumps(self.body).encode(), "application/json"


@dataclass(frozen=True)
class Recorded:
    method: str
    path: str
    headers: dict[str, str]  # names lower-cased
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


class Loopback:
    """The server's script and record; ``url`` is its base, like "http://127.0.0.1:41234"."""

    def __init__(self) -> None:
        self.url = ""
        self.requests: list[Recorded] = []
        self.stopping = threading.Event()
        self._script: dict[str, list[Reply]] = {}
        self._lock = threading.Lock()

    def reply(self, path: str, *replies: Reply) -> None:
        """Answer ``path`` with ``replies`` in turn; the last one repeats."""
        with self._lock:
            self._script[path] = list(replies)

    def next_reply(self, request: Recorded) -> Reply:
        with self._lock:
            self.requests.append(request)
            replies = self._script.get(request.path.split("?")[0])
            if not replies:
                return Reply(404, b"no reply scripted for this path")
            return replies.pop(0) if len(replies) > 1 else replies[0]


def _handler(loopback: Loopback) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            self._answer()

        def do_GET(self) -> None:
            self._answer()

        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            headers = {k.lower(): v for k, v in self.headers.items()}
            recorded = Recorded(self.command, self.path, headers, self.rfile.read(length))
            reply = loopback.next_reply(recorded)
            if reply.delay_seconds and loopback.stopping.wait(reply.delay_seconds):
                return
            body, content_type = reply.encoded()
            try:
                self.send_response(reply.status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(body)
            except OSError:
                pass  # the client gave up (a timeout test): nothing to answer

        def log_message(self, format: str, *args: Any) -> None:
            pass  # keep test output clean

    return Handler


@pytest.fixture
def loopback() -> Iterator[Loopback]:
    state = Loopback()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    server.daemon_threads = True
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield state
    finally:
        state.stopping.set()  # end delayed replies now
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def alert(
    rule: str = "GpuIdle",
    *,
    state: State = State.FIRING,
    summary: str | None = "idle 42 min, $3.80 burnt",
    value: float | None = 0.02,
    severity: Severity = Severity.WARNING,
    **labels: str,
) -> AlertState:
    labels = labels or {"host": "box-1", "gpu_index": "0"}
    fired = NOW - timedelta(minutes=42)
    return AlertState(
        key=AlertKey.of(rule, labels),
        state=state,
        active_at=fired - timedelta(minutes=30),
        fired_at=fired,
        resolved_at=NOW - timedelta(minutes=1) if state is State.RESOLVED else None,
        value=value,
        annotations={"summary": summary} if summary is not None else {},
        severity=severity,
    )


def notification(
    firing: tuple[AlertState, ...] = (),
    resolved: tuple[AlertState, ...] = (),
    *,
    receiver: str = "ops",
    reason: Reason = Reason.FIRST_NOTIFICATION,
) -> Notification:
    group = GroupKey(receiver, (("alertname", "GpuIdle"), ("host", "box-1")))
    entry = SentEntry(
        group, NOW, frozenset(a.key for a in firing), frozenset(a.key for a in resolved)
    )
    return Notification(group, receiver, firing, resolved, reason, entry)
