"""The notifier contract: one ``send`` per notification, returning what happened, never raising.

Alertmanager's ``Notifier.Notify`` returns ``(retry bool, err)``; here ``SendResult`` carries the
same two facts plus the reason (recorded, and a metric label) and the server's Retry-After. The
outbox that calls ``send`` owns retries, so notifiers try once and only *classify* a failure.

Secrets (tokens, webhook URLs, basic-auth passwords) must never reach a reason, an exception or
a log record: reasons go through ``redact``, and ``hide_in_logs`` scrubs the records that HTTP
libraries log on our behalf (httpx logs every request URL at INFO; slack_sdk logs the webhook
URL at DEBUG).
"""

from __future__ import annotations

import logging
import math
import traceback
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol
from urllib.parse import quote, unquote, urlsplit

import httpx

from alerts.dedup import Notification
from alerts.inhibit import ALERTNAME
from alerts.model import AlertState
from foundation.errors import GpuwatchError
from foundation.retry import parse_retry_after

REDACTED = "<redacted>"
SEVERITY_LABEL = "severity"
_DETAIL_LIMIT = 200  # characters of a server's error body kept in a reason
# The shortest leftover of a cut secret that is still redacted: shorter ones would match
# ordinary text ("http://") and reveal too little to matter.
_MIN_CUT = 8


class NotifyError(GpuwatchError, ValueError):
    """A notifier cannot be built from its settings (``send`` itself never raises)."""


@dataclass(frozen=True, slots=True)
class SendResult:
    """The outcome of one delivery attempt.

    ``retryable`` is meaningful only when not ``ok``: whether the same notification may succeed
    later (rate limit, server error, timeout). ``retry_after_seconds`` is the server's
    Retry-After, None when it gave none.
    """

    ok: bool
    retryable: bool
    reason: str
    retry_after_seconds: float | None = None


class Notifier(Protocol):
    """One configured receiver's integration (Slack, Alertmanager, a webhook)."""

    name: str

    def send(self, notification: Notification, now: datetime) -> SendResult:
        """Deliver once; classify delivery problems in the result instead of raising."""
        ...


def redact(text: str, *secrets: str) -> str:
    """``text`` with every non-empty secret (also percent-encoded) replaced by "<redacted>"."""
    variants = {v for s in secrets if s for v in (s, quote(s, safe=""), quote(s))}
    # Longest first, so a URL is replaced whole before a secret inside it is.
    for secret in sorted(variants, key=len, reverse=True):
        text = _redact_cut(text.replace(secret, REDACTED), secret)
    return text


def _redact_cut(text: str, secret: str) -> str:
    """Also redact what is left of ``secret`` where a library shortened the text inside it
    (slack_sdk quotes an unexpected body as its first 100 characters and "...")."""
    if secret[:_MIN_CUT] not in text:
        return text
    for size in range(len(secret) - 1, _MIN_CUT - 1, -1):
        prefix = secret[:size]
        for ellipsis in ("...", "…"):
            text = text.replace(prefix + ellipsis, REDACTED + ellipsis)
        if text.endswith(prefix):
            text = text[:-size] + REDACTED
    return text


def url_secrets(url: str) -> tuple[str, ...]:
    """What to redact for a URL that is itself a credential (a webhook URL).

    Hook tokens live after the host (Slack's /services/T/B/<token>, ?token=...), so the path and
    query are secrets on their own, in case a library reports them without the host.
    """
    parts = urlsplit(url)
    after_host = parts.path + (f"?{parts.query}" if parts.query else "")
    found = [url, str(httpx.URL(url))]
    if len(after_host) > 1:  # a bare "/" would blank out every slash
        found.append(after_host)
    if parts.password:
        found += [parts.password, unquote(parts.password)]
    return tuple(found)


def classify_status(code: int) -> tuple[bool, str]:
    """(retryable, reason) for an HTTP status; 2xx is success (retryable False, "ok")."""
    if 200 <= code < 300:
        return False, "ok"
    # 429: the receiver wants us back later. 5xx: its fault, likely transient (Alertmanager's
    # notify.Retrier draws the same line).
    if code == 429 or 500 <= code < 600:
        return True, f"HTTP {code}"
    # Other 4xx: the request itself is wrong (bad token, unknown channel, invalid payload), so
    # repeating it cannot help. 1xx/3xx: redirects are not followed, a moved endpoint needs config.
    return False, f"HTTP {code}"


def status_result(
    code: int,
    *,
    detail: str = "",
    retry_after_seconds: float | None = None,
    secrets: Iterable[str] = (),
) -> SendResult:
    """The SendResult for an HTTP reply, with the server's (redacted, shortened) explanation."""
    retryable, reason = classify_status(code)
    if 200 <= code < 300:
        return SendResult(ok=True, retryable=False, reason=reason)
    detail = shorten(redact(detail.strip(), *secrets), _DETAIL_LIMIT)
    return SendResult(
        ok=False,
        retryable=retryable,
        reason=f"{reason}: {detail}" if detail else reason,
        retry_after_seconds=retry_after_seconds,
    )


