"""The weekly digest: its Block Kit payload within Slack's limits, the schedule across DST, and
each week's digest posted once through the real slack_sdk to a loopback Slack, on SQLite and
PostgreSQL, whatever the restarts, failures and concurrent daemons."""

from __future__ import annotations

import argparse
import json
import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from sqlalchemy import Engine, insert, select

from agent import digest_job
from agent.config import Config, NotifyConfig, SlackConfig
from agent.config_reader import Reader
from agent.db import open_database, upgrade_database
from agent.digest import (
    block_kit_problems,
    digest_payload,
    percent_change,
    sparkline,
    week_dates,
)
from agent.digest_cli import DigestError, add_parser
from agent.digest_cli import run as run_cli
from agent.digest_config import DigestConfig, parse_digest
from agent.digest_job import (
    RETRY_FAILED,
    DigestJob,
    Outcome,
    SlackDigestSender,
    Status,
    claim_week,
    digest_enabled,
    due_week,
    send_now,
)
from agent.report_model import (
    AlertRow,
    Budget,
    GpuRow,
    Latency,
    ModelDay,
    ModelRow,
    Period,
    Recommendation,
    Report,
    Totals,
)
from agent.report_period import last_week_period
from agent.secret import Secret
from migrations.schema import digests
from tests.alerts.notifiers.conftest import Loopback, Reply, loopback  # noqa: F401

ZONE = "Europe/Madrid"


def week_period(monday: date, zone: str = ZONE) -> Period:
    """The Monday-to-Monday week starting on ``monday`` (local)."""
    return last_week_period(
        datetime.combine(monday + timedelta(days=7), time(12), ZoneInfo(zone)), zone
    )


HOOK = "/services/T000/B000/XXXXDIGESTSECRETXXXX"
SECRET = "XXXXDIGESTSECRETXXXX"
# The week of Monday 23 November 2026 (CET, UTC+1); its digest is due Monday 30 Nov 09:00
# local, 08:00 UTC.
WEEK = week_period(date(2026, 11, 23), ZONE)
DUE = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)


def totals(spend: str = "1234.565", **changes: Any) -> Totals:
    base = Totals(
        spend_usd=Decimal(spend),
        metered_usd=Decimal(spend),
        billed_usd=None,
        useful_tokens=2.5e9,
        output_tokens=2.5e9,
        total_tokens=3e9,
        cost_per_million_tokens_usd=Decimal("0.4938"),
        previous_cost_per_million_tokens_usd=Decimal("0.52"),
        gpu_hours=336.0,
        busy_gpu_hours=201.6,
        idle_loaded_gpu_hours=100.0,
        unallocated_gpu_hours=34.4,
        utilization_ratio=0.6,
        idle_cost_usd=Decimal("493.83"),
        requests=1_250_000,
    )
    return replace(base, **changes)


def model(name: str, cost: str = "600", per_m: str | None = "0.48", **changes: Any) -> ModelRow:
    row = ModelRow(
        model=name,
        cost_usd=Decimal(cost),
        useful_tokens=1.25e9,
        output_tokens=1.25e9,
        total_tokens=1.5e9,
        requests=600_000,
        cost_per_million_tokens_usd=Decimal(per_m) if per_m else None,
        previous_cost_per_million_tokens_usd=Decimal("0.50"),
        ttft=Latency(p99_seconds=0.85, count=600_000),
        e2e=Latency(p99_seconds=12.3, count=600_000),
    )
    return replace(row, **changes)


def gpu(host: str, index: int, idle: str, name: str | None = "NVIDIA H100 80GB HBM3") -> GpuRow:
    return GpuRow(
        host=host,
        gpu_uuid=f"GPU-{host}-{index}",
        gpu_index=str(index),
        gpu_name=name,
        cost_usd=Decimal("457.00"),
        idle_cost_usd=Decimal(idle),
        observed_hours=168.0,
        busy_hours=10.0,
        utilization_ratio=0.06,
        vram_peak_bytes=None,
        vram_total_bytes=None,
    )


