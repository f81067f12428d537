"""The /metrics HTTP server: plain, or TLS and basic auth under an exporter-toolkit web config.

prometheus_client's own server takes a certificate once, at start, and has no basic auth; this
one is its WSGI app (``make_wsgi_app``, the same output) behind the toolkit's semantics:

- The web config file is looked at for every connection and request, so rotated certificates,
  a new CA or new users take effect without a reload (the toolkit reads the file every time).
  Here a stat of the file and of the files it names tells whether anything changed; the file is
  parsed and the ssl context built only then, not per scrape.
- TLS or not is decided per connection by the file as it is then; the handshake runs in the
  connection's own thread, under a timeout, so a client that connects and says nothing holds
  no one else up. Plain HTTP to a TLS listener fails its handshake: refused.
- A file that turned invalid refuses every connection (fail closed) and says why in the log,
  once per change of the file: never with the key or a hash."""

from __future__ import annotations

import ipaddress
import logging
import os
import socket
import ssl
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import make_wsgi_app
from prometheus_client.registry import CollectorRegistry

from agent.config.web import (
    TlsConfig,
    WebConfig,
    WebConfigError,
    read_web_config,
    server_context,
)
from agent.daemon.web_auth import BasicAuth, TokenBucket

log = logging.getLogger(__name__)

HANDSHAKE_SECONDS = 10.0  # a scraper completes it in milliseconds
REQUEST_SECONDS = 30.0  # reading a request line and headers; Prometheus sends them at once
Stamp = tuple[int, int, int, int] | None
StartResponse = Callable[..., Any]
App = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


@dataclass(frozen=True, slots=True)
class Current:
    """The web config as it is now, with the ssl context its TLS settings make."""

    config: WebConfig
    context: ssl.SSLContext | None
    limiter: TokenBucket | None


class WebSettings:
    """The web config file, re-read when it or a file it names changes (by stat)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._stamps: tuple[Stamp, ...] = ()
        self._current: Current | None = None
        self._files: tuple[Path, ...] = ()  # those the file named when last parsed
        self._failed: tuple[Stamp, ...] | None = None  # the state last logged as broken

    def current(self) -> Current:
        """The settings now.

        Raises:
            WebConfigError: the file (or a file it names) is unusable now.
        """
        with self._lock:
            stamps = self._now()
            if self._current is None or stamps != self._stamps:
                self._reload()
            assert self._current is not None
            return self._current

    def _now(self) -> tuple[Stamp, ...]:
        return tuple(_stamp(p) for p in (self.path, *self._files))

    def _reload(self) -> None:
        # Each file is stamped before it is read: a change after that is seen next time.
        stamped = _stamp(self.path)
        try:
            config = read_web_config(self.path)
            self._files = config.tls.files if config.tls else ()
            stamps = (stamped, *(_stamp(p) for p in self._files))
            context = server_context(config.tls) if config.tls else None
        except (WebConfigError, OSError, ssl.SSLError) as exc:
            self._current = None
            problem = exc if isinstance(exc, WebConfigError) else WebConfigError(
                str(self.path), [str(exc)]
            )  # fmt: skip
            broken = self._now()
            if broken != self._failed:  # once per broken state, not once per scrape
                self._failed = broken
                log.error("/metrics refuses connections: %s", problem)
            raise problem from None
        # The bucket outlives edits of other settings: a reload must not refill it.
        limiter = self._current.limiter if self._current else None
        if limiter is None or limiter.limit != config.rate_limit:
            limiter = TokenBucket(config.rate_limit) if config.rate_limit else None
        if self._failed is not None:
            log.info("/metrics web config %s is usable again", self.path)
            self._failed = None
        self._current = Current(config, context, limiter)
        self._stamps = stamps


def _stamp(path: Path) -> Stamp:
    try:
        st = os.stat(path)  # follows links: a Kubernetes Secret's ..data swap is a change
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)


class _Handler(WSGIRequestHandler):
    """WSGI handler that does not log requests (a scrape every 15 s is no news)."""

    timeout = REQUEST_SECONDS

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base's name)
        pass


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a stuck client never holds the daemon's exit
    web: WebSettings | None = None

    def finish_request(self, request: Any, client_address: Any) -> None:
        """In the connection's thread: TLS when the web config says so, then the request."""
        if self.web is None:
            return super().finish_request(request, client_address)
        try:
            current = self.web.current()
        except WebConfigError:
            return None  # logged by WebSettings; the connection is closed unanswered
        if current.context is None:
            return super().finish_request(request, client_address)
        request.settimeout(HANDSHAKE_SECONDS)
        try:
            tls = current.context.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError) as exc:  # plain HTTP, a wrong or missing client cert
            log.debug("/metrics: TLS handshake with %s failed: %s", client_address, exc)
            return None
        try:
            tls_config = current.config.tls
            if tls_config is None or _sans_allowed(tls_config, tls.getpeercert()):
                super().finish_request(tls, client_address)
        finally:
            tls.close()


def _sans_allowed(tls: TlsConfig, peer: Any) -> bool:
    """client_allowed_sans: the verified client certificate names one of them (DNS, IP,
    e-mail or URI), as the toolkit's VerifyPeerCertificate checks."""
    if tls.client_allowed_sans is None:
        return True
    if not peer:
        return False
    names = {_same(value) for kind, value in peer.get("subjectAltName", ())
             if kind in ("DNS", "IP Address", "email", "URI")}  # fmt: skip
    return any(_same(allowed) in names for allowed in tls.client_allowed_sans)


def _same(name: str) -> str:
    """IP addresses compared as addresses: Python spells IPv6 SANs out in full."""
    try:
        return str(ipaddress.ip_address(name.strip()))
    except ValueError:
        return name


def guarded(app: App, web: WebSettings, auth: BasicAuth) -> App:
    """``app`` behind the file's rate limit, basic auth and extra response headers."""

    def wrapped(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        try:
            current = web.current()
        except WebConfigError:
            return _plain(start_response, "500 Internal Server Error", [])
        extra = list(current.config.headers)
        if current.limiter is not None and not current.limiter.allow():
            return _plain(start_response, "429 Too Many Requests", extra)
        users = current.config.users
        if users and not auth.allowed(users, environ.get("HTTP_AUTHORIZATION")):
            return _plain(
                start_response, "401 Unauthorized", [*extra, ("WWW-Authenticate", "Basic")]
            )

        def start(status: str, headers: list[tuple[str, str]], *exc_info: Any) -> Any:
            return start_response(status, [*headers, *extra], *exc_info)

        return app(environ, start)

    return wrapped


def _plain(
    start_response: StartResponse, status: str, headers: list[tuple[str, str]]
) -> list[bytes]:
    body = f"{status.partition(' ')[2]}\n".encode()
    start_response(status, [("Content-Type", "text/plain; charset=utf-8"), *headers])
    return [body]


def serve(
    address: tuple[str, int], registry: CollectorRegistry, web: WebSettings | None
) -> tuple[WSGIServer, threading.Thread]:
    """Listen on ``address`` (IPv4 or IPv6) and serve ``registry`` in a daemon thread.

    Raises:
        OSError: the address cannot be had (in use, not this machine's, no such name).
    """
    host, port = address
    family, _, _, _, sockaddr = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]

    class Server(_Server):
        address_family = family

    app = make_wsgi_app(registry)
    if web is not None:
        app = guarded(app, web, BasicAuth())
    httpd = make_server(str(sockaddr[0]), port, app, Server, handler_class=_Handler)
    httpd.web = web
    thread = threading.Thread(target=httpd.serve_forever, name="metrics", daemon=True)
    thread.start()
    return httpd, thread
