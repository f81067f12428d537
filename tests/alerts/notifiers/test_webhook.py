"""WebhookNotifier (and the shared contract helpers) against the loopback server, over httpx."""

from __future__ import annotations

import logging
import math
import socket
import traceback
from datetime import timedelta
from email.utils import format_datetime

import httpx
import pytest

from alerts.alertmanager import AlertmanagerNotifier
from alerts.dedup import Reason
from alerts.model import Severity, State
from alerts.notify import (
    Notifier,
    NotifyError,
    SendResult,
    classify_status,
    redact,
    status_result,
)
from alerts.slack import SlackNotifier
from alerts.webhook import WebhookNotifier, webhook_payload
from tests.alerts.notifiers.conftest import NOW, Loopback, Reply, alert, notification

HOOK_TOKEN = "whk_pathSecret_abcdef123456"
QUERY_TOKEN = "qSecret_987654321zyx"
HOOK_PATH = f"/hooks/{HOOK_TOKEN}"
BEARER = "bearerSecret-0f1e2d3c4b5a"


def hook(loopback: Loopback, *replies: Reply, **settings: object) -> WebhookNotifier:
    loopback.reply(HOOK_PATH, *(replies or (Reply(200, "ok"),)))
    url = f"{loopback.url}{HOOK_PATH}?token={QUERY_TOKEN}"
    return WebhookNotifier("hook", url, **settings)  # type: ignore[arg-type]


def test_payload_is_shaped_like_alertmanager_s() -> None:
    firing = alert(severity=Severity.CRITICAL)
    resolved = alert(state=State.RESOLVED, summary="was idle", value=math.nan, host="box-1")
    note = notification((firing,), (resolved,), reason=Reason.SOME_RESOLVED)

    payload = webhook_payload(note, NOW)

    fired = "2026-01-15T11:18:00.000Z"
    assert payload == {
        "version": "1",
        "receiver": "ops",
        "status": "firing",
        "groupKey": 'ops:{alertname="GpuIdle",host="box-1"}',
        "reason": "some_resolved",
        "groupLabels": {"alertname": "GpuIdle", "host": "box-1"},
        "commonLabels": {"alertname": "GpuIdle", "host": "box-1"},
        "commonAnnotations": {},
        "alerts": [
            {
                "status": "firing",
                "labels": {
                    "alertname": "GpuIdle",
                    "gpu_index": "0",
                    "host": "box-1",
                    "severity": "critical",
                },
                "annotations": {"summary": "idle 42 min, $3.80 burnt"},
                "startsAt": fired,
                "endsAt": "0001-01-01T00:00:00Z",
                "value": 0.02,
            },
            {
                "status": "resolved",
                "labels": {"alertname": "GpuIdle", "host": "box-1", "severity": "warning"},
                "annotations": {"summary": "was idle"},
                "startsAt": fired,
                "endsAt": "2026-01-15T11:59:00.000Z",
                "value": None,
            },
        ],
    }


def test_all_resolved_is_a_resolved_payload() -> None:
    note = notification((), (alert(state=State.RESOLVED),), reason=Reason.ALL_RESOLVED)
    payload = webhook_payload(note, NOW)
    assert (payload["status"], payload["commonAnnotations"]) == (
        "resolved",
        {"summary": "idle 42 min, $3.80 burnt"},
    )


def test_posts_json_with_the_bearer_token(loopback: Loopback) -> None:
    note = notification((alert(),))

    result = hook(loopback, bearer_token=BEARER).send(note, NOW)

    assert result == SendResult(ok=True, retryable=False, reason="ok")
    (request,) = loopback.requests
    assert (request.method, request.path) == ("POST", f"{HOOK_PATH}?token={QUERY_TOKEN}")
    assert request.headers["authorization"] == f"Bearer {BEARER}"
    assert request.headers["content-type"] == "application/json"
    assert request.json() == webhook_payload(note, NOW)


def test_no_authorization_header_without_a_token(loopback: Loopback) -> None:
    assert hook(loopback).send(notification((alert(),)), NOW).ok
    assert "authorization" not in loopback.requests[0].headers


def test_a_given_client_is_used(loopback: Loopback) -> None:
    with httpx.Client(headers={"X-Seen": "yes"}) as client:
        assert hook(loopback, client=client).send(notification((alert(),)), NOW).ok
    assert loopback.requests[0].headers["x-seen"] == "yes"