def make_report(period: Period = WEEK, **changes: Any) -> Report:
    monday = period.start.astimezone(ZoneInfo(period.timezone)).date()
    base = Report(
        generated_at=period.end,
        period=period,
        previous_period=week_period(monday - timedelta(days=7), period.timezone),
        hosts_filter=(),
        models_filter=(),
        useful_tokens_rule="output",
        totals=totals(),
        spend_sources=(),
        models=(model("llama-8b"), model("qwen-32b", cost="400", per_m="0.55")),
        hosts=(),
        gpus=(),
        top_waste=(gpu("box-1", 0, "380.10"), gpu("box-2", 1, "113.73", name=None)),
        alerts=(AlertRow("GpuIdle", 3, 4 * 3600 + 12 * 60), AlertRow("QueueGrowing", 1, 600)),
        queue_incidents=(),
        budget=Budget(
            monthly_usd=Decimal("5000"),
            month="2026-11",
            spent_usd=Decimal("4100"),
            used_ratio=0.82,
            forecast_usd=Decimal("4400"),
            forecast_ratio=0.88,
        ),
        recommendations=(
            Recommendation(
                "serverless",
                "Move qwen-32b to serverless",
                "At 4,200 requests a day and 1.9 GPU-seconds each, serverless costs $21.40 a day "
                "against the pod's $65.28.",
                Decimal("1315.80"),
            ),
            Recommendation("pod", "Keep llama-8b on its pod", "Busy 91% of the time."),
        ),
        daily_spend=(),
        model_days=(),
        gpu_days=(),
    )
    return replace(base, **changes)


def texts(payload: dict[str, Any]) -> list[str]:
    out = [payload["text"]]
    for block in payload["blocks"]:
        if "text" in block:
            out.append(block["text"]["text"])
        out += [f["text"] for f in (*block.get("fields", ()), *block.get("elements", ()))]
    return out


def section_with(payload: dict[str, Any], title: str) -> str:
    return next(t for t in texts(payload) if t.startswith(f"*{title}"))


# -- the payload ---------------------------------------------------------------------------


def test_the_payload_shows_the_week_and_its_figures() -> None:
    previous = make_report(totals=totals(spend="1100"))
    payload = digest_payload(make_report(), previous)

    assert block_kit_problems(payload) == []
    header = payload["blocks"][0]
    assert header == {
        "type": "header",
        "text": {"type": "plain_text", "text": "GPU weekly digest: 23–29 Nov 2026"},
    }
    fields = [f["text"] for f in payload["blocks"][2]["fields"]]
    # $1,234.565 rounds half up to the cent; +12.2% = 1234.565 / 1100 - 1.
    assert fields[0] == "*Spend*\n$1,234.57\n+12.2% vs $1,100.00 the week before"
    assert fields[1] == "*Per 1M useful tokens*\n$0.49 (-5.0%)"
    assert fields[2] == "*Utilization*\n60.0% busy (201.6 of 336.0 GPU-hours)"
    assert fields[3] == "*Idle*\n$493.83 paid for GPUs not serving (40.0% of spend)"
    assert fields[4] == "*Useful tokens*\n2.50B (1.2M requests)"
    assert (
        fields[5]
        == "*Budget 2026-11*\n$4,100.00 of $5,000.00 (82.0%), month-end forecast $4,400.00"
    )
    models = section_with(payload, "Cost per 1M tokens by model").splitlines()
    assert models[1].endswith("*llama-8b*: $0.48 (-4.0%) · $600.00")
    assert section_with(payload, "Latency p99").splitlines()[1] == "*llama-8b*: 850 ms · 12.30 s"
    assert section_with(payload, "Top idle waste").splitlines()[1:] == [
        "*box-1* GPU 0 NVIDIA H100 80GB HBM3: $380.10 idle of $457.00, 6.0% busy",
        "*box-2* GPU 1: $113.73 idle of $457.00, 6.0% busy",
    ]
    assert section_with(payload, "Alerts").splitlines()[1:] == [
        "*GpuIdle*: fired 3×, 4h12m firing in all",
        "*QueueGrowing*: fired 1×, 10m firing in all",
    ]
    assert section_with(payload, "Recommendation") == (
        "*Recommendation: Move qwen-32b to serverless*\nAt 4,200 requests a day and 1.9 "
        "GPU-seconds each, serverless costs $21.40 a day against the pod's $65.28.\n"
        "Saves about $1,315.80 a month."
    )
    assert payload["text"] == (
        "GPU weekly digest 23–29 Nov 2026: spend $1,234.57 (+12.2% vs the week before), "
        "$0.49 per 1M useful tokens, utilization 60.0%, $493.83 idle"
    )


