"""SlackNotifier through the real slack_sdk clients, pointed at the loopback server."""

from __future__ import annotations

import logging
import socket
import traceback
from collections.abc import Callable, Iterable
from typing import Any

import pytest

from alerts.model import State
from alerts.notify import NotifyError, SendResult
from alerts.slack import BLOCK_LIMIT, SECTION_LIMIT, TEXT_LIMIT, SlackNotifier, render
from tests.alerts.notifiers.conftest import NOW, Loopback, Reply, alert, notification

HOOK_SECRET = "hookSecret0123456789abcdef"
HOOK_PATH = f"/services/T000/B000/{HOOK_SECRET}"
TOKEN = "xoxb-1234-5678-tokenSecretValue"
POST_PATH = "/api/chat.postMessage"
SECRETS = (HOOK_SECRET, TOKEN)


def webhook(loopback: Loopback, *replies: Reply, timeout: int = 10) -> SlackNotifier:
    loopback.reply(HOOK_PATH, *(replies or (Reply(200, "ok"),)))
    return SlackNotifier("slack", webhook_url=loopback.url + HOOK_PATH, timeout_seconds=timeout)


def bot(loopback: Loopback, *replies: Reply, timeout: int = 10) -> SlackNotifier:
    loopback.reply(POST_PATH, *(replies or (Reply(200, {"ok": True, "ts": "1.2"}),)))
    return SlackNotifier(
        "slack",
        token=TOKEN,
        channel="#gpu",
        base_url=f"{loopback.url}/api/",
        timeout_seconds=timeout,
    )


def texts(blocks: Iterable[dict[str, object]]) -> list[str]:
    return [block["text"]["text"] for block in blocks]  # type: ignore[index]


def test_webhook_posts_text_and_blocks_to_the_hook_url(loopback: Loopback) -> None:
    firing, resolved = alert(), alert(state=State.RESOLVED, gpu_index="1", host="box-1")
    result = webhook(loopback).send(notification((firing,), (resolved,)), NOW)

    assert result == SendResult(ok=True, retryable=False, reason="ok")
    (request,) = loopback.requests
    assert (request.method, request.path) == ("POST", HOOK_PATH)
    body = request.json()
    header = "[FIRING:1, RESOLVED:1] alertname=GpuIdle, host=box-1"
    lines = [
        "[FIRING] GpuIdle on box-1 gpu 0: idle 42 min, $3.80 burnt",
        "[RESOLVED] GpuIdle on box-1 gpu 1: idle 42 min, $3.80 burnt",
    ]
    assert body["text"] == "\n".join([header, *lines])
    assert texts(body["blocks"]) == [f"*{header}*", "\n".join(lines)]
    assert all(b["type"] == "section" and b["text"]["type"] == "mrkdwn" for b in body["blocks"])


def test_chat_post_message_sends_channel_text_blocks_and_bearer_token(loopback: Loopback) -> None:
    result = bot(loopback).send(notification((alert(),)), NOW)

    assert result.ok
    (request,) = loopback.requests
    assert request.path == POST_PATH
    assert request.headers["authorization"] == f"Bearer {TOKEN}"
    body = request.json()
    assert body["channel"] == "#gpu"
    assert body["text"].endswith("[FIRING] GpuIdle on box-1 gpu 0: idle 42 min, $3.80 burnt")
    assert len(body["blocks"]) == 2


def test_a_line_without_summary_shows_labels_and_value() -> None:
    state = alert("QueueGrowing", summary=None, value=37.0, host="box-2", model="llama")
    message = render(notification((state,)))
    assert message.text.splitlines()[1] == "[FIRING] QueueGrowing on box-2: model=llama, value 37"


def test_label_values_are_escaped_so_nobody_gets_pinged(loopback: Loopback) -> None:
    model = "<!channel> & <@U123>"
    state = alert(summary=f"model {model} idle", host="box-1", model=model)
    bare = alert(summary=None, host="box-1", gpu_index="1", model=model)

    assert webhook(loopback).send(notification((state, bare)), NOW).ok

    body = loopback.requests[0].json()
    for text in [body["text"], *texts(body["blocks"])]:
        assert "<" not in text and ">" not in text
    assert "model &lt;!channel&gt; &amp; &lt;@U123&gt; idle" in body["text"]
    assert "model=&lt;!channel&gt; &amp; &lt;@U123&gt;" in body["text"]


def test_a_huge_summary_is_truncated_with_a_warning(
    loopback: Loopback, caplog: pytest.LogCaptureFixture
) -> None:
    state = alert(summary="&" * 50_000)  # escapes to five times its length

    with caplog.at_level(logging.WARNING, logger="alerts.slack"):
        assert bot(loopback).send(notification((state,)), NOW).ok

    body = loopback.requests[0].json()
    line = texts(body["blocks"])[1]
    # Cut before the entity that would have crossed the limit, not inside it.
    assert SECTION_LIMIT - 5 < len(line) <= SECTION_LIMIT and line.endswith("&amp;…")
    assert len(body["text"]) <= TEXT_LIMIT
    assert "truncated to Slack's limits" in caplog.text


