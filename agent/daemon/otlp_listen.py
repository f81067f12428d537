"""The OTLP receiver's listeners, owned by the daemon across reloads: the inbox stays, so a
reload loses none of the spans that arrived since the last tick; the listeners move only when
their addresses (or the targets they place spans on) change."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field

import grpc

from agent.config.listen import parse_listen
from agent.config.settings import Config
from collectors.otlp.grpc_server import start_grpc
from collectors.otlp.http import OtlpHttpServer
from collectors.otlp.inbox import SpanInbox

log = logging.getLogger(__name__)


@dataclass
class OtlpListeners:
    inbox: SpanInbox
    _http: OtlpHttpServer | None = None
    _grpc: grpc.Server | None = None
    _started: tuple[object, ...] | None = None  # what the running listeners were started for
    ports: dict[str, int] = field(default_factory=dict)

    @classmethod
    def for_config(cls, config: Config) -> OtlpListeners | None:
        o = config.otlp
        return cls(SpanInbox(o.max_pending_spans, o.max_spans_per_second)) if o.enabled else None

    def apply(self, config: Config) -> None:
        """Start (or move) the listeners for ``config``. One that cannot listen is said and left
        off: spans are a refinement, and collection must go on without them."""
        o = config.otlp
        self.inbox.set_limits(o.max_pending_spans, o.max_spans_per_second)
        wanted = (o.http_listen, o.grpc_listen, o.max_request_bytes,
                  tuple(t.name for t in config.targets))  # fmt: skip
        if wanted == self._started:
            return
        self.stop()
        self._started = wanted
        targets = wanted[3]
        http = parse_listen(o.http_listen) if o.http_listen else None
        if http is not None:
            try:
                self._http = OtlpHttpServer(http, self.inbox, targets, o.max_request_bytes)
            except OSError as exc:
                log.error("otlp.http_listen = %r: cannot listen there: %s", o.http_listen,
                          exc.strerror or exc)  # fmt: skip
            else:
                self.ports["http"] = self._http.server_port
                threading.Thread(target=self._http.serve_forever, name="gpuwatch-otlp-http",
                                 daemon=True).start()  # fmt: skip
                log.info("receiving OTLP traces on http://%s/v1/traces", o.http_listen)
        address = parse_listen(o.grpc_listen) if o.grpc_listen else None
        if address is not None:
            try:
                self._grpc, self.ports["grpc"] = start_grpc(address, self.inbox,
                                                            o.max_request_bytes)  # fmt: skip
            except (OSError, RuntimeError) as exc:
                log.error("otlp.grpc_listen = %r: cannot listen there: %s", o.grpc_listen, exc)
            else:
                log.info("receiving OTLP traces over gRPC on %s", o.grpc_listen)

    def stop(self) -> None:
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None
        if self._grpc is not None:
            self._grpc.stop(grace=1.0).wait()
            self._grpc = None
        self.ports.clear()
        self._started = None
