"""An OTLP/HTTP trace export's body into its message: binary protobuf or OTLP/JSON, plain or
gzip, within a size limit (the decompressed size included: a small gzip body can unpack to
gigabytes).

OTLP/JSON differs from protobuf's own JSON mapping in one way that matters: trace and span IDs
are hex, not base64 (opentelemetry-specification, otlp.md "JSON Protobuf Encoding"). The IDs say
nothing about latency, so they are dropped before parsing rather than mis-decoded.
"""

from __future__ import annotations

import json
import zlib
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
_IDS = ("traceId", "spanId", "parentSpanId", "trace_id", "span_id", "parent_span_id")


class BadExport(ValueError):
    """The body is not an OTLP trace export; ``status`` is the HTTP status to answer."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def decode(body: bytes, content_type: str, encoding: str, limit: int) -> ExportTraceServiceRequest:
    """The export in ``body``; raises BadExport naming what was wrong."""
    data = _inflate(body, encoding.strip().lower(), limit)
    media = content_type.split(";", 1)[0].strip().lower()
    if media == PROTOBUF:
        return _protobuf(data)
    if media == JSON:
        return _json(data)
    raise BadExport(
        f"unsupported Content-Type {content_type!r}: send {PROTOBUF} or {JSON}", status=415
    )


def _inflate(body: bytes, encoding: str, limit: int) -> bytes:
    if encoding in ("", "identity"):
        return body
    if encoding != "gzip":
        raise BadExport(f"unsupported Content-Encoding {encoding!r}: send gzip or none", 415)
    inflater = zlib.decompressobj(wbits=31)  # 31: a gzip header and trailer
    try:
        data = inflater.decompress(body, limit + 1)
    except zlib.error as exc:
        raise BadExport(f"the gzip body does not decompress: {exc}") from None
    if len(data) > limit or inflater.unconsumed_tail:
        raise BadExport(f"the body decompresses to more than {limit} bytes", status=413)
    return data


def _protobuf(data: bytes) -> ExportTraceServiceRequest:
    message = ExportTraceServiceRequest()
    try:
        message.ParseFromString(data)
    except DecodeError as exc:
        raise BadExport(f"not an OTLP protobuf trace export: {exc}") from None
    return message


def _json(data: bytes) -> ExportTraceServiceRequest:
    try:
        document = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadExport(f"not JSON: {exc}") from None
    if not isinstance(document, dict):
        raise BadExport("an OTLP/JSON export is an object with resourceSpans")
    _drop_ids(document)
    message = ExportTraceServiceRequest()
    try:
        # Unknown fields are ignored, as the OTLP specification asks of receivers.
        json_format.ParseDict(document, message, ignore_unknown_fields=True)
    except (json_format.ParseError, ValueError, TypeError) as exc:
        raise BadExport(f"not an OTLP/JSON trace export: {exc}") from None
    return message


def _drop_ids(document: dict[str, Any]) -> None:
    for resource in _items(document, "resourceSpans", "resource_spans"):
        for scope in _items(resource, "scopeSpans", "scope_spans"):
            for span in _items(scope, "spans"):
                for key in _IDS:
                    span.pop(key, None)
                span.pop("links", None)  # links carry IDs too


def _items(parent: object, *keys: str) -> list[dict[str, Any]]:
    if not isinstance(parent, dict):
        return []
    for key in keys:
        value = parent.get(key)
        if isinstance(value, list):
            return [item for item in value if isinstance(item, dict)]
    return []
