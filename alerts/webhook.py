"""Generic JSON webhook notifier, its payload shaped like Alertmanager's webhook_config one.

Receivers written for Alertmanager (chat bridges, ticketing hooks) read the same keys: status,
receiver, groupKey, groupLabels, commonLabels, commonAnnotations and alerts with status, labels,
annotations, startsAt and endsAt. ``version`` is this payload's own ("1"), and each alert adds
``value``. The URL is treated as a credential (hook URLs usually carry their token), as is the
bearer token: neither appears in results, errors or logs.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import httpx

from alerts.dedup import Notification
from alerts.model import AlertState
from alerts.notify import (
    SendResult,
    alert_labels,
    finite,
    hide_in_logs,
    http_url,
    post_json,
    rfc3339,
    starts_at,
    url_secrets,
)

PAYLOAD_VERSION = "1"
# What Alertmanager's webhook sends as a firing alert's endsAt (Go's zero time), so receivers
# that parse it as a time keep working.
ZERO_TIME = "0001-01-01T00:00:00Z"
# httpx logs every request URL at INFO on this logger.
_HTTPX_LOGGER = logging.getLogger("httpx")


def webhook_payload(notification: Notification, now: datetime) -> dict[str, Any]:
    """The JSON document posted for one notification."""
    alerts = [_alert(s, now, resolved=False) for s in notification.firing]
    alerts += [_alert(s, now, resolved=True) for s in notification.resolved]
    labels = [a["labels"] for a in alerts]
    annotations = [a["annotations"] for a in alerts]
    return {
        "version": PAYLOAD_VERSION,
        "receiver": notification.receiver,
        # As Alertmanager: the group fires while any of its alerts does.
        "status": "firing" if notification.firing else "resolved",
        "groupKey": str(notification.group),
        "reason": notification.reason.value,
        "groupLabels": dict(notification.group.labels),
        "commonLabels": _common(labels),
        "commonAnnotations": _common(annotations),
        "alerts": alerts,
    }


def _alert(state: AlertState, now: datetime, *, resolved: bool) -> dict[str, Any]:
    ends_at = rfc3339(state.resolved_at or now) if resolved else ZERO_TIME
    return {
        "status": "resolved" if resolved else "firing",
        "labels": alert_labels(state),
        "annotations": dict(state.annotations),
        "startsAt": rfc3339(starts_at(state, now)),
        "endsAt": ends_at,
        "value": finite(state.value),  # NaN is not JSON: null, like a missing value
    }


def _common(mappings: Sequence[Mapping[str, str]]) -> dict[str, str]:
    """The pairs every mapping shares (Alertmanager's commonLabels / commonAnnotations)."""
    if not mappings:
        return {}
    first, *rest = mappings
    return {k: v for k, v in first.items() if all(m.get(k) == v for m in rest)}


class WebhookNotifier:
    """POSTs ``webhook_payload`` as JSON, with an optional bearer token."""

    __slots__ = ("name", "_client", "_headers", "_secrets", "_timeout", "_url")

    def __init__(
        self,
        name: str,
        url: str,
        *,
        bearer_token: str | None = None,
        client: httpx.Client | None = None,
        timeout_seconds: float = 10,
    ) -> None:
        http_url(url, what=f"webhook notifier {name}: url", secret=True)
        self.name = name
        self._url = url
        self._headers = {"Authorization": f"Bearer {bearer_token}"} if bearer_token else {}
        self._secrets = (*url_secrets(url), *((bearer_token,) if bearer_token else ()))
        self._client = client
        self._timeout = timeout_seconds
        hide_in_logs(_HTTPX_LOGGER, *self._secrets)

    def __repr__(self) -> str:
        return f"WebhookNotifier({self.name!r})"

    def send(self, notification: Notification, now: datetime) -> SendResult:
        """POST once; 429, 5xx, timeouts and network errors are retryable."""
        return post_json(
            self._client,
            self._url,
            webhook_payload(notification, now),
            now=now,
            timeout_seconds=self._timeout,
            secrets=self._secrets,
            headers=self._headers,
        )
