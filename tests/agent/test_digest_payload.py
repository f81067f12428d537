"""The weekly digest's Block Kit payload: the week's figures as Slack shows them, an empty
week, sixty hostile model names within Slack's limits, mrkdwn escaping, sparklines and
percent changes."""

from __future__ import annotations

import json
from datetime import date, timedelta
from decimal import Decimal
from typing import Any

import pytest

from agent.reporting.digest import (
    block_kit_problems,
    digest_payload,
    percent_change,
    sparkline,
    week_dates,
)
from agent.reporting.model import AlertRow, Budget, Latency, ModelDay, Recommendation
from tests.agent.digest_helpers import ZONE, gpu, make_report, model, totals, week_period


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
    # No billing records: the spend is metered, and says so; cost per 1M tokens is metered.
    assert fields[0] == "*Spend (metered)*\n$1,234.57\n+12.2% vs $1,100.00 the week before"
    assert fields[1] == "*Per 1M useful tokens (metered)*\n$0.49 (-5.0%)"
    assert fields[2] == "*Utilization*\n60.0% busy (201.6 of 336.0 GPU-hours)"
    assert fields[3] == "*Idle*\n$493.83 paid for GPUs not serving (40.0% of spend)"
    assert fields[4] == "*Useful tokens*\n2.50B (1.2M requests)"
    # No profiling source and no energy reading: both unknown, never the flag's or 0.
    assert fields[5] == (
        "*Real work (SM activity)*\nunknown (no GPM or dcgm-exporter profiling): busy is NVML's"
        " flag"
    )
    assert fields[6] == "*Energy*\nunknown (no energy counter or power reading)"
    assert (
        fields[7]
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
    assert fields[0] == "*Spend (metered)*\n$0.00"  # no previous week: no change shown
    assert fields[1] == "*Per 1M useful tokens (metered)*\nn/a (no tokens)"
    assert fields[2] == "*Utilization*\nunknown (no GPU data)"
    assert len(fields) == 7  # no budget configured
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
