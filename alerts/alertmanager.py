"""Alertmanager notifier: POST /api/v2/alerts, the way Prometheus hands alerts over.

Each alert goes as {labels, annotations, startsAt, endsAt}. A resolved alert's endsAt is when it
resolved. A firing alert's endsAt is ``now + 4 x resend_interval``, Prometheus' ``ValidUntil``:
Alertmanager then trusts the alert that long and resolves it on its own if we stop re-sending
(gpuwatch crashed, the box is gone), without waiting for its resolve_timeout. The flip side is
the contract with the caller: firing alerts must be re-sent at least every ``resend_interval``
(a route with a short repeat_interval), or Alertmanager will report them resolved. Leaving
endsAt out does not avoid that: Alertmanager then applies resolve_timeout (5 min by default).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import httpx

from alerts.dedup import Notification
from alerts.model import AlertState
from alerts.notify import SendResult, alert_labels, http_url, post_json, rfc3339, starts_at
from foundation.redact import redact_url

API_PATH = "/api/v2/alerts"
# Prometheus' --rules.alert.resend-delay default.
DEFAULT_RESEND_INTERVAL = timedelta(minutes=1)
# Prometheus' ValidUntil factor: "allow for two Eval or Alertmanager send failures".
_VALIDITY_FACTOR = 4


def alert_payload(
    state: AlertState,
    now: datetime,
    *,
    resolved: bool,
    resend_interval: timedelta = DEFAULT_RESEND_INTERVAL,
    generator_url: str | None = None,
) -> dict[str, Any]:
    """One postable alert (Alertmanager's OpenAPI ``postableAlert``)."""
    valid_until = now + _VALIDITY_FACTOR * resend_interval
    ends_at = (state.resolved_at or now) if resolved else valid_until
    payload: dict[str, Any] = {
        "labels": alert_labels(state),
        "annotations": dict(state.annotations),
        "startsAt": rfc3339(starts_at(state, now)),
        "endsAt": rfc3339(ends_at),
    }
    if generator_url:
        payload["generatorURL"] = generator_url
    return payload


class AlertmanagerNotifier:
    """Hands alerts to an Alertmanager, which then groups, silences and routes them itself.

    ``url`` is the Alertmanager's base URL (with its route prefix, if any); credentials in it
    are sent as basic auth and never shown. ``resend_interval``: see the module docstring.
    """

    __slots__ = (
        "name",
        "_auth",
        "_client",
        "_endpoint",
        "_generator_url",
        "_resend",
        "_secrets",
        "_timeout",
    )

    def __init__(
        self,
        name: str,
        url: str,
        *,
        client: httpx.Client | None = None,
        timeout_seconds: float = 10,
        resend_interval: timedelta = DEFAULT_RESEND_INTERVAL,
        generator_url: str | None = None,
    ) -> None:
        parsed = http_url(url, what=f"alertmanager notifier {name}: url", secret=True)
        self.name = name
        # The credentials leave the URL: httpx logs request URLs, and str(URL) keeps them.
        base = parsed.copy_with(username=None, password=None)
        self._endpoint = str(base).rstrip("/") + API_PATH
        # httpx.URL gives username and password already percent-decoded.
        username, password = parsed.username, parsed.password or ""
        self._auth = httpx.BasicAuth(username, password) if username or password else None
        self._secrets = tuple(s for s in (password, parsed.userinfo.decode()) if s)
        self._client = client
        self._timeout = timeout_seconds
        self._resend = resend_interval
        self._generator_url = generator_url

    def __repr__(self) -> str:
        return f"AlertmanagerNotifier({self.name!r}, {redact_url(self._endpoint)!r})"

    def send(self, notification: Notification, now: datetime) -> SendResult:
        """POST the notification's firing and resolved alerts in one request."""
        body = [self._payload(s, now, resolved=False) for s in notification.firing]
        body += [self._payload(s, now, resolved=True) for s in notification.resolved]
        return post_json(
            self._client,
            self._endpoint,
            body,
            now=now,
            timeout_seconds=self._timeout,
            secrets=self._secrets,
            auth=self._auth,
        )

    def _payload(self, state: AlertState, now: datetime, *, resolved: bool) -> dict[str, Any]:
        return alert_payload(
            state,
            now,
            resolved=resolved,
            resend_interval=self._resend,
            generator_url=self._generator_url,
        )
