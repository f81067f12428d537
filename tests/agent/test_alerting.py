"""Alerting through the store and the outbox, on the simulated clock, with the real slack_sdk
client posting to a loopback Slack: every rule's notification arrives ``for`` plus at most one
evaluation interval after its condition began, its resolution once after it cleared; retries
back off and honour Retry-After; a restart (a new Alerting over the same database) at any point
neither repeats nor loses a notification."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import Engine, select

from agent.alerting import store as alert_store
from agent.alerting.evaluation import OUTBOX_BACKOFF, Alerting, build_receivers
from agent.config.settings import Config, ConfigError, load_config
from agent.storage.db import open_database, upgrade_database
from alerts.model import AlertKey, Condition
from alerts.rules import DEFAULT_RULES
from alerts.silence import Silence, parse_matcher
from migrations.schema import alert_history
from tests.alerts.notifiers.conftest import Loopback, Reply, loopback  # noqa: F401

T0 = datetime(2026, 11, 2, 8, 0, tzinfo=UTC)
STEP = timedelta(seconds=10)
HOOK = "/services/T000/B000/XXXXSECRETXXXX"
LABELS = {"host": "box", "gpu_index": "0", "gpu_uuid": "GPU-a"}


def make_config(tmp_path: Path, url: str, hook_url: str, extra: str = "") -> Config:
    path = tmp_path / "gpuwatch.toml"
    path.write_text(
        'host = "box"\n[notify.slack]\nwebhook_url_env = "SLACK_HOOK"\n' + extra, encoding="utf-8"
    )
    return load_config(str(path), {"GPUWATCH_DATABASE_URL": url, "SLACK_HOOK": hook_url})


@dataclass
class Harness:
    """One Alerting over a database, evaluated and delivered every STEP on a simulated clock;
    ``arrivals`` are the simulated times at which Slack received each message."""

    engine: Engine
    config: Config
    slack: Loopback
    now: datetime = T0
    arrivals: list[datetime] = field(default_factory=list)
    alerting: Alerting = field(init=False)

    def __post_init__(self) -> None:
        self.restart()

    def restart(self) -> None:
        """A new daemon process: nothing kept in memory, everything from the database."""
        receivers = build_receivers(self.config)
        self.alerting = Alerting.for_scope(
            self.engine, "box", self.config.alerts, receivers, DEFAULT_RULES
        )
        # The top of each jitter range (a real draw only approaches 1): waits of 10, 20, 40 s.
        self.alerting.jitter = lambda: 1.0

    def step(self, holding: list[Condition], *, deliver: bool = True) -> None:
        self.alerting.evaluate(holding, set(DEFAULT_RULES), self.now)
        if deliver:
            self.deliver()
        self.now += STEP

    def deliver(self) -> None:
        before = len(self.slack.requests)
        self.alerting.deliver(self.now)
        self.arrivals += [self.now] * (len(self.slack.requests) - before)

    def texts(self) -> list[str]:
        return [r.json()["text"] for r in self.slack.requests]


@pytest.fixture
def harness(tmp_path: Path, loopback: Loopback, db_url: str) -> Iterator[Harness]:  # noqa: F811
    loopback.reply(HOOK, Reply(200, "ok"))
    upgrade_database(db_url)
    engine = open_database(db_url)
    try:
        yield Harness(engine, make_config(tmp_path, db_url, loopback.url + HOOK), loopback)
    finally:
        engine.dispose()


def condition(rule: str) -> Condition:
    return Condition(AlertKey.of(rule, LABELS), 0.5, {"summary": f"{rule} holds"})


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize("rule", sorted(DEFAULT_RULES))
def test_each_rule_notifies_after_for_plus_at_most_one_interval_and_resolves_once(
    harness: Harness, rule: str
) -> None:
    spec = DEFAULT_RULES[rule]
    began = T0 + timedelta(seconds=3)  # between two evaluations: the worst case is one interval
    cleared: datetime | None = None
    while harness.now < began + spec.hold + timedelta(minutes=30):
        if cleared is None and harness.arrivals:
            cleared = harness.now + timedelta(seconds=7)
        holds = began <= harness.now and (cleared is None or harness.now < cleared)
        harness.step([condition(rule)] if holds else [])

    fired, resolved = harness.arrivals
    assert began + spec.hold <= fired <= began + spec.hold + STEP
    # A resolution waits out group_interval after the firing message, as in Alertmanager.
    group_interval = harness.config.alerts.route.group_interval
    assert cleared is not None
    assert cleared <= resolved <= max(cleared, fired + group_interval) + STEP
    first, second = harness.texts()
    assert first.startswith("[FIRING:1]") and f"{rule} holds" in first
    assert second.startswith("[RESOLVED:1]")


def test_a_rule_whose_condition_stops_before_for_never_notifies(harness: Harness) -> None:
    for _ in range(20):  # 200 s of a 30 min rule
        harness.step([condition("GpuIdle")])
    for _ in range(100):
        harness.step([])
    assert harness.arrivals == []


def test_a_firing_alert_is_repeated_only_after_the_repeat_interval(harness: Harness) -> None:
    for _ in range(int(timedelta(hours=5) / STEP)):
        harness.step([condition("CollectorDown")])
    assert [t - harness.arrivals[0] for t in harness.arrivals] == [
        timedelta(0),
        timedelta(hours=4, seconds=10),  # strictly after 4 h, at the next evaluation
    ]


def test_an_active_silence_mutes_and_its_expiry_lets_the_alert_through(harness: Harness) -> None:
    silence = Silence.starting(
        "s1", [parse_matcher("alertname=CollectorDown")], T0, timedelta(minutes=10), "ops", "fix"
    )
    with harness.engine.begin() as conn:
        alert_store.add_silence(conn, silence, T0)
    for _ in range(int(timedelta(minutes=15) / STEP)):
        harness.step([condition("CollectorDown")])
    # The end instant still mutes (Alertmanager's getState): the evaluation after it sends.
    assert harness.arrivals == [T0 + timedelta(minutes=10) + STEP]


# -- retries and restarts --------------------------------------------------------------------


def _fire(harness: Harness, rule: str = "CollectorDown") -> None:
    harness.step([condition(rule)], deliver=False)


def test_429_is_retried_after_retry_after_and_5xx_with_backoff(harness: Harness) -> None:
    harness.slack.reply(
        HOOK,
        Reply(429, "rate_limited", {"Retry-After": "30"}),
        Reply(500, "oops"),
        Reply(200, "ok"),
    )
    _fire(harness)
    queued_at = harness.now - STEP
    harness.now = queued_at
    for _ in range(12):
        harness.deliver()
        harness.now += STEP
    assert len(harness.slack.requests) == 3
    assert harness.arrivals == [queued_at, queued_at + timedelta(seconds=30),
                                queued_at + timedelta(seconds=50)]  # fmt: skip
    with harness.engine.connect() as conn:
        (row,) = alert_store.outbox_rows(conn)
    assert row.status == alert_store.DELIVERED and row.attempts == 3


def test_a_non_retryable_failure_is_recorded_and_not_retried(harness: Harness) -> None:
    harness.slack.reply(HOOK, Reply(404, "no_service"))
    _fire(harness)
    for _ in range(10):
        harness.deliver()
        harness.now += STEP
    assert len(harness.slack.requests) == 1
    with harness.engine.connect() as conn:
        (row,) = alert_store.outbox_rows(conn)
    assert row.status == alert_store.FAILED and "404" in (row.last_error or "")


def test_undeliverable_notifications_expire_after_give_up_after(
    harness: Harness, tmp_path: Path
) -> None:
    harness.config = make_config(
        tmp_path, str(harness.engine.url), harness.slack.url + HOOK,
        '[alerts]\ngive_up_after = "2m"\n',
    )  # fmt: skip
    harness.restart()
    harness.slack.reply(HOOK, Reply(503, "down"))
    _fire(harness)
    for _ in range(30):
        harness.deliver()
        harness.now += STEP
    with harness.engine.connect() as conn:
        (row,) = alert_store.outbox_rows(conn)
    assert row.status == alert_store.EXPIRED
    assert len(harness.slack.requests) == 4  # at 0, 10, 30 and 70 s; the next would be past 2 m


def test_restart_while_pending_keeps_the_for_timer(harness: Harness) -> None:
    began = harness.now
    for _ in range(60):  # 10 of GpuIdle's 30 minutes
        harness.step([condition("GpuIdle")])
    harness.restart()
    while not harness.arrivals:
        harness.step([condition("GpuIdle")])
    assert (
        began + timedelta(minutes=30)
        <= harness.arrivals[0]
        <= began + timedelta(minutes=30, seconds=10)
    )


def test_restart_while_firing_neither_repeats_nor_loses_the_resolution(harness: Harness) -> None:
    for _ in range(3):
        harness.step([condition("CollectorDown")])
    assert len(harness.arrivals) == 1
    harness.restart()
    for _ in range(3):
        harness.step([condition("CollectorDown")])
    harness.restart()
    for _ in range(40):
        harness.step([])
    assert [t.split("]")[0] for t in harness.texts()] == ["[FIRING:1", "[RESOLVED:1"]


def test_restart_mid_retry_delivers_once_and_in_order(harness: Harness) -> None:
    harness.slack.reply(HOOK, Reply(500, "oops"), Reply(500, "oops"), Reply(200, "ok"))
    _fire(harness)
    harness.now -= STEP
    harness.deliver()  # fails: retry in 10 s
    harness.restart()
    for _ in range(2):
        harness.step([condition("CollectorDown")])  # still firing: nothing new is queued
    harness.restart()
    for _ in range(40):
        harness.step([])  # resolved: queued behind the firing message still being retried
    texts = harness.texts()
    delivered = [t.split("]")[0] for t, r in zip(texts, _statuses(harness), strict=True) if r]
    assert delivered == ["[FIRING:1", "[RESOLVED:1"]
    with harness.engine.connect() as conn:
        rows = alert_store.outbox_rows(conn)
    assert [r.status for r in rows] == [alert_store.DELIVERED, alert_store.DELIVERED]


def _statuses(harness: Harness) -> list[bool]:
    """Which recorded requests were answered 200 (the script: 500, 500, then 200 for good)."""
    return [i >= 2 for i in range(len(harness.slack.requests))]


def test_the_webhook_url_never_appears_in_logs_or_the_outbox(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    harness.slack.reply(HOOK, Reply(500, f"error at {HOOK}"), Reply(200, "ok"))
    for _ in range(5):
        harness.step([condition("CollectorDown")])
    assert "XXXXSECRETXXXX" not in caplog.text
    with harness.engine.connect() as conn:
        rows = alert_store.outbox_rows(conn)
    assert rows and all("XXXXSECRETXXXX" not in json.dumps(r.last_error) for r in rows)


def test_outbox_backoff_doubles_from_10_s_to_5_min_and_retry_after_wins_when_longer() -> None:
    tops = [OUTBOX_BACKOFF.wait(n, 1.0) for n in range(1, 8)]
    assert tops == [10, 20, 40, 80, 160, 300, 300]
    assert OUTBOX_BACKOFF.wait(3, 0.0) == 20  # equal jitter: at least half the step
    assert OUTBOX_BACKOFF.wait(1, 0.0, 120.0) == 120
    assert OUTBOX_BACKOFF.wait(3, 0.5, 1.0) == 30


def test_the_webhook_receiver_gets_the_alert_with_its_bearer_token(
    tmp_path: Path,
    loopback: Loopback,  # noqa: F811
) -> None:
    loopback.reply("/hook", Reply(200, "ok"))
    url = f"sqlite:///{tmp_path / 'gw.db'}"
    upgrade_database(url)
    path = tmp_path / "gpuwatch.toml"
    path.write_text(
        f'host = "box"\n[notify.webhook]\nurl = "{loopback.url}/hook"\n'
        'bearer_token_env = "HOOK_TOKEN"\n'
    )
    config = load_config(str(path), {"GPUWATCH_DATABASE_URL": url, "HOOK_TOKEN": "tok-123"})
    engine = open_database(url)
    try:
        alerting = Alerting.for_scope(
            engine, "box", config.alerts, build_receivers(config), DEFAULT_RULES
        )
        alerting.evaluate([condition("CollectorDown")], set(DEFAULT_RULES), T0)
        assert alerting.deliver(T0).delivered == 1
    finally:
        engine.dispose()
    (request,) = loopback.requests
    assert request.headers["authorization"] == "Bearer tok-123"
    body = request.json()
    assert (
        body["status"] == "firing" and body["alerts"][0]["labels"]["alertname"] == "CollectorDown"
    )


def test_rule_tunings_and_route_timers_come_from_the_config(tmp_path: Path) -> None:
    config = make_config(
        tmp_path, "sqlite://", "https://hooks.slack.com/services/T/B/x",
        '[alerts.route]\ngroup_wait = "30s"\nrepeat_interval = "1h"\n'
        '[alerts.rules.GpuIdle]\nfor = "45m"\nutilization_below = 0.03\n',
    )  # fmt: skip
    (receiver,) = build_receivers(config)
    assert receiver.route.group_wait == timedelta(seconds=30)
    assert receiver.route.repeat_interval == timedelta(hours=1)
    assert config.alerts.rules["GpuIdle"].for_seconds == 2700
    assert config.alerts.rules["GpuIdle"].thresholds["utilization_below"] == 0.03


def test_bad_alert_settings_are_named_with_their_key_path(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as raised:
        make_config(
            tmp_path, "sqlite://", "https://hooks.slack.com/services/T/B/x",
            '[alerts.route]\ngroup_interval = "0"\n'
            '[alerts.rules.GpuIdel]\nfor = "45m"\n[alerts.rules.GpuHot]\nfor = 5\n',
        )  # fmt: skip
    text = str(raised.value)
    assert "alerts.route.group_interval: must be longer than 0" in text
    assert "alerts.rules.GpuIdel: unknown rule" in text
    assert 'alerts.rules.GpuHot.for: expected a duration like "90s"' in text


def test_each_firing_is_kept_in_the_history_with_its_resolution(harness: Harness) -> None:
    for holds in ([True] * 3 + [False] * 3) * 2:
        harness.step([condition("CollectorDown")] if holds else [])
    with harness.engine.connect() as conn:
        rows = conn.execute(select(alert_history).order_by(alert_history.c.id)).all()
    assert [(r.rule, r.fired_at, r.resolved_at) for r in rows] == [
        ("CollectorDown", T0, T0 + 3 * STEP),
        ("CollectorDown", T0 + 6 * STEP, T0 + 9 * STEP),
    ]
    assert json.loads(rows[0].labels) == LABELS and rows[0].summary == "CollectorDown holds"
