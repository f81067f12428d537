"""AlertmanagerNotifier against the loopback server, and against Debian's real Alertmanager."""

from __future__ import annotations

import base64
import logging
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from alerts.alertmanager import AlertmanagerNotifier, alert_payload
from alerts.model import AlertState, Severity, State
from alerts.notify import NotifyError
from tests.alerts.notifiers.conftest import NOW, Loopback, Reply, alert, notification
from tests.real_alertmanager import alertmanager  # noqa: F401

PASSWORD = "amPassw0rd/secret"
API = "/api/v2/alerts"


def test_posts_firing_and_resolved_alerts_with_starts_and_ends(loopback: Loopback) -> None:
    loopback.reply(API, Reply(200))
    firing = alert(severity=Severity.CRITICAL, summary="idle")
    resolved = alert("GpuHot", state=State.RESOLVED, summary=None, host="box-1", gpu_index="1")
    notifier = AlertmanagerNotifier("am", loopback.url, generator_url="http://box-1:9400/alerts")

    result = notifier.send(notification((firing,), (resolved,)), NOW)

    assert result.ok
    (request,) = loopback.requests
    assert (request.method, request.path) == ("POST", API)
    assert request.json() == [
        {
            "labels": {
                "alertname": "GpuIdle",
                "gpu_index": "0",
                "host": "box-1",
                "severity": "critical",
            },
            "annotations": {"summary": "idle"},
            "startsAt": "2026-01-15T11:18:00.000Z",  # fired_at, as Prometheus sends
            "endsAt": "2026-01-15T12:04:00.000Z",  # now + 4 x the 1 min resend interval
            "generatorURL": "http://box-1:9400/alerts",
        },
        {
            "labels": {
                "alertname": "GpuHot",
                "gpu_index": "1",
                "host": "box-1",
                "severity": "warning",
            },
            "annotations": {},
            "startsAt": "2026-01-15T11:18:00.000Z",
            "endsAt": "2026-01-15T11:59:00.000Z",  # resolved_at
            "generatorURL": "http://box-1:9400/alerts",
        },
    ]


def test_payload_falls_back_to_active_at_and_drops_empty_labels() -> None:
    state = AlertState(
        key=alert(host="box-1", model="").key,
        state=State.FIRING,
        active_at=NOW - timedelta(minutes=5),
    )

    payload = alert_payload(state, NOW, resolved=False, resend_interval=timedelta(seconds=30))

    assert payload["labels"] == {"alertname": "GpuIdle", "host": "box-1", "severity": "warning"}
    assert (payload["startsAt"], payload["endsAt"]) == (
        "2026-01-15T11:55:00.000Z",
        "2026-01-15T12:02:00.000Z",
    )
    assert "generatorURL" not in payload


def test_a_url_prefix_is_kept(loopback: Loopback) -> None:
    loopback.reply(f"/am{API}", Reply(200))
    assert AlertmanagerNotifier("am", f"{loopback.url}/am/").send(notification((alert(),)), NOW).ok


@pytest.mark.parametrize(
    ("status", "retryable"), [(400, False), (404, False), (429, True), (500, True), (503, True)]
)
def test_statuses_are_classified(loopback: Loopback, status: int, retryable: bool) -> None:
    # Alertmanager answers a bad alert with 400 and a JSON string saying why.
    loopback.reply(API, Reply(status, '"invalid label set"', {"Retry-After": "2"}))

    result = AlertmanagerNotifier("am", loopback.url).send(notification((alert(),)), NOW)

    assert (result.ok, result.retryable) == (False, retryable)
    assert result.reason == f'HTTP {status}: "invalid label set"'
    assert result.retry_after_seconds == 2.0


def test_basic_auth_from_the_url_is_sent_but_never_shown(
    loopback: Loopback, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    loopback.reply(API, Reply(200), Reply(500, f"bad password {PASSWORD}"))
    url = loopback.url.replace("http://", "http://gpuwatch:amPassw0rd%2Fsecret@")
    notifier = AlertmanagerNotifier("am", url)

    results = [notifier.send(notification((alert(),)), NOW) for _ in range(2)]

    assert [r.ok for r in results] == [True, False]
    expected = base64.b64encode(f"gpuwatch:{PASSWORD}".encode()).decode()
    assert loopback.requests[0].headers["authorization"] == f"Basic {expected}"
    assert results[1].reason == "HTTP 500: bad password <redacted>"
    shown = [r.reason for r in results] + [caplog.text, repr(notifier)]
    for secret in (PASSWORD, "amPassw0rd%2Fsecret"):
        assert not [text for text in shown if secret in text]


def test_a_bad_url_raises_without_quoting_credentials() -> None:
    with pytest.raises(NotifyError) as raised:
        AlertmanagerNotifier("am", f"ftp://gpuwatch:{PASSWORD}@am.example")
    assert PASSWORD not in str(raised.value)


# --- the real thing -------------------------------------------------------------------------


def _listed(base: str, labels: dict[str, str]) -> list[dict[str, Any]]:
    alerts: list[dict[str, Any]] = httpx.get(f"{base}{API}", timeout=5).json()
    return [a for a in alerts if a["labels"] == labels]


def test_real_alertmanager_lists_a_firing_alert_and_drops_it_once_resolved(
    alertmanager: str,  # noqa: F811
) -> None:
    now = datetime.now(UTC).replace(microsecond=0)  # Alertmanager keeps milliseconds
    firing = AlertState(
        key=alert(host="box-1", gpu_index="0", model="llama-3-70b").key,
        state=State.FIRING,
        active_at=now - timedelta(minutes=40),
        fired_at=now - timedelta(minutes=10),
        value=0.01,
        annotations={"summary": "GPU idle (box-1, gpu 0)"},
    )
    notifier = AlertmanagerNotifier("am", alertmanager)

    assert notifier.send(notification((firing,)), now).ok

    labels = {
        "alertname": "GpuIdle",
        "host": "box-1",
        "gpu_index": "0",
        "model": "llama-3-70b",
        "severity": "warning",
    }
    (listed,) = _listed(alertmanager, labels)
    assert listed["status"]["state"] == "active"
    assert listed["annotations"] == {"summary": "GPU idle (box-1, gpu 0)"}
    assert _parse(listed["startsAt"]) == now - timedelta(minutes=10)
    assert _parse(listed["endsAt"]) > now

    later = datetime.now(UTC)
    resolved = replace(firing, state=State.RESOLVED, resolved_at=later)
    assert notifier.send(notification((), (resolved,)), later).ok

    # Alertmanager's API hides alerts whose endsAt has passed: a resolved alert is no longer
    # listed at all (not shown as "resolved"), even with every state filter on.
    everything = "active=true&silenced=true&inhibited=true&unprocessed=true"
    deadline = time.monotonic() + 5
    while _listed(alertmanager, labels) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _listed(alertmanager, labels) == []
    assert httpx.get(f"{alertmanager}{API}?{everything}", timeout=5).json() == []
    assert httpx.get(f"{alertmanager}{API}/groups", timeout=5).json() == []


def _parse(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))