def test_an_empty_week_says_unknown_and_none_rather_than_zero() -> None:
    empty = make_report(
        totals=totals(
            spend="0",
            utilization_ratio=None,
            cost_per_million_tokens_usd=None,
            idle_cost_usd=Decimal(0),
        ),
        models=(),
        top_waste=(),
        alerts=(),
        recommendations=(),
        budget=Budget(None, "2026-11", Decimal(0), None, Decimal(0), None),
    )
    payload = digest_payload(empty, None)
    assert block_kit_problems(payload) == []
    fields = [f["text"] for f in payload["blocks"][2]["fields"]]
    assert fields[0] == "*Spend*\n$0.00"  # no previous week: no change shown
    assert fields[1] == "*Per 1M useful tokens*\nn/a (no tokens)"
    assert fields[2] == "*Utilization*\nunknown (no GPU data)"
    assert len(fields) == 5  # no budget configured
    for title in ("Cost per 1M tokens by model", "Latency p99", "Top idle waste", "Alerts"):
        assert section_with(payload, title).endswith("\nNone this week.")
    assert section_with(payload, "Recommendation") == (
        "*Recommendation*\nNothing to change this week."
    )


def test_sixty_models_with_long_hostile_names_stay_within_block_kit_limits() -> None:
    hostile = "<!channel> & <https://evil.example|click> " * 40  # 1,680 characters
    models = tuple(
        model(f"{hostile}{n:02d}", cost=str(1000 - n), ttft=Latency(p99_seconds=0.1 * n))
        for n in range(60)
    )
    report = make_report(
        models=models,
        model_days=tuple(
            ModelDay(m.model, date(2026, 11, 23) + timedelta(days=d), Decimal(d))
            for m in models
            for d in range(7)
        ),
        top_waste=tuple(gpu(hostile + str(n), n, "10", name=hostile) for n in range(5)),
        alerts=tuple(AlertRow(hostile + str(n), n, 60.0 * n) for n in range(40)),
        recommendations=(Recommendation("api", hostile * 5, "&" * 10_000, Decimal("1")),),
        hosts_filter=(hostile,) * 20,
    )
    payload = digest_payload(report, report)

    assert block_kit_problems(payload) == []
    assert len(payload["blocks"]) <= 50
    body = json.dumps(payload, ensure_ascii=False)
    assert "<" not in body and ">" not in body  # nothing Slack would read as a link or mention
    models_text = section_with(payload, "Cost per 1M tokens by model")
    shown = models_text.count("\n`")
    assert 1 <= shown <= 15
    assert models_text.endswith(f"… and {60 - shown} more models")
    assert "&lt;!channel&gt; &amp; &lt;https://evil.example|click&gt;" in models_text
    alerts_text = section_with(payload, "Alerts")
    assert "more rules" in alerts_text
    # The costliest model comes first.
    assert models_text.splitlines()[1].endswith("· $1,000.00")
    recommendation = section_with(payload, "Recommendation")
    assert recommendation.endswith("Saves about $1.00 a month.")
    assert "&amp;&amp;" in recommendation and "&am…" not in recommendation


def test_names_are_escaped_for_mrkdwn() -> None:
    report = make_report(models=(model("a<b>&c"),), top_waste=(gpu("box&<1>", 0, "1", "G<P>U"),))
    payload = digest_payload(report, None)
    body = "\n".join(texts(payload))
    assert "*a&lt;b&gt;&amp;c*" in body
    assert "*box&amp;&lt;1&gt;* GPU 0 G&lt;P&gt;U:" in body
    assert "a<b>" not in body


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([1, 2, 3, 4, 5, 6, 7, 8], "▁▂▃▄▅▆▇█"),
        ([Decimal("0.40"), None, Decimal("0.80"), Decimal("0.60")], "▁ █▅"),
        ([5, 5, 5], "▄▄▄"),
        ([None, 7, None], " ▄ "),
        ([None, None], "  "),
        ([], ""),
    ],
)
def test_sparkline(values: list[Any], expected: str) -> None:
    assert sparkline(values) == expected


def test_each_model_has_a_sparkline_of_the_week_s_days_with_gaps() -> None:
    days = [date(2026, 11, 23) + timedelta(days=n) for n in range(7)]
    values = ["0.40", "0.50", None, "0.60", "0.70", "0.80"]  # Sunday absent, Wednesday None
    points = tuple(
        ModelDay("llama-8b", day, Decimal(v) if v else None)
        for day, v in zip(days, values, strict=False)
    )
    payload = digest_payload(make_report(model_days=points), None)
    lines = section_with(payload, "Cost per 1M tokens by model").splitlines()
    assert lines[1].startswith("`▁▃ ▅▆█ ` *llama-8b*")  # 0.60: 3.5 rounds up
    assert lines[2].startswith("`       ` *qwen-32b*")  # no daily figures at all


