"""Every report format from one hand-built month of a small fleet (tests/agent/report_sample.py):
the JSON contract, exact money, and the same figures in every format, each parsed back
(tests/agent/report_parsers.py). The formats' own layouts are in test_report_formats.py, the
headless browser in test_report_browser.py and `gpuwatch report`'s arguments in
test_report_args.py."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest

from agent.reporting.formats import FORMATS
from agent.reporting.model import SCHEMA_VERSION, Report
from agent.reporting.render.dispatch import render
from agent.reporting.render.json_format import to_document
from tests.agent.report_parsers import MONEY, PARSERS, PER_M, figures_from_json
from tests.agent.report_sample import DAYS, MODELS, make_report


@pytest.fixture(scope="module")
def report() -> Report:
    return make_report()


@pytest.fixture(scope="module")
def document(report: Report) -> dict[str, Any]:
    return json.loads(render(report, "json"))


# -- the JSON contract --------------------------------------------------------------------------

CONTRACT = {
    "totals": {"spend_usd", "useful_tokens", "cost_per_million_tokens_usd", "gpu_hours",
               "busy_gpu_hours", "idle_cost_usd"},
    "models": {"model", "useful_tokens", "cost_usd", "cost_per_million_tokens_usd",
               "p99_ttft_seconds", "p99_e2e_seconds"},
    "gpus": {"host", "gpu_uuid", "cost_usd", "utilization_ratio", "idle_cost_usd"},
}  # fmt: skip


def test_json_has_the_design_contract_keys_and_types(document: dict[str, Any]) -> None:
    assert document["schema_version"] == SCHEMA_VERSION == 1
    assert set(document["period"]) >= {"start", "end"}
    assert datetime.fromisoformat(document["period"]["start"]) == datetime(2026, 10, 31, 23, 0,
                                                                          tzinfo=UTC)  # fmt: skip
    assert document["period"]["start"].endswith("+01:00"), "shown in the report's zone"
    for key, keys in CONTRACT.items():
        rows = document[key] if isinstance(document[key], list) else [document[key]]
        assert rows
        for row in rows:
            assert keys <= set(row), (key, keys - set(row))
    totals = document["totals"]
    assert MONEY.match(totals["spend_usd"]) and MONEY.match(totals["idle_cost_usd"])
    assert PER_M.match(totals["cost_per_million_tokens_usd"])
    assert isinstance(totals["useful_tokens"], int)
    assert isinstance(totals["gpu_hours"], float) and isinstance(totals["busy_gpu_hours"], float)
    for model in document["models"]:
        assert isinstance(model["model"], str) and isinstance(model["useful_tokens"], int)
        assert MONEY.match(model["cost_usd"]) and PER_M.match(model["cost_per_million_tokens_usd"])
        for key in ("p99_ttft_seconds", "p99_e2e_seconds"):
            assert model[key] is None or isinstance(model[key], float)
    assert [m["model"] for m in document["models"]] == list(MODELS), "names unescaped in JSON"
    assert document["models"][2]["p99_ttft_seconds"] is None, "no observations: unknown, not 0"
    assert document["models"][1]["p99_e2e_seconds"] == 30.001, "to the ms, half up"
    for gpu in document["gpus"]:
        assert MONEY.match(gpu["cost_usd"]) and MONEY.match(gpu["idle_cost_usd"])
        assert isinstance(gpu["utilization_ratio"], float) and 0 <= gpu["utilization_ratio"] <= 1


def test_json_holds_everything_else_in_the_report(report: Report, document: dict[str, Any]) -> None:
    for key in ("generated_at", "previous_period", "filters", "useful_tokens_rule", "currency",
                "spend_sources", "hosts", "top_waste", "alerts", "queue_incidents", "budget",
                "recommendations", "daily_spend", "model_days", "gpu_days"):  # fmt: skip
        assert key in document, key
    assert len(document["daily_spend"]) == DAYS
    assert len(document["model_days"]) == DAYS * len(MODELS)
    assert len(document["gpu_days"]) == DAYS * len(report.gpus)
    assert document["queue_incidents"][1]["resolved_at"] is None
    assert document["budget"]["monthly_usd"] == "15000.00"
    assert document["recommendations"][1]["saving_usd_per_month"] is None
    assert document["alerts"][0] == {"rule": "GpuIdle", "count": 14, "firing_seconds": 51235}
    # The change vs the previous period is computed on exact figures, then rounded once.
    assert document["models"][0]["cost_per_million_tokens_change_ratio"] == 0.1027
    assert document["models"][2]["cost_per_million_tokens_change_ratio"] is None


def test_json_money_is_exact_to_the_cent_and_rounds_half_up(report: Report) -> None:
    spend = Decimal("1234.565")  # a binary float would hold 1234.5649999...
    totals = replace(
        report.totals,
        spend_usd=spend,
        idle_cost_usd=Decimal("0.005"),
        metered_usd=Decimal("-0.001"),
        gpu_hours=float("nan"),
    )
    doc = to_document(replace(report, totals=totals))
    assert doc["totals"]["spend_usd"] == "1234.57"
    assert doc["totals"]["idle_cost_usd"] == "0.01"
    assert doc["totals"]["metered_usd"] == "0.00", "never a negative zero"
    assert doc["totals"]["gpu_hours"] is None, "NaN is unknown (and not JSON)"
    daily = sum(Decimal(d["busy_usd"]) for d in doc["daily_spend"])
    assert daily == sum(round(d.busy_usd, 2) for d in report.daily_spend), "sums without drift"


def test_render_refuses_an_unknown_format(report: Report) -> None:
    with pytest.raises(ValueError, match="unknown report format 'xml'"):
        render(report, "xml")


# -- the same figures in every format ----------------------------------------------------------


@pytest.mark.parametrize("fmt", sorted(PARSERS))
def test_every_format_shows_the_json_figures(
    report: Report, document: dict[str, Any], fmt: str
) -> None:
    expected = figures_from_json(document)
    assert len(expected["models_per_m"]) == 3 and len(expected["gpus_idle"]) == 6
    assert PARSERS[fmt](render(report, fmt)) == expected


def test_figures_are_rounded_once_and_the_same_way(document: dict[str, Any]) -> None:
    # 12.4449 s -> 12.445 (ms, half up); 1.821702815 $/M -> 1.8217; tokens whole.
    assert document["models"][0]["p99_e2e_seconds"] == 12.445
    assert document["models"][0]["cost_per_million_tokens_usd"] == "1.8217"
    assert document["models"][2]["cost_per_million_tokens_usd"] == "54.5938"


def test_all_formats_render_and_end_with_a_newline(report: Report) -> None:
    for fmt in FORMATS:
        out = render(report, fmt)
        assert out.endswith("\n") and len(out) > 1000, fmt
