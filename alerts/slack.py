"""Slack notifier: an incoming webhook, or a bot token with chat.postMessage (slack_sdk).

The only module that imports slack_sdk. Its retry handlers are off (``retry_handlers=[]``): the
outbox retries, and an SDK that sleeps out a Retry-After inside ``send`` would stall every other
notification behind it. Label values and summaries are escaped for mrkdwn, so a model named
"<!channel>" is shown, not obeyed; texts are cut to Slack's limits with a logged warning.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from http.client import HTTPException
from typing import Any

from slack_sdk.errors import SlackApiError, SlackRequestError
from slack_sdk.web import SlackResponse, WebClient
from slack_sdk.webhook import WebhookClient

from alerts.dedup import Notification
from alerts.model import AlertState
from alerts.mrkdwn import BLOCK_LIMIT, SECTION_LIMIT, TEXT_LIMIT, cut_escaped, escape
from alerts.notify import (
    NotifyError,
    SendResult,
    header,
    hide_in_logs,
    http_url,
    redact,
    shorten,
    status_result,
    url_secrets,
)
from foundation.retry import parse_retry_after

__all__ = ["BLOCK_LIMIT", "SECTION_LIMIT", "TEXT_LIMIT", "SlackMessage", "SlackNotifier",
           "cut_escaped", "escape", "render"]  # fmt: skip

# The header takes one block and the "more alerts" note may take another.
_LINE_SECTIONS = BLOCK_LIMIT - 2
# chat.postMessage errors Slack documents as transient; all others describe the request
# (invalid_auth, channel_not_found, ...). fatal_error is left out: Slack says part of the
# operation may have succeeded, and a retry could post twice.
_TRANSIENT_ERRORS = frozenset(
    {"ratelimited", "internal_error", "service_unavailable", "request_timeout"}
)

logger = logging.getLogger(__name__)
# Handed to the slack_sdk clients, so that their records (the webhook URL at DEBUG) pass
# through a redacting filter; their default loggers are shared with other slack_sdk users.
_SDK_LOGGER = logging.getLogger(f"{__name__}.sdk")


@dataclass(frozen=True, slots=True)
class SlackMessage:
    """What is posted: fallback ``text``, ``blocks``, and what had to be cut (for the warning)."""

    text: str
    blocks: tuple[dict[str, Any], ...]
    cuts: tuple[str, ...] = ()


def render(notification: Notification) -> SlackMessage:
    """The message for one notification: a header with group and counts, one line per alert."""
    head = escape(_header(notification))
    states = [("FIRING", s) for s in notification.firing]
    states += [("RESOLVED", s) for s in notification.resolved]
    lines = [escape(alert_line(status, s)) for status, s in states]
    cuts: list[str] = []
    if any(len(line) > SECTION_LIMIT for line in lines):
        cuts.append(f"alert lines over {SECTION_LIMIT} characters")
        lines = [cut_escaped(line, SECTION_LIMIT) for line in lines]
    sections, dropped = _pack(lines)
    if dropped:
        cuts.append(f"{dropped} alerts beyond {BLOCK_LIMIT} blocks")
        sections.append(f"… and {dropped} more alerts")
    text = "\n".join([head, *lines])
    if len(text) > TEXT_LIMIT:
        cuts.append(f"text over {TEXT_LIMIT} characters")
        text = cut_escaped(text, TEXT_LIMIT)
    bold = f"*{cut_escaped(head, SECTION_LIMIT - 2)}*"
    blocks = tuple(_section(t) for t in [bold, *sections])
    return SlackMessage(text, blocks, tuple(cuts))


def alert_line(status: str, state: AlertState) -> str:
    """ "[FIRING] GpuIdle on box-1 gpu 0: <summary>" (unescaped, on one line)."""
    labels = state.key.label_map()
    where = _where(labels)
    text = f"[{status}] {state.key.rule}" + (f" on {where}" if where else "")
    detail = state.annotations.get("summary") or _fallback_detail(labels, state.value)
    # One line per alert: a multi-line summary would break the layout.
    return " ".join(f"{text}: {detail}".split()) if detail else text


def _where(labels: Mapping[str, str]) -> str:
    parts = [labels["host"]] if labels.get("host") else []
    if labels.get("gpu_index"):
        parts.append(f"gpu {labels['gpu_index']}")
    return " ".join(parts)


def _fallback_detail(labels: Mapping[str, str], value: float | None) -> str:
    # Without a summary the reader still needs the identifying labels and the value.
    shown = [f"{k}={v}" for k, v in labels.items() if k not in ("host", "gpu_index")]
    if value is not None:
        shown.append(f"value {value:g}")
    return ", ".join(shown)


def _header(notification: Notification) -> str:
    counts = [f"FIRING:{len(notification.firing)}"] if notification.firing else []
    if notification.resolved:
        counts.append(f"RESOLVED:{len(notification.resolved)}")
    group = ", ".join(f"{k}={v}" for k, v in notification.group.labels)
    return f"[{', '.join(counts)}] {group or notification.receiver}"


def _pack(lines: list[str]) -> tuple[list[str], int]:
    """Lines joined into as few sections as fit; also how many lines did not fit at all."""
    sections: list[str] = []
    for index, line in enumerate(lines):
        if sections and len(sections[-1]) + 1 + len(line) <= SECTION_LIMIT:
            sections[-1] += "\n" + line
        elif len(sections) == _LINE_SECTIONS:
            return sections, len(lines) - index
        else:
            sections.append(line)
    return sections, 0


def _section(text: str) -> dict[str, Any]:
    return {"type": "section", "text": {"type": "mrkdwn", "text": text}}


class SlackNotifier:
    """Posts notifications to Slack through an incoming webhook or chat.postMessage.

    Give exactly one of ``webhook_url`` or ``token`` (with ``channel``); ``base_url`` points
    the Web API client elsewhere (tests). Neither secret appears in results, errors or logs.
    """

    __slots__ = ("name", "_channel", "_secrets", "_web", "_webhook")
    _web: WebClient | None
    _webhook: WebhookClient | None

    def __init__(
        self,
        name: str,
        *,
        webhook_url: str | None = None,
        token: str | None = None,
        channel: str | None = None,
        base_url: str | None = None,
        timeout_seconds: int = 10,
    ) -> None:
        _check_settings(name, webhook_url, token, channel, base_url)
        self.name = name
        self._channel = channel or ""
        self._secrets = url_secrets(webhook_url) if webhook_url else (token or "",)
        # Before the clients exist: they may log as soon as they are built.
        hide_in_logs(_SDK_LOGGER, *self._secrets)
        self._webhook = None
        self._web = None
        if webhook_url:
            self._webhook = WebhookClient(
                webhook_url, timeout=timeout_seconds, logger=_SDK_LOGGER, retry_handlers=[]
            )
        else:
            self._web = WebClient(
                token=token,
                base_url=base_url or WebClient.BASE_URL,
                timeout=timeout_seconds,
                logger=_SDK_LOGGER,
                retry_handlers=[],
            )

    def __repr__(self) -> str:
        mode = "webhook" if self._webhook is not None else f"chat.postMessage to {self._channel}"
        return f"SlackNotifier({self.name!r}, {mode})"

    def send(self, notification: Notification, now: datetime) -> SendResult:
        """Post once; rate limits, 5xx, timeouts and connection errors are retryable."""
        message = render(notification)
        if message.cuts:
            logger.warning(
                "slack notifier %s: message for %s truncated to Slack's limits: %s",
                self.name,
                notification.group,
                "; ".join(message.cuts),
            )
        return self.post(message.text, message.blocks, now)

    def post(self, text: str, blocks: Sequence[Mapping[str, Any]], now: datetime) -> SendResult:
        """Post one message as given (already within Slack's limits), once; never raises."""
        try:
            if self._webhook is not None:
                return self._post_webhook(self._webhook, text, blocks, now)
            assert self._web is not None
            return self._post_message(self._web, text, blocks, now)
        except SlackRequestError as exc:  # the SDK refused the request before sending it
            return self._failure(False, f"request refused: {exc}")
        except (OSError, HTTPException) as exc:  # urllib: URLError, timeouts, resets
            if _is_timeout(exc):
                return self._failure(True, "timeout")
            return self._failure(True, f"connection error: {exc}")

    def _post_webhook(
        self,
        client: WebhookClient,
        text: str,
        blocks: Sequence[Mapping[str, Any]],
        now: datetime,
    ) -> SendResult:
        response = client.send(text=text, blocks=[dict(b) for b in blocks])
        return status_result(
            response.status_code,
            detail=response.body,
            retry_after_seconds=parse_retry_after(header(response.headers, "Retry-After"), now),
            secrets=self._secrets,
        )

    def _post_message(
        self, client: WebClient, text: str, blocks: Sequence[Mapping[str, Any]], now: datetime
    ) -> SendResult:
        try:
            client.chat_postMessage(
                channel=self._channel, text=text, blocks=[dict(b) for b in blocks]
            )
        except SlackApiError as exc:
            return self._api_failure(exc.response, now)
        return SendResult(ok=True, retryable=False, reason="ok")

    def _api_failure(self, response: SlackResponse, now: datetime) -> SendResult:
        data = response.data
        error = str(data.get("error", "")) if isinstance(data, dict) else ""
        retry_after = parse_retry_after(header(response.headers, "Retry-After"), now)
        if response.status_code != 200:
            return status_result(
                response.status_code,
                detail=error,
                retry_after_seconds=retry_after,
                secrets=self._secrets,
            )
        # HTTP 200 with {"ok": false}: Slack's error string decides.
        result = self._failure(error in _TRANSIENT_ERRORS, f"slack error: {error or 'unknown'}")
        return SendResult(result.ok, result.retryable, result.reason, retry_after)

    def _failure(self, retryable: bool, reason: str) -> SendResult:
        return SendResult(
            ok=False, retryable=retryable, reason=shorten(redact(reason, *self._secrets), 200)
        )


def _is_timeout(exc: Exception) -> bool:
    # A read timeout surfaces as TimeoutError, a connect timeout as URLError wrapping one.
    return isinstance(exc, TimeoutError) or isinstance(getattr(exc, "reason", None), TimeoutError)


def _check_settings(
    name: str,
    webhook_url: str | None,
    token: str | None,
    channel: str | None,
    base_url: str | None,
) -> None:
    # Messages name the settings, never their values: both are credentials.
    if (webhook_url is None) == (token is None):
        raise NotifyError(f"slack notifier {name}: give exactly one of webhook_url or token")
    if token is not None and not channel:
        raise NotifyError(f"slack notifier {name}: a token needs a channel")
    if webhook_url is not None:
        if channel or base_url:
            # An incoming webhook is bound to its channel; silently ignoring these would post
            # somewhere the user did not ask for.
            raise NotifyError(f"slack notifier {name}: channel and base_url apply only to a token")
        http_url(webhook_url, what=f"slack notifier {name}: webhook_url", secret=True)