@pytest.mark.parametrize(
    ("current", "before", "expected"),
    [
        ("110", "100", "+10.0%"),
        ("90", "100", "-10.0%"),
        ("100", "100", "+0.0%"),
        ("100.04", "100", "+0.0%"),
        ("99.96", "100", "+0.0%"),  # rounded to zero: no "-0.0%"
        ("100.05", "100", "+0.1%"),  # half up
        ("5", "0", None),  # no base to compare to
        ("5", None, None),
    ],
)
def test_percent_change(current: str, before: str | None, expected: str | None) -> None:
    assert percent_change(Decimal(current), Decimal(before) if before else None) == expected


def test_week_dates_across_months_and_years() -> None:
    assert week_dates(week_period(date(2026, 9, 28), ZONE)) == "28 Sep – 4 Oct 2026"
    assert week_dates(week_period(date(2026, 12, 28), ZONE)) == "28 Dec 2026 – 3 Jan 2027"


# -- the schedule --------------------------------------------------------------------------


def utc(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0
) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


# Madrid: CET (UTC+1) until Sunday 29 March 2026 02:00, CEST (UTC+2) until 25 October 03:00.
@pytest.mark.parametrize(
    ("now", "monday", "hours"),
    [
        # Spring: the week of 23 March has 167 hours; Monday 30 March 09:00 CEST is 07:00 UTC.
        (utc(2026, 3, 30, 6, 59, 59), None, 0),  # the week before's send was a week ago
        (utc(2026, 3, 30, 7, 0), date(2026, 3, 23), 167),
        (utc(2026, 3, 31, 6, 59, 59), date(2026, 3, 23), 167),  # within the 24 h grace
        (utc(2026, 3, 31, 7, 0), None, 0),  # the grace is half-open
        # The week in which the clocks went forward: its send time was still CET.
        (utc(2026, 3, 23, 8, 0), date(2026, 3, 16), 168),
        (utc(2026, 3, 23, 7, 59), None, 0),
        # Autumn: the week of 19 October has 169 hours; Monday 26 October 09:00 CET = 08:00 UTC.
        (utc(2026, 10, 26, 7, 59), None, 0),
        (utc(2026, 10, 26, 8, 0), date(2026, 10, 19), 169),
        (utc(2026, 10, 27, 7, 59, 59), date(2026, 10, 19), 169),
        (utc(2026, 10, 27, 8, 0), None, 0),
        # Mid-week: nothing due.
        (utc(2026, 11, 25, 12, 0), None, 0),
    ],
)
def test_due_week_in_madrid_across_dst(now: datetime, monday: date | None, hours: int) -> None:
    week = due_week(now, ZONE)
    if monday is None:
        assert week is None
        return
    assert week == week_period(monday, ZONE)
    assert week.start.astimezone(ZoneInfo(ZONE)).time() == time(0)
    assert week.end - week.start == timedelta(hours=hours)


def test_due_week_on_another_day_and_in_a_dst_gap() -> None:
    # Sunday 02:30 does not exist on 29 March in Madrid; it is read with the winter offset
    # (01:30 UTC) and is one instant. The week covered is still the last complete one.
    at, sunday = time(2, 30), 6
    assert due_week(utc(2026, 3, 29, 1, 29), ZONE, sunday, at) is None
    assert due_week(utc(2026, 3, 29, 1, 30), ZONE, sunday, at) == week_period(
        date(2026, 3, 16), ZONE
    )


def test_a_long_grace_still_sends_a_week_missed_for_days_but_never_the_one_before() -> None:
    grace = timedelta(days=6)
    assert due_week(utc(2026, 12, 5, 12, 0), ZONE, grace=grace) == WEEK
    assert due_week(utc(2026, 12, 6, 8, 0), ZONE, grace=grace) is None


def test_the_week_is_the_last_complete_one_in_the_zone() -> None:
    # Monday 00:00 CET is Sunday 23:00 UTC: a due week is always a complete local week.
    assert due_week(utc(2026, 11, 30, 8, 0), ZONE) == WEEK
    assert (WEEK.start, WEEK.end) == (utc(2026, 11, 22, 23), utc(2026, 11, 29, 23))
    assert WEEK.label == "2026-W48"
    assert due_week(utc(2026, 11, 30, 8, 0), "UTC") is None  # 09:00 UTC is still ahead
    assert due_week(utc(2026, 11, 30, 9, 0), "UTC") == week_period(date(2026, 11, 23), "UTC")


