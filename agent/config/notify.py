"""The ``[notify]`` section: where alerts go (Slack, Alertmanager, a generic webhook).

    [notify.slack]
    webhook_url_env = "GPUWATCH_SLACK_WEBHOOK"   # or token_env / token_file + channel
    [notify.alertmanager]
    url = "http://127.0.0.1:9093"
    [notify.webhook]
    url = "https://hooks.example/gpuwatch"       # or url_env / url_file when it holds a token

Every URL is checked here, offline: a wrong plain one is quoted without its credentials, a
wrong secret one (from ``*_env`` / ``*_file``) only named by where it came from.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agent.config.reader import Reader, http_url_problem
from agent.config.secret import Secret


@dataclass(frozen=True, slots=True)
class SlackConfig:
    webhook_url: Secret | None = None
    token: Secret | None = None
    channel: str | None = None


@dataclass(frozen=True, slots=True)
class AlertmanagerConfig:
    url: str | None = None


@dataclass(frozen=True, slots=True)
class WebhookConfig:
    # A plain ``url`` or, where the URL itself carries a token, ``url_env`` / ``url_file``.
    url: Secret | None = None
    bearer_token: Secret | None = None


@dataclass(frozen=True, slots=True)
class NotifyConfig:
    slack: SlackConfig = field(default_factory=SlackConfig)
    alertmanager: AlertmanagerConfig = field(default_factory=AlertmanagerConfig)
    webhook: WebhookConfig = field(default_factory=WebhookConfig)

    @property
    def any(self) -> bool:
        slack = self.slack.webhook_url is not None or self.slack.token is not None
        return slack or self.alertmanager.url is not None or self.webhook.url is not None


def parse_notify(r: Reader, top: dict[str, Any]) -> NotifyConfig:
    t = r.sub(top, "notify", {"slack", "alertmanager", "webhook"})
    slack = r.table(
        t.get("notify.slack", {}),
        "notify.slack",
        {"webhook_url_env", "webhook_url_file", "token_env", "token_file", "channel"},
    )
    am = r.table(t.get("notify.alertmanager", {}), "notify.alertmanager", {"url"})
    token = r.secret(slack, "notify.slack.token")
    channel = r.optional_string(slack, "notify.slack.channel")
    if token is not None and channel is None:
        r.problem(
            "notify.slack.channel", "missing (chat.postMessage with token_env needs a channel)"
        )
    return NotifyConfig(
        slack=SlackConfig(
            webhook_url=_secret_url(r, slack, "notify.slack.webhook_url"),
            token=token,
            channel=channel,
        ),
        alertmanager=AlertmanagerConfig(url=r.http_url(am, "notify.alertmanager.url")),
        webhook=_webhook(r, t),
    )


def _webhook(r: Reader, t: dict[str, Any]) -> WebhookConfig:
    keys = {"url", "url_env", "url_file", "bearer_token_env", "bearer_token_file"}
    hook = r.table(t.get("notify.webhook", {}), "notify.webhook", keys)
    plain = r.http_url(hook, "notify.webhook.url")
    hidden = _secret_url(r, hook, "notify.webhook.url")
    if plain is not None and hidden is not None:
        r.problem("notify.webhook.url", "set either url or url_env / url_file, not both")
    url = hidden or (Secret(plain, "notify.webhook.url") if plain is not None else None)
    return WebhookConfig(url=url, bearer_token=r.secret(hook, "notify.webhook.bearer_token"))


def _secret_url(r: Reader, table: dict[str, Any], key: str) -> Secret | None:
    """A URL that is itself a credential (``<key>_env`` / ``<key>_file``): checked like any
    URL, but a wrong one is named only by where it came from."""
    url = r.secret(table, key)
    if url is None:
        return None
    problem = http_url_problem(url.reveal())
    if problem is not None:
        r.problem(key, f"{problem} (from {url.source})")
        return None
    return url