def post_json(
    client: httpx.Client | None,
    url: str,
    body: object,
    *,
    now: datetime,
    timeout_seconds: float,
    secrets: Sequence[str],
    headers: Mapping[str, str] | None = None,
    auth: httpx.Auth | None = None,
) -> SendResult:
    """POST ``body`` as JSON once and classify the outcome; ``auth`` None keeps the client's.

    Without ``client`` the request gets a client of its own: notifications are rare, and
    nothing then stays open between them.
    """
    chosen_auth = auth if auth is not None else httpx.USE_CLIENT_DEFAULT

    def post(via: httpx.Client) -> httpx.Response:
        return via.post(url, json=body, headers=headers, auth=chosen_auth, timeout=timeout_seconds)

    try:
        if client is not None:
            response = post(client)
        else:
            with httpx.Client() as own:
                response = post(own)
    except httpx.HTTPError as exc:
        return httpx_error_result(exc, *secrets)
    return status_result(
        response.status_code,
        detail=response.text,
        retry_after_seconds=parse_retry_after(header(response.headers, "Retry-After"), now),
        secrets=secrets,
    )


def httpx_error_result(exc: httpx.HTTPError, *secrets: str) -> SendResult:
    """Classify an httpx failure that produced no HTTP reply."""
    if isinstance(exc, httpx.TimeoutException):
        return SendResult(ok=False, retryable=True, reason=f"timeout ({type(exc).__name__})")
    # Network trouble, a dropped connection or a proxy failure may pass; a URL scheme httpx
    # cannot speak, or a request it refuses to write, will not.
    retryable = isinstance(exc, httpx.NetworkError | httpx.RemoteProtocolError | httpx.ProxyError)
    text = redact(f"{type(exc).__name__}: {exc}", *secrets)
    return SendResult(ok=False, retryable=retryable, reason=shorten(text, _DETAIL_LIMIT))


def header(headers: Mapping[str, str], name: str) -> str | None:
    """A header's value, whatever the case of its name (urllib keeps the server's spelling)."""
    wanted = name.lower()
    return next((v for k, v in headers.items() if k.lower() == wanted), None)


def shorten(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, the last one an ellipsis when cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def alert_labels(state: AlertState) -> dict[str, str]:
    """The labels a receiver sees: the alert's, plus alertname and severity, as Prometheus
    sends them. Empty values are dropped: to Prometheus an empty label is an absent one."""
    labels = {k: v for k, v in state.key.labels if v}
    return {**labels, ALERTNAME: state.key.rule, SEVERITY_LABEL: state.severity.value}


def starts_at(state: AlertState, now: datetime) -> datetime:
    """When the alert started firing: Prometheus sends FiredAt as startsAt; a state without it
    (not expected for notified alerts) falls back to when it became active, then to now."""
    return state.fired_at or state.active_at or now


def rfc3339(moment: datetime) -> str:
    """UTC RFC 3339 with milliseconds and "Z", as Alertmanager writes times; naive means UTC."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def finite(value: float | None) -> float | None:
    """``value``, or None for NaN and infinities, which strict JSON (httpx's) cannot carry."""
    return value if value is not None and math.isfinite(value) else None


class _Redactor(logging.Filter):
    """Rewrites a logger's records with every registered secret redacted."""

    def __init__(self) -> None:
        super().__init__()
        self.secrets: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = redact(message, *self.secrets)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info:
            # A formatted traceback can quote the URL too; format it now, redacted.
            text = "".join(traceback.format_exception(*record.exc_info))
            record.exc_text, record.exc_info = redact(text, *self.secrets).rstrip(), None
        return True


def hide_in_logs(logger: logging.Logger, *secrets: str) -> None:
    """Redact ``secrets`` from every record ``logger`` itself emits, from now on.

    A logger's filters see only its own records (not its children's), so pass the exact logger
    the library logs with. Secrets accumulate for the process's life: a notifier's secret
    must stay hidden as long as any client that knows it may still log.
    """
    redactor = next((f for f in logger.filters if isinstance(f, _Redactor)), None)
    if redactor is None:
        redactor = _Redactor()
        logger.addFilter(redactor)
    redactor.secrets.update(s for s in secrets if s)


def http_url(url: str, *, what: str, secret: bool) -> httpx.URL:
    """``url`` parsed, or NotifyError naming ``what``; a secret URL is not quoted in the error
    (nor chained: the parser's own message would quote it)."""
    shown = "" if secret else f" {url!r}"
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError):
        raise NotifyError(f"{what}: not a valid URL{shown}") from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise NotifyError(f"{what}: expected an http(s) URL with a host{shown}")
    return parsed