@pytest.mark.parametrize(
    ("status", "ok", "retryable"),
    [
        (200, True, False),
        (204, True, False),
        (301, False, False),
        (400, False, False),
        (401, False, False),
        (404, False, False),
        (413, False, False),
        (429, False, True),
        (500, False, True),
        (502, False, True),
        (503, False, True),
    ],
)
def test_statuses_are_classified(
    loopback: Loopback, status: int, ok: bool, retryable: bool
) -> None:
    result = hook(loopback, Reply(status, "detail")).send(notification((alert(),)), NOW)

    assert (result.ok, result.retryable) == (ok, retryable)
    assert result.reason == ("ok" if ok else f"HTTP {status}: detail")
    assert classify_status(status) == (retryable, "ok" if ok else f"HTTP {status}")


def test_retry_after_is_read_as_seconds_or_date(loopback: Loopback) -> None:
    later = format_datetime(NOW + timedelta(seconds=90), usegmt=True)
    replies = (Reply(429, headers={"Retry-After": "3"}), Reply(503, headers={"Retry-After": later}))
    notifier = hook(loopback, *replies)

    first, second = (notifier.send(notification((alert(),)), NOW) for _ in range(2))

    assert (first.retryable, first.retry_after_seconds) == (True, 3.0)
    assert (second.retryable, second.retry_after_seconds) == (True, 90.0)


def test_a_timeout_is_retryable(loopback: Loopback) -> None:
    slow = Reply(200, "ok", delay_seconds=3)

    result = hook(loopback, slow, timeout_seconds=0.2).send(notification((alert(),)), NOW)

    assert (result.ok, result.retryable) == (False, True)
    assert result.reason.startswith("timeout")


def test_connection_refused_is_retryable_and_does_not_quote_the_url() -> None:
    with socket.socket() as probe:  # a port that was free a moment ago: nothing listens
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    notifier = WebhookNotifier("hook", f"http://127.0.0.1:{port}{HOOK_PATH}")

    result = notifier.send(notification((alert(),)), NOW)

    assert (result.ok, result.retryable) == (False, True)
    assert result.reason.startswith("ConnectError")
    assert HOOK_TOKEN not in result.reason


def test_secrets_never_reach_results_logs_or_repr(
    loopback: Loopback, caplog: pytest.LogCaptureFixture
) -> None:
    # httpx logs each request URL at INFO. `gpuwatch` quiets the httpx logger to WARNING, and a
    # CLI test earlier in the session leaves it so: set that logger itself, not only the root.
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="httpx")
    echo = f"denied {loopback.url}{HOOK_PATH}?token={QUERY_TOKEN} for Bearer {BEARER}"
    notifier = hook(loopback, Reply(200), Reply(401, echo), Reply(500, echo), bearer_token=BEARER)

    results = [notifier.send(notification((alert(),)), NOW) for _ in range(3)]

    assert [r.ok for r in results] == [True, False, False]
    assert "<redacted>" in results[1].reason
    assert any("HTTP Request: POST <redacted>" in m for m in caplog.messages)
    shown = [r.reason for r in results] + [caplog.text, repr(notifier)]
    for secret in (HOOK_TOKEN, QUERY_TOKEN, BEARER):
        assert not [text for text in shown if secret in text]


@pytest.mark.parametrize("url", ["ftp://hooks.example/x", "http:///nohost", "http://[::1"])
def test_a_bad_url_raises_without_quoting_it(url: str) -> None:
    with pytest.raises(NotifyError) as raised:
        WebhookNotifier("hook", url)
    assert url not in str(raised.value)
    assert url not in "".join(traceback.format_exception(raised.value))


def test_redact_replaces_plain_encoded_and_cut_secrets() -> None:
    secret = "p@ss word/123456"
    text = f"a {secret} b p%40ss%20word%2F123456 c {secret[:10]}..."
    assert redact(text, secret, "") == "a <redacted> b <redacted> c <redacted>..."
    assert redact("nothing here", "") == "nothing here"


def test_status_result_redacts_and_shortens_the_server_s_detail() -> None:
    result = status_result(400, detail="x" * 500 + " SECRET", secrets=["SECRET"])
    assert (result.ok, result.retryable) == (False, False)
    assert len(result.reason) <= len("HTTP 400: ") + 200 and result.reason.endswith("…")


def test_every_notifier_fulfils_the_contract() -> None:
    # Checked by mypy (the annotation) and at run time (the names the outbox records).
    notifiers: list[Notifier] = [
        WebhookNotifier("hook", "http://127.0.0.1:9/x"),
        AlertmanagerNotifier("am", "http://127.0.0.1:9"),
        SlackNotifier("slack", token="xoxb-1", channel="#c"),
    ]
    assert [n.name for n in notifiers] == ["hook", "am", "slack"]