# -- the [digest] section ------------------------------------------------------------------


def parse(
    table: dict[str, Any], notify: dict[str, Any] | None = None
) -> tuple[DigestConfig, list[str]]:
    reader = Reader({})
    top: dict[str, Any] = {"digest": table}
    if notify is not None:
        top["notify"] = notify
    return parse_digest(reader, top), reader.problems


def test_digest_config_defaults_and_values() -> None:
    assert parse({}) == (DigestConfig(None, 0, time(9, 0), timedelta(hours=24)), [])
    slack = {"slack": {"webhook_url_env": "HOOK"}}
    table = {"enabled": True, "weekday": "Friday", "at": "17:30", "grace": "2h"}
    assert parse(table, slack) == (DigestConfig(True, 4, time(17, 30), timedelta(hours=2)), [])
    assert parse({"enabled": False}) == (DigestConfig(enabled=False), [])


@pytest.mark.parametrize(
    ("table", "problem"),
    [
        ({"weekday": "lundi"}, "digest.weekday: expected a day name like 'monday', got 'lundi'"),
        ({"at": "9am"}, "digest.at: expected a 24-hour local time like '09:00', got '9am'"),
        ({"at": "24:00"}, "digest.at: expected a 24-hour local time like '09:00', got '24:00'"),
        ({"grace": "5m"}, "digest.grace: must be at least 10m and less than 7d, got '5m'"),
        ({"grace": "7d"}, "digest.grace: must be at least 10m and less than 7d, got '7d'"),
        ({"grace": "soon"}, "digest.grace: expected a duration"),
        ({"enabled": "yes"}, "digest.enabled: expected true or false"),
        (
            {"enabled": True},
            "digest.enabled: the digest is posted to Slack: configure [notify.slack]",
        ),
        ({"when": "monday"}, "digest.when: unknown key"),
    ],
)
def test_digest_config_problems_name_their_key(table: dict[str, Any], problem: str) -> None:
    config, problems = parse(table)
    assert len(problems) == 1 and problems[0].startswith(problem)
    assert config.weekday == 0 and config.at == time(9, 0)


def test_the_digest_is_on_by_default_exactly_when_slack_is_configured() -> None:
    hook = SlackConfig(webhook_url=Secret("https://hooks.slack.com/x", "test"))
    assert digest_enabled(DigestConfig(), hook)
    assert not digest_enabled(DigestConfig(), SlackConfig())
    assert not digest_enabled(DigestConfig(enabled=False), hook)


# -- the job: once per week, through slack_sdk, on SQLite and PostgreSQL ---------------------


@dataclass
class Reports:
    """The injected builder: hand-built reports, and the periods asked for."""

    fail: bool = False
    asked: list[Period] = field(default_factory=list)

    def __call__(self, period: Period, now: datetime) -> Report:
        self.asked.append(period)
        if self.fail:
            raise RuntimeError("rollups unavailable")
        return make_report(period)


@dataclass
class Fleet:
    url: str
    engine: Engine
    slack: Loopback
    reports: Reports

    def job(self, host: str = "box-1", schedule: DigestConfig | None = None) -> DigestJob:
        """A daemon's job, as built after a (re)start: nothing kept but the database."""
        sender = SlackDigestSender(webhook_url=self.slack.url + HOOK)
        return DigestJob(self.engine, host, ZONE, schedule or DigestConfig(), self.reports, sender)

    def posts(self) -> list[dict[str, Any]]:
        return [r.json() for r in self.slack.requests if r.path == HOOK]

    def rows(self) -> list[Any]:
        with self.engine.connect() as conn:
            return list(conn.execute(select(digests).order_by(digests.c.week_start)))


@pytest.fixture
def fleet(db_url: str, loopback: Loopback) -> Iterator[Fleet]:  # noqa: F811
    loopback.reply(HOOK, Reply(200, "ok"))
    upgrade_database(db_url)
    engine = open_database(db_url)
    try:
        yield Fleet(db_url, engine, loopback, Reports())
    finally:
        engine.dispose()