def test_too_many_alerts_are_cut_to_the_block_limit_with_a_count() -> None:
    states = tuple(alert(summary="s" * 1400, gpu_index=str(i)) for i in range(200))

    message = render(notification(states))

    assert len(message.blocks) == BLOCK_LIMIT
    shown = sum(t.count("[FIRING]") for t in texts(message.blocks[1:]))
    assert texts(message.blocks)[-1] == f"… and {200 - shown} more alerts"
    assert message.cuts and all(len(t) <= SECTION_LIMIT for t in texts(message.blocks))


@pytest.mark.parametrize("make", [webhook, bot], ids=["webhook", "chat.postMessage"])
def test_429_is_retryable_with_retry_after_and_not_retried_by_the_sdk(
    loopback: Loopback, make: Callable[..., SlackNotifier]
) -> None:
    limited = Reply(429, {"ok": False, "error": "ratelimited"}, {"Retry-After": "7"})

    result = make(loopback, limited).send(notification((alert(),)), NOW)

    assert (result.ok, result.retryable, result.retry_after_seconds) == (False, True, 7.0)
    assert result.reason.startswith("HTTP 429")
    assert len(loopback.requests) == 1  # our outbox retries, not slack_sdk


@pytest.mark.parametrize("make", [webhook, bot], ids=["webhook", "chat.postMessage"])
def test_server_errors_are_retryable(
    loopback: Loopback, make: Callable[..., SlackNotifier]
) -> None:
    result = make(loopback, Reply(500, "<html>oops</html>")).send(notification((alert(),)), NOW)

    assert (result.ok, result.retryable) == (False, True)
    assert result.reason.startswith("HTTP 500")


def test_api_error_invalid_auth_is_not_retryable(loopback: Loopback) -> None:
    rejected = Reply(200, {"ok": False, "error": "invalid_auth"})

    result = bot(loopback, rejected).send(notification((alert(),)), NOW)

    assert (result.ok, result.retryable) == (False, False)
    assert "invalid_auth" in result.reason


def test_transient_api_errors_are_retryable(loopback: Loopback) -> None:
    busy = Reply(200, {"ok": False, "error": "service_unavailable"})
    result = bot(loopback, busy).send(notification((alert(),)), NOW)
    assert (result.ok, result.retryable) == (False, True)


def test_webhook_4xx_is_not_retryable_and_keeps_slack_s_error(loopback: Loopback) -> None:
    result = webhook(loopback, Reply(404, "no_service")).send(notification((alert(),)), NOW)

    assert (result.ok, result.retryable, result.reason) == (False, False, "HTTP 404: no_service")


@pytest.mark.parametrize("make", [webhook, bot], ids=["webhook", "chat.postMessage"])
def test_a_timeout_is_retryable(loopback: Loopback, make: Callable[..., SlackNotifier]) -> None:
    slow = Reply(200, {"ok": True}, delay_seconds=3)

    result = make(loopback, slow, timeout=1).send(notification((alert(),)), NOW)

    assert (result.ok, result.retryable, result.reason) == (False, True, "timeout")


def test_connection_refused_is_retryable() -> None:
    with socket.socket() as probe:  # a port that was free a moment ago: nothing listens
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    notifier = SlackNotifier("slack", webhook_url=f"http://127.0.0.1:{port}{HOOK_PATH}")

    result = notifier.send(notification((alert(),)), NOW)

    assert (result.ok, result.retryable) == (False, True)
    assert result.reason.startswith("connection error")
    assert HOOK_SECRET not in result.reason


def test_secrets_never_reach_results_logs_or_repr(
    loopback: Loopback, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)  # slack_sdk logs the webhook URL at DEBUG
    # A server that echoes the request URL and token in its error must not leak them either.
    echo = f"bad {loopback.url}{HOOK_PATH}"
    hook = webhook(loopback, Reply(200, "ok"), Reply(400, echo), Reply(500, echo), Reply(429, echo))
    api = bot(loopback, Reply(403, f"bad {TOKEN}"), Reply(200, {"ok": False, "error": TOKEN}))
    results = [n.send(notification((alert(),)), NOW) for n in [hook] * 4 + [api] * 2]

    assert [r.ok for r in results] == [True, False, False, False, False, False]
    shown = [r.reason for r in results] + [caplog.text] + [r.getMessage() for r in caplog.records]
    shown += [repr(webhook(loopback)), repr(bot(loopback))]
    for secret in SECRETS:
        assert not [text for text in shown if secret in text]
    assert any("<redacted>" in m for m in caplog.messages)  # the SDK did log the URL, redacted


@pytest.mark.parametrize(
    "settings",
    [
        {"webhook_url": f"http://hooks.example{HOOK_PATH}", "token": TOKEN},
        {},
        {"token": TOKEN},
        {"webhook_url": f"http://hooks.example{HOOK_PATH}", "channel": "#gpu"},
        {"webhook_url": f"ftp://hooks.example{HOOK_PATH}"},
    ],
)
def test_bad_settings_raise_without_quoting_secrets(settings: dict[str, Any]) -> None:
    with pytest.raises(NotifyError) as raised:
        SlackNotifier("slack", **settings)
    # Nor in the printed traceback: the parser's own error must not be chained.
    assert not [s for s in SECRETS if s in "".join(traceback.format_exception(raised.value))]
