"""The ``[otlp]`` section: the OTLP receiver for the engines' per-request spans, off unless set.

    [otlp]
    http_listen = "127.0.0.1:4318"     # OTLP/HTTP (protobuf or JSON); "" (the default): off
    grpc_listen = "127.0.0.1:4317"     # OTLP/gRPC; "" (the default): off
    max_request_bytes = 4194304        # one export, decompressed (4 MiB)
    max_spans_per_second = 2000        # over it, exports are refused for the exporter to retry
    max_pending_spans = 50000          # request spans waiting for the next tick (oldest go)

vLLM (``--otlp-traces-endpoint``) and SGLang (``--enable-trace --otlp-traces-endpoint``) send one
span per finished request with its latencies and token counts; gpuwatch judges each against its
model's ``[[slo]]`` objective and counts them (docs/objectives.md). The listeners bind 127.0.0.1
unless told otherwise: the engines run on the same box.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agent.config.listen import parse_listen
from agent.config.reader import Reader

_KEYS = {"http_listen", "grpc_listen", "max_request_bytes", "max_spans_per_second",
         "max_pending_spans"}  # fmt: skip
MAX_REQUEST_BYTES = 64 * 1024 * 1024  # an exporter's batch of 512 spans is ~0.5 MiB
MAX_PENDING = 10_000_000  # ~1.5 GiB of facts: past it a typo, not a plan


@dataclass(frozen=True, slots=True)
class OtlpConfig:
    http_listen: str = ""
    grpc_listen: str = ""
    max_request_bytes: int = 4 * 1024 * 1024
    max_spans_per_second: float = 2000.0
    max_pending_spans: int = 50_000

    @property
    def enabled(self) -> bool:
        return bool(self.http_listen or self.grpc_listen)


def parse_otlp(r: Reader, top: dict[str, Any]) -> OtlpConfig:
    t = r.sub(top, "otlp", _KEYS)
    d = OtlpConfig()
    listens = [_listen(r, t, f"otlp.{key}") for key in ("http_listen", "grpc_listen")]
    if listens[0] and listens[0] == listens[1]:
        r.problem("otlp.grpc_listen", f"the same address as otlp.http_listen ({listens[0]!r})")
    size = r.number(t, "otlp.max_request_bytes", d.max_request_bytes, positive=True,
                    minimum=1024, maximum=MAX_REQUEST_BYTES, unit=" bytes")  # fmt: skip
    rate = r.number(t, "otlp.max_spans_per_second", d.max_spans_per_second, positive=True)
    pending = r.number(t, "otlp.max_pending_spans", d.max_pending_spans, positive=True,
                       minimum=1, maximum=MAX_PENDING)  # fmt: skip
    return OtlpConfig(listens[0], listens[1], int(size), rate, int(pending))


def _listen(r: Reader, t: dict[str, Any], key: str) -> str:
    listen = r.string(t, key, "")
    if listen and parse_listen(listen) is None:
        r.problem(key, f"expected HOST:PORT like '127.0.0.1:4318', got {listen!r}")
        return ""
    return listen