def test_each_week_is_posted_once_at_its_send_time(fleet: Fleet) -> None:
    # From after the week before's grace (Tuesday 24 November, 09:00 local).
    job, now, step = fleet.job(), utc(2026, 11, 24, 8, 0), timedelta(minutes=5)
    sent: list[datetime] = []
    while now < utc(2026, 12, 15, 0, 0):  # three send times: 30 Nov, 7 Dec, 14 Dec
        if job.run(now).status is Status.SENT:
            sent.append(now)
        now += step
    assert sent == [utc(2026, 11, 30, 8), utc(2026, 12, 7, 8), utc(2026, 12, 14, 8)]
    headers = [p["blocks"][0]["text"]["text"] for p in fleet.posts()]
    assert headers == [
        "GPU weekly digest: 23–29 Nov 2026",
        "GPU weekly digest: 30 Nov – 6 Dec 2026",
        "GPU weekly digest: 7–13 Dec 2026",
    ]
    assert all(block_kit_problems(p) == [] for p in fleet.posts())
    rows = fleet.rows()
    assert [(r.state, r.claimed_by, r.sent_at, r.error) for r in rows] == [
        ("sent", "box-1", moment, None) for moment in sent
    ]
    # The week's report and the week before's, for the change in spend.
    assert fleet.reports.asked[:2] == [WEEK, week_period(date(2026, 11, 16), ZONE)]


def test_a_restart_does_not_post_again(fleet: Fleet) -> None:
    assert fleet.job().run(DUE).status is Status.SENT
    restarted = open_database(fleet.url)  # a new process: new engine, new job
    try:
        again = DigestJob(restarted, "box-1", ZONE, DigestConfig(), fleet.reports,
                          SlackDigestSender(webhook_url=fleet.slack.url + HOOK))  # fmt: skip
        outcome = again.run(DUE + timedelta(minutes=5))
    finally:
        restarted.dispose()
    assert outcome.status is Status.ALREADY_SENT
    assert outcome.detail == "sent at 2026-11-30T08:00:00+00:00 by box-1"
    assert len(fleet.posts()) == 1


def race(jobs: list[DigestJob], now: datetime, outcomes: list[Outcome]) -> None:
    """Run every job at ``now`` at the same moment, one thread each (one "daemon" each)."""
    barrier = threading.Barrier(len(jobs))

    def daemon(job: DigestJob) -> None:
        barrier.wait()
        outcomes.append(job.run(now))

    threads = [threading.Thread(target=daemon, args=(job,)) for job in jobs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(outcomes) == len(jobs)


def test_two_daemons_racing_for_the_same_weeks_post_each_once(fleet: Fleet) -> None:
    engines = [open_database(fleet.url) for _ in range(2)]
    try:
        jobs = [replace(fleet.job(f"box-{n}"), engine=e) for n, e in enumerate(engines, 1)]
        for week in range(5):
            now = DUE + timedelta(weeks=week)
            outcomes: list[Outcome] = []
            race(jobs, now, outcomes)

            statuses = [o.status for o in outcomes]
            assert statuses.count(Status.SENT) == 1
            assert set(statuses) - {Status.SENT} <= {Status.ALREADY_SENT, Status.BUSY}
    finally:
        for engine in engines:
            engine.dispose()
    assert len(fleet.posts()) == 5
    assert [r.state for r in fleet.rows()] == ["sent"] * 5


def test_two_daemons_taking_over_the_same_stale_claim_post_once(fleet: Fleet) -> None:
    with fleet.engine.begin() as conn:
        conn.execute(
            insert(digests).values(
                week_start=WEEK.start, state="claimed", claimed_by="box-9", claimed_at=DUE
            )
        )
    engines = [open_database(fleet.url) for _ in range(3)]
    try:
        outcomes: list[Outcome] = []
        jobs = [replace(fleet.job(f"box-{n}"), engine=e) for n, e in enumerate(engines, 1)]
        race(jobs, DUE + timedelta(minutes=10), outcomes)
    finally:
        for engine in engines:
            engine.dispose()
    assert [o.status for o in outcomes].count(Status.SENT) == 1
    assert len(fleet.posts()) == 1


def test_a_claim_that_loses_the_insert_race_does_nothing(
    fleet: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Another daemon inserts between this one's read (which found no row) and its insert.
    assert claim_week(fleet.engine, WEEK.start, "box-2", DUE, retry_failed_after=RETRY_FAILED)
    monkeypatch.setattr(digest_job, "_row", lambda conn, week_start: None)
    lost = claim_week(fleet.engine, WEEK.start, "box-1", DUE, retry_failed_after=RETRY_FAILED)
    assert lost is None
    assert [(r.state, r.claimed_by) for r in fleet.rows()] == [("claimed", "box-2")]


def test_a_digest_missed_while_down_is_sent_at_start_within_the_grace(fleet: Fleet) -> None:
    late = DUE + timedelta(hours=23, minutes=59)
    assert fleet.job().run(late).status is Status.SENT
    too_late = DUE + timedelta(weeks=1, hours=24)  # the next week's, a day and a second late
    assert fleet.job().run(too_late).status is Status.NOT_DUE
    assert fleet.job().run(too_late - timedelta(seconds=1)).status is Status.SENT
    assert len(fleet.posts()) == 2


def test_a_stale_claim_of_a_daemon_that_died_mid_send_is_taken_over(fleet: Fleet) -> None:
    with fleet.engine.begin() as conn:
        conn.execute(
            insert(digests).values(
                week_start=WEEK.start, state="claimed", claimed_by="box-9", claimed_at=DUE
            )
        )
    busy = fleet.job().run(DUE + timedelta(minutes=9))
    assert (busy.status, busy.detail) == (
        Status.BUSY,
        "being sent by box-9 since 2026-11-30T08:00:00+00:00",
    )
    assert fleet.posts() == []
    assert fleet.job().run(DUE + timedelta(minutes=10)).status is Status.SENT
    assert [(r.state, r.claimed_by) for r in fleet.rows()] == [("sent", "box-1")]


def test_a_slack_500_is_recorded_failed_and_retried_within_the_grace(fleet: Fleet) -> None:
    fleet.slack.reply(HOOK, Reply(500, "internal_error"), Reply(200, "ok"))
    failed = fleet.job().run(DUE)
    assert (failed.status, failed.detail) == (Status.FAILED, "HTTP 500: internal_error")
    [row] = fleet.rows()
    assert (row.state, row.error, row.sent_at) == ("failed", "HTTP 500: internal_error", None)
    # Another daemon, or this one at its next check, waits out the retry interval.
    waiting = fleet.job("box-2").run(DUE + timedelta(minutes=14))
    assert waiting.status is Status.BUSY and waiting.detail.startswith("failed at 2026-11-30T08")
    assert fleet.job("box-2").run(DUE + timedelta(minutes=15)).status is Status.SENT
    assert len(fleet.slack.requests) == 2
    [row] = fleet.rows()
    assert (row.state, row.claimed_by, row.error) == ("sent", "box-2", None)


def test_failures_are_retried_only_while_the_week_is_due(fleet: Fleet) -> None:
    fleet.slack.reply(HOOK, Reply(500, "internal_error"))
    job = fleet.job(schedule=DigestConfig(grace=timedelta(hours=1)))
    now = DUE
    while now < DUE + timedelta(hours=3):
        job.run(now)
        now += timedelta(minutes=5)
    # At 0, 15, 30 and 45 minutes; then the grace is over and the record stays failed.
    assert len(fleet.slack.requests) == 4
    assert [r.state for r in fleet.rows()] == ["failed"]


def test_a_failed_report_is_recorded_and_retried(fleet: Fleet) -> None:
    fleet.reports.fail = True
    outcome = fleet.job().run(DUE)
    assert outcome.status is Status.FAILED
    assert outcome.detail == "report failed: RuntimeError: rollups unavailable"
    assert fleet.posts() == []
    fleet.reports.fail = False
    assert fleet.job().run(DUE + timedelta(minutes=15)).status is Status.SENT


def test_the_webhook_url_never_reaches_logs_or_the_record(
    fleet: Fleet, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    # A server that quotes the URL back, then a connection refused on a secret URL.
    fleet.slack.reply(HOOK, Reply(400, f"no such hook {fleet.slack.url}{HOOK}"))
    assert fleet.job().run(DUE).status is Status.FAILED
    closed = DigestJob(fleet.engine, "box-1", ZONE, DigestConfig(), fleet.reports,
                       SlackDigestSender(webhook_url=f"http://127.0.0.1:1{HOOK}"))  # fmt: skip
    refused = closed.run(DUE + timedelta(minutes=15))
    assert refused.status is Status.FAILED and refused.detail.startswith("connection error")
    [row] = fleet.rows()
    assert SECRET not in (row.error or "") and SECRET not in refused.detail
    assert SECRET not in caplog.text
    assert "redacted" in caplog.text  # the records were there, scrubbed


def test_send_now_posts_the_last_week_before_its_time_and_the_job_does_not_repeat_it(
    fleet: Fleet,
) -> None:
    sender = SlackDigestSender(webhook_url=fleet.slack.url + HOOK)
    early = DUE - timedelta(hours=1)  # Monday 08:00 local
    first = send_now(fleet.engine, "laptop", ZONE, fleet.reports, sender, early)
    assert (first.status, first.week) == (Status.SENT, WEEK)
    assert fleet.job().run(DUE).status is Status.ALREADY_SENT
    again = send_now(fleet.engine, "laptop", ZONE, fleet.reports, sender, DUE)
    assert again.status is Status.ALREADY_SENT
    assert len(fleet.posts()) == 1


def test_send_now_retries_a_failed_week_at_once(fleet: Fleet) -> None:
    fleet.slack.reply(HOOK, Reply(503, "down"), Reply(200, "ok"))
    assert fleet.job().run(DUE).status is Status.FAILED
    sender = SlackDigestSender(webhook_url=fleet.slack.url + HOOK)
    outcome = send_now(fleet.engine, "laptop", ZONE, fleet.reports, sender, DUE)
    assert outcome.status is Status.SENT
    assert len(fleet.posts()) == 2


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_chat_post_message_with_a_token(fleet: Fleet) -> None:
    fleet.slack.reply("/api/chat.postMessage", Reply(200, {"ok": True}))
    sender = SlackDigestSender(
        token="xoxb-digest-token", channel="#finops", base_url=fleet.slack.url + "/api/"
    )
    job = replace(fleet.job(), sender=sender)
    assert job.run(DUE).status is Status.SENT
    [request] = fleet.slack.requests
    assert request.headers["authorization"] == "Bearer xoxb-digest-token"
    body = request.json()
    assert body["channel"] == "#finops"
    assert body["blocks"][0]["text"]["text"] == "GPU weekly digest: 23–29 Nov 2026"


# -- gpuwatch digest -------------------------------------------------------------------------


def cli(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="gpuwatch")
    add_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(argv)


def test_digest_options() -> None:
    assert (cli(["digest"]).dry_run, cli(["digest"]).send) == (False, False)
    assert cli(["digest", "--send", "--config", "x.toml"]).config == "x.toml"
    with pytest.raises(SystemExit):
        cli(["digest", "--dry-run", "--send"])


def cli_config(url: str, hook: str | None) -> Config:
    slack = SlackConfig(webhook_url=Secret(hook, "test") if hook else None)
    return Config(host="box-1", database_url=url, timezone=ZONE, notify=NotifyConfig(slack=slack))


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_dry_run_prints_the_payload_and_posts_nothing(
    fleet: Fleet, capsys: pytest.CaptureFixture[str]
) -> None:
    config = cli_config(fleet.url, fleet.slack.url + HOOK)
    assert run_cli(cli(["digest", "--dry-run"]), config, DUE, build=fleet.reports) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload == digest_payload(make_report(), make_report(fleet.reports.asked[1]))
    assert fleet.slack.requests == [] and fleet.rows() == []


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_send_posts_once_and_says_so(fleet: Fleet, capsys: pytest.CaptureFixture[str]) -> None:
    config = cli_config(fleet.url, fleet.slack.url + HOOK)
    assert run_cli(cli(["digest", "--send"]), config, DUE, build=fleet.reports) == 0
    assert capsys.readouterr().out == "digest for 2026-W48 posted to Slack\n"
    assert run_cli(cli(["digest", "--send"]), config, DUE, build=fleet.reports) == 0
    assert capsys.readouterr().out == (
        "digest for 2026-W48 not posted: already sent "
        "(sent at 2026-11-30T08:00:00+00:00 by box-1)\n"
    )
    assert len(fleet.posts()) == 1


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_send_fails_with_exit_1_and_without_slack_says_what_to_configure(
    fleet: Fleet, tmp_path: Path
) -> None:
    fleet.slack.reply(HOOK, Reply(500, "x"))
    config = cli_config(fleet.url, fleet.slack.url + HOOK)
    assert run_cli(cli(["digest", "--send"]), config, DUE, build=fleet.reports) == 1
    with pytest.raises(DigestError, match=r"no Slack configured"):
        run_cli(cli(["digest", "--send"]), cli_config(fleet.url, None), DUE, build=fleet.reports)
