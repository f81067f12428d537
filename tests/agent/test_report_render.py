"""Every report format from one hand-built month of a small fleet: the JSON contract, the same
figures in every format (each parsed back), the 100-column table, CSV sections, a self-contained
HTML page with its charts, a real headless Chromium render, and `gpuwatch report`'s argument
errors."""

from __future__ import annotations

import argparse
import csv
import io
import json
import random
import re
import shutil
import struct
import subprocess
import zlib
from dataclasses import replace
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from agent import report_cli
from agent.config import Config
from agent.report_model import (
    SCHEMA_VERSION,
    AlertRow,
    Budget,
    DailySpend,
    GpuDay,
    GpuRow,
    HostRow,
    Latency,
    ModelDay,
    ModelRow,
    Period,
    QueueIncident,
    Recommendation,
    Report,
    SpendSource,
    Totals,
)
from agent.report_render import FORMATS, render, to_document
from agent.report_render.sections import SUMMARY_LABELS

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "build" / "test-artifacts"
EVIL = 'evil<b>&"model'
LONG = "meta-llama/Llama-3.1-70B-Instruct-FP8-dynamic"
MODELS = ("Qwen/Qwen2.5-7B-Instruct", LONG, EVIL)
DAYS = 30
HOURS = DAYS * 24


# -- the fixture: November 2026 in Madrid, 2 hosts, 6 GPUs, 3 models ------------------------


def _gpus() -> list[tuple[str, str, str, Decimal]]:
    """(host, uuid, index, USD per hour)."""
    rng = random.Random(7)
    out = []
    for host, count, rate in (("gpu-box-1", 4, Decimal("2.72")), ("gpu-box-2", 2, Decimal("1.19"))):
        for index in range(count):
            uuid = "GPU-" + "-".join(
                "".join(rng.choice("0123456789abcdef") for _ in range(n)) for n in (8, 4, 4, 4, 12)
            )
            out.append((host, uuid, str(index), rate))
    return out


def _gpu_rows() -> list[GpuRow]:
    rows = []
    for n, (host, uuid, index, rate) in enumerate(_gpus()):
        observed = HOURS - 1.5 * n  # a box restarted now and then
        busy = observed * (0.91 - 0.14 * n)
        cost = rate * Decimal(repr(observed))
        idle = rate * Decimal(repr(observed - busy))
        rows.append(
            GpuRow(host, uuid, index, "NVIDIA H100 80GB HBM3" if rate > 2 else "NVIDIA L4",
                   cost, idle, observed, busy, busy / observed,
                   (0.71 + n / 100) * (80 if rate > 2 else 24) * 2**30,
                   (80 if rate > 2 else 24) * 2**30)
        )  # fmt: skip
    return rows


def make_report() -> Report:
    zone = "Europe/Madrid"
    start = datetime(2026, 10, 31, 23, 0, tzinfo=UTC)  # 1 November 00:00 CET
    period = Period(start, start + timedelta(days=DAYS), "2026-11", zone)
    previous = Period(datetime(2026, 9, 30, 22, 0, tzinfo=UTC), start, "2026-10", zone)
    gpus = _gpu_rows()
    metered = sum((g.cost_usd for g in gpus), Decimal(0))
    idle = sum((g.idle_cost_usd for g in gpus), Decimal(0))
    models = [
        ModelRow(MODELS[0], Decimal("3917.283333"), 2_150_345_678.0, 2_150_345_678.0,
                 6_300_000_123.0, 1_234_567.0, Decimal("1.821702815"), Decimal("1.652"),
                 Latency(0.0421, 0.1876, 0.3125, 1_234_567.0),
                 Latency(2.4, 7.9, 12.4449, 1_234_567.0)),
        ModelRow(LONG, Decimal("6011.115"), 1_020_001_000.0, 1_020_001_000.0, 3.1e9, 401_000.0,
                 Decimal("5.893245"), Decimal("6.5"), Latency(0.11, 0.5, 0.955, 401_000.0),
                 Latency(5.5, 17.25, 30.0005, 401_000.0)),
        ModelRow(EVIL, Decimal("655.125"), 12_000_000.0, 12_000_000.0, 50_000_000.0, 999.0,
                 Decimal("54.59375"), None, Latency(), Latency()),
    ]  # fmt: skip
    useful = sum(m.useful_tokens for m in models)
    busy_hours = sum(g.busy_hours for g in gpus)
    gpu_hours = sum(g.observed_hours for g in gpus)
    totals = Totals(
        spend_usd=metered + Decimal("312.404"), metered_usd=metered,
        billed_usd=metered + Decimal("312.404"), useful_tokens=useful, output_tokens=useful,
        total_tokens=9.45e9, cost_per_million_tokens_usd=metered / Decimal(repr(useful / 1e6)),
        previous_cost_per_million_tokens_usd=Decimal("3.1"), gpu_hours=gpu_hours,
        busy_gpu_hours=busy_hours, idle_loaded_gpu_hours=(gpu_hours - busy_hours) * 0.8,
        unallocated_gpu_hours=(gpu_hours - busy_hours) * 0.2,
        utilization_ratio=busy_hours / gpu_hours, idle_cost_usd=idle, requests=1_636_566.0,
    )  # fmt: skip
    first = date(2026, 11, 1)
    days = [first + timedelta(days=i) for i in range(DAYS)]
    rng = random.Random(11)
    return Report(
        generated_at=datetime(2026, 12, 1, 7, 5, 12, tzinfo=UTC),
        period=period,
        previous_period=previous,
        hosts_filter=(),
        models_filter=(),
        useful_tokens_rule="output",
        totals=totals,
        spend_sources=(
            SpendSource("metered", "metered", metered),
            SpendSource("runpod", "billed", metered + Decimal("312.404")),
        ),
        models=tuple(models),
        hosts=(
            HostRow(
                "gpu-box-1",
                sum((g.cost_usd for g in gpus[:4]), Decimal(0)),
                3_170_346_678.0,
                Decimal("2.9012"),
                Decimal("3.0"),
                sum(g.observed_hours for g in gpus[:4]),
                0.7,
            ),
            HostRow(
                "gpu-box-2",
                sum((g.cost_usd for g in gpus[4:]), Decimal(0)),
                12_000_000.0,
                Decimal("142.6049"),
                Decimal("120.5"),
                sum(g.observed_hours for g in gpus[4:]),
                None,
            ),
        ),  # fmt: skip
        gpus=tuple(gpus),
        top_waste=tuple(sorted(gpus, key=lambda g: g.idle_cost_usd, reverse=True)[:5]),
        alerts=(
            AlertRow("GpuIdle", 14, 51_234.6),
            AlertRow("QueueGrowing", 3, 4_980.0),
            AlertRow("BudgetForecastOver", 1, 1_209_600.0),
        ),
        queue_incidents=(
            QueueIncident(
                "gpu-box-1",
                "llama-70b",
                LONG,
                datetime(2026, 11, 12, 17, 3, tzinfo=UTC),
                datetime(2026, 11, 12, 17, 48, tzinfo=UTC),
                "waiting requests grew from 3 to 118 in 10m; KV cache 97% full",
            ),
            QueueIncident(
                "gpu-box-2",
                "tiny<script>",
                EVIL,
                datetime(2026, 11, 30, 22, 40, tzinfo=UTC),
                None,
                f"queue of {EVIL} still growing",
            ),
        ),  # fmt: skip
        budget=Budget(
            Decimal("15000"),
            "2026-11",
            metered + Decimal("312.404"),
            0.93,
            Decimal("14205.5"),
            0.947,
        ),  # fmt: skip
        recommendations=(
            Recommendation(
                "serverless",
                f"Move {EVIL} to serverless",
                "At a 0.7% duty cycle, serverless at $0.00035/s costs $41.20/month "
                "against $856.80 for the pod.",
                Decimal("815.6"),
            ),
            Recommendation(
                "consolidate",
                "Consolidate gpu-box-2's two L4s onto one",
                "Both ran under 30% busy all month; one L4 fits the peak.",
                None,
            ),
        ),  # fmt: skip
        daily_spend=tuple(
            DailySpend(
                d,
                Decimal(rng.randint(25_000, 38_000)) / 100,
                Decimal(rng.randint(2_000, 9_000)) / 100 + Decimal("0.004"),
            )
            for d in days
        ),  # fmt: skip
        model_days=tuple(
            ModelDay(
                m,
                d,
                None
                if (m == EVIL and i % 7 == 3)
                else Decimal(rng.randint(100, 900)) / 100 * (k + 1),
            )
            for k, m in enumerate(MODELS)
            for i, d in enumerate(days)
        ),  # fmt: skip
        gpu_days=tuple(
            GpuDay(g.host, g.gpu_uuid, g.gpu_index, d, None if (n == 5 and i < 2) else rng.random())
            for n, g in enumerate(gpus)
            for i, d in enumerate(days)
        ),  # fmt: skip
    )


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
MONEY = re.compile(r"^-?\d+\.\d{2}$")
PER_M = re.compile(r"^-?\d+\.\d{4}$")


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


# -- parsing every format back -------------------------------------------------------------------


def number(spelled: str) -> Decimal:
    """A figure as people read it ("$1,234.56", "45.67%", "1,234") back to a Decimal."""
    cleaned = spelled.replace("$", "").replace(",", "").strip()
    if cleaned.endswith("%"):
        return Decimal(cleaned[:-1].split()[-1]) / 100
    return Decimal(cleaned)


def grid_table(lines: list[str]) -> list[list[str]]:
    """Rows of a terminal grid: cells are separated by two spaces or more."""
    return [re.split(r"\s{2,}", line.strip()) for line in lines if line.strip()]


def terminal_sections(table: str) -> dict[str, list[str]]:
    """Lines per heading (a line that is not indented), after the two-line header."""
    _, _, body = table.partition("\n\n")
    sections: dict[str, list[str]] = {}
    current = ""
    for line in body.splitlines():
        if line and not line.startswith(" "):
            current = line.split("  (")[0]
            sections[current] = []
        elif line:
            sections[current].append(line)
    return sections


def csv_sections(text: str) -> dict[str, list[dict[str, str]]]:
    out: dict[str, list[dict[str, str]]] = {}
    rows = list(csv.reader(io.StringIO(text)))
    i = 0
    while i < len(rows):
        if rows[i] and rows[i][0].startswith("# "):
            name, header = rows[i][0][2:], rows[i + 1]
            i += 2
            out[name] = []
            while i < len(rows) and rows[i]:
                assert len(rows[i]) == len(header), (name, rows[i])
                out[name].append(dict(zip(header, rows[i], strict=True)))
                i += 1
        else:
            assert rows[i] == [], f"stray CSV row {rows[i]!r}"
            i += 1
    return out


def markdown_tables(text: str) -> dict[str, list[list[str]]]:
    tables: dict[str, list[list[str]]] = {}
    current = ""
    for line in text.splitlines():
        if line.startswith("## "):
            current = line[3:]
            tables[current] = []
        elif line.startswith("|") and not re.match(r"^\|[-:|]+\|$", line):
            cells = re.split(r"(?<!\\)\|", line)[1:-1]
            tables[current].append([re.sub(r"\\(.)", r"\1", c.strip()) for c in cells])
    return tables


class Page(HTMLParser):
    """Tables by id (cell texts per row), every tag with its attributes, and the text."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tables: dict[str, list[list[str]]] = {}
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.stack: list[str] = []
        self._table: str | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag == "table":
            self._table = dict(attrs).get("id") or f"anonymous-{len(self.tables)}"
            self.tables[self._table] = []
        elif tag == "tr" and self._table:
            self.tables[self._table].append([])
        elif tag in ("td", "th") and self._table:
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._table and self._cell is not None:
            self.tables[self._table][-1].append("".join(self._cell).strip())
            self._cell = None
        elif tag == "table":
            self._table = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def parse_html(text: str) -> Page:
    page = Page()
    page.feed(text)
    page.close()
    return page


Figures = dict[str, Any]


def figures_from_json(doc: dict[str, Any]) -> Figures:
    t = doc["totals"]
    return {
        "spend": Decimal(t["spend_usd"]),
        "useful_tokens": Decimal(t["useful_tokens"]),
        "cost_per_m": Decimal(t["cost_per_million_tokens_usd"]),
        "gpu_hours": Decimal(str(t["gpu_hours"])),
        "busy_gpu_hours": Decimal(str(t["busy_gpu_hours"])),
        "idle_cost": Decimal(t["idle_cost_usd"]),
        "models_per_m": [Decimal(m["cost_per_million_tokens_usd"]) for m in doc["models"]],
        "gpus_idle": [Decimal(g["idle_cost_usd"]) for g in doc["gpus"]],
    }


_SUMMARY_KEYS = {
    "spend": "spend_usd",
    "useful_tokens": "useful_tokens",
    "cost_per_m": "cost_per_million_tokens_usd",
    "gpu_hours": "gpu_hours",
    "busy_gpu_hours": "busy_gpu_hours",
    "idle_cost": "idle_cost_usd",
}


def figures_from_rows(
    summary: list[list[str]], models: list[list[str]], gpus: list[list[str]]
) -> Figures:
    """From human-readable rows (header row first in models and gpus)."""
    by_label = {row[0]: row[1] for row in summary}
    out: Figures = {k: number(by_label[SUMMARY_LABELS[key]]) for k, key in _SUMMARY_KEYS.items()}
    per_m = models[0].index("$/M tokens")
    idle = gpus[0].index("idle cost")
    out["models_per_m"] = [number(row[per_m]) for row in models[1:]]
    out["gpus_idle"] = [number(row[idle]) for row in gpus[1:]]
    return out


def figures_from_table(text: str) -> Figures:
    sections = terminal_sections(text)
    return figures_from_rows(
        grid_table(sections["SUMMARY"]),
        grid_table(sections["MODELS"]),
        grid_table(sections["GPU TIME"]),
    )


def figures_from_markdown(text: str) -> Figures:
    tables = markdown_tables(text)
    return figures_from_rows(tables["Summary"][1:], tables["Models"], tables["GPU time"])


def figures_from_html(text: str) -> Figures:
    tables = parse_html(text).tables
    return figures_from_rows(
        tables["table-summary"][1:], tables["table-models"], tables["table-gpus"]
    )


def figures_from_csv(text: str) -> Figures:
    sections = csv_sections(text)
    summary = {row["figure"]: row["value"] for row in sections["summary"]}
    out: Figures = {k: Decimal(summary[key]) for k, key in _SUMMARY_KEYS.items()}
    out["models_per_m"] = [Decimal(r["cost_per_million_tokens_usd"]) for r in sections["models"]]
    out["gpus_idle"] = [Decimal(r["idle_cost_usd"]) for r in sections["gpus"]]
    return out


PARSERS = {
    "table": figures_from_table,
    "csv": figures_from_csv,
    "markdown": figures_from_markdown,
    "html": figures_from_html,
}


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


# -- table -----------------------------------------------------------------------------------------


TABLE_SECTIONS = ["SUMMARY", "SPEND BY SOURCE", "MODELS", "HOSTS", "GPU TIME", "TOP WASTE",
                  "LATENCY", "ALERTS", "QUEUE INCIDENTS", "BUDGET", "RECOMMENDATIONS"]  # fmt: skip


def test_table_fits_100_columns_with_every_section_in_order(report: Report) -> None:
    out = render(report, "table")
    too_long = [line for line in out.splitlines() if len(line) > 100]
    assert too_long == []
    assert list(terminal_sections(out)) == TABLE_SECTIONS
    assert out.startswith("gpuwatch report 2026-11: 2026-11-01 00:00 to 2026-12-01 00:00")


def test_table_shortens_names_never_numbers(report: Report) -> None:
    out = render(report, "table")
    models = grid_table(terminal_sections(out)["MODELS"])
    assert models[2][0].startswith("meta-llama/") and models[2][0].endswith("…")
    assert models[1][-1] == "↑ +10.27%", "trend arrow and change vs previous"
    assert models[2][-1] == "↓ -9.33%"
    assert models[3][-2:] == ["n/a", "n/a"], "no previous period figure"
    assert EVIL in out, "the terminal shows names as they are"


def test_table_stays_within_100_columns_with_huge_names_and_figures(report: Report) -> None:
    huge = replace(
        report,
        models=tuple(replace(m, model=m.model * 6, requests=9.9e12) for m in report.models),
        queue_incidents=tuple(replace(q, summary=q.summary * 20) for q in report.queue_incidents),
        recommendations=tuple(replace(r, detail=r.detail * 9) for r in report.recommendations),
    )
    assert max(len(line) for line in render(huge, "table").splitlines()) <= 100


def test_empty_sections_say_so(report: Report) -> None:
    empty = replace(report, alerts=(), queue_incidents=(), recommendations=(), models=())
    out = render(empty, "table")
    sections = terminal_sections(out)
    assert sections["ALERTS"] == ["  none in this period"]
    assert sections["RECOMMENDATIONS"] == ["  nothing to change"]
    assert "Alerts" in render(empty, "markdown")
    assert csv_sections(render(empty, "csv"))["alerts"] == []


# -- CSV -------------------------------------------------------------------------------------------

CSV_SECTIONS = ["report", "summary", "spend_sources", "models", "hosts", "gpus", "top_waste",
                "latency", "alerts", "queue_incidents", "budget", "recommendations",
                "daily_spend", "model_days", "gpu_days"]  # fmt: skip


def test_csv_parses_into_every_section_with_plain_numbers(report: Report) -> None:
    out = render(report, "csv")
    sections = csv_sections(out)
    assert list(sections) == CSV_SECTIONS
    assert len(sections["daily_spend"]) == DAYS and len(sections["gpu_days"]) == DAYS * 6
    assert sections["models"][2]["model"] == EVIL
    meta = {row["figure"]: row["value"] for row in sections["report"]}
    assert meta["schema_version"] == "1" and meta["period_label"] == "2026-11"
    for row in sections["gpus"]:
        assert MONEY.match(row["cost_usd"]) and "," not in row["cost_usd"]
        assert re.match(r"^\d+$", row["vram_peak_bytes"])
    summary = {row["figure"]: row["value"] for row in sections["summary"]}
    assert re.match(r"^\d+$", summary["useful_tokens"])
    assert summary["billed_usd"] != "" and sections["latency"][2]["p99_ttft_seconds"] == ""


def test_csv_defuses_spreadsheet_formulas_in_names(report: Report) -> None:
    sneaky = replace(report, models=(replace(report.models[0], model="=HYPERLINK(1)"),))
    rows = csv_sections(render(sneaky, "csv"))["models"]
    assert rows[0]["model"] == "'=HYPERLINK(1)"


# -- markdown --------------------------------------------------------------------------------------


def test_markdown_escapes_names_and_keeps_tables_intact(report: Report) -> None:
    out = render(report, "markdown")
    assert EVIL not in out and "<b>" not in out and 'evil\\<b\\>\\&"model' in out
    tables = markdown_tables(out)
    widths = {len(row) for row in tables["Models"]}
    assert widths == {7}, "a | in a name would split the row"
    assert out.startswith("# gpuwatch report 2026-11\n")


# -- HTML ------------------------------------------------------------------------------------------

_URL_ATTRS = ("src", "href", "xlink:href", "action", "formaction", "poster", "data", "srcset")


def test_html_is_one_self_contained_page(report: Report) -> None:
    out = render(report, "html")
    page = parse_html(out)
    tags = {tag for tag, _ in page.tags}
    assert not tags & {"script", "link", "img", "iframe", "object", "embed", "image", "use"}
    for tag, attrs in page.tags:
        for name, value in attrs.items():
            assert name not in _URL_ATTRS, (tag, name, value)
            assert not name.startswith("on"), (tag, name)  # no event handlers either
    assert "http://" not in out and "https://" not in out and "url(" not in out
    assert "@import" not in out and "@font-face" not in out
    csp = [a for t, a in page.tags if t == "meta" and a.get("http-equiv")]
    assert csp and csp[0]["content"] is not None and "default-src 'none'" in csp[0]["content"]


def test_html_escapes_every_string_from_the_data(report: Report) -> None:
    out = render(report, "html")
    assert EVIL not in out and "<b>" not in out and "tiny<script>" not in out
    assert "evil&lt;b&gt;&amp;&quot;model" in out
    page = parse_html(out)
    assert page.tables["table-models"][3][0] == EVIL, "the browser shows the name as it is"
    assert page.tables["table-queue_incidents"][2][3] == "tiny<script>"


def _chart(page: Page, chart_id: str) -> list[tuple[str, dict[str, str | None]]]:
    """The tags inside one <svg id=...>, in document order."""
    start = next(i for i, (t, a) in enumerate(page.tags) if t == "svg" and a.get("id") == chart_id)
    end = next((i for i in range(start + 1, len(page.tags)) if page.tags[i][0] == "svg"), None)
    return page.tags[start:end]


def test_html_charts_have_a_mark_per_day_model_and_gpu(report: Report) -> None:
    page = parse_html(render(report, "html"))
    spend = _chart(page, "chart-spend")
    assert sum(1 for t, a in spend if t == "rect" and a.get("class") == "busy") == DAYS
    assert sum(1 for t, a in spend if t == "rect" and a.get("class") == "idle") == DAYS
    cost = _chart(page, "chart-cost")
    lines = [a for t, a in cost if t == "path" and a.get("class") == "line"]
    assert len(lines) == len(MODELS)
    evil = [m.cost_per_million_tokens_usd for m in report.model_days if m.model == EVIL]
    runs = sum(1 for i, v in enumerate(evil) if v is not None and (i == 0 or evil[i - 1] is None))
    assert runs == 5 and (lines[2]["d"] or "").count("M") == runs, "a day without tokens: a gap"
    known = sum(1 for m in report.model_days if m.cost_per_million_tokens_usd is not None)
    assert sum(1 for t, _ in cost if t == "circle") == known
    legend = page.tags.index(next((t, a) for t, a in page.tags if a.get("class") == "legend"))
    assert legend > 0
    heat = _chart(page, "chart-heatmap")
    cells = [a for t, a in heat if t == "rect" and a.get("class") == "cell"]
    assert len(cells) == DAYS * len(report.gpus)
    assert sum(1 for a in cells if a.get("fill") == "#d9d9d9") == 2, "no data is grey, not 0 %"
    for chart in ("chart-spend", "chart-cost", "chart-heatmap"):
        svg = _chart(page, chart)
        assert svg[0][1].get("role") == "img" and svg[1][0] == "title" and svg[2][0] == "desc"
    # Each chart has its figures as a table too (for screen readers and copy-paste).
    assert len(page.tables["table-daily_spend"]) == DAYS + 1
    assert len(page.tables["table-model_days"]) == DAYS * len(MODELS) + 1
    assert len(page.tables["table-gpu_days"]) == DAYS * len(report.gpus) + 1


def test_html_legend_names_each_model_once(report: Report) -> None:
    out = render(report, "html")
    legend = re.search(r'<ul class="legend"[^>]*>(.*?)</ul>', out)
    assert legend is not None
    assert legend.group(1).count("<li>") == len(MODELS)
    assert "evil&lt;b&gt;&amp;&quot;model" in legend.group(1)


def test_html_without_daily_data_says_so(report: Report) -> None:
    bare = replace(report, daily_spend=(), model_days=(), gpu_days=())
    page = parse_html(render(bare, "html"))
    assert not [a for t, a in page.tags if t == "svg"]
    assert "no data in this period" in render(bare, "html")


# -- a real browser --------------------------------------------------------------------------------

CHROMIUM = shutil.which("chromium")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None,
    reason="Debian's chromium is not installed (`make test` installs it when run as root)",
)
# With --enable-logging=stderr, Chromium logs each console message of the page as
# "...:INFO:CONSOLE:<line>] "<message>", source: <url> (<line>)" (older builds: "CONSOLE(<line>)"):
# SVG attribute errors, CSP refusals, script errors and console.error alike.
CONSOLE = re.compile(r":CONSOLE[:(]")


def headless(page: Path, screenshot: Path, profile: Path) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    return subprocess.run(
        [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu",
         f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0",
         "--no-first-run", "--disable-extensions", "--disable-background-networking",
         f"--screenshot={screenshot}", "--window-size=1280,2400", page.as_uri()],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def console_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if CONSOLE.search(line)]


def png_facts(data: bytes) -> tuple[int, int, bytes]:
    """Width, height and the decompressed (filtered) image data of a PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    width, height = struct.unpack(">II", data[16:24])
    chunks, pos = [], 8
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind = data[pos + 4 : pos + 8]
        if kind == b"IDAT":
            chunks.append(data[pos + 8 : pos + 8 + length])
        pos += 12 + length
    return width, height, zlib.decompress(b"".join(chunks))


@needs_chromium
def test_chromium_console_capture_sees_errors(tmp_path: Path) -> None:
    """The canary for the test below: a page with the mistakes this renderer could make (a bad
    SVG attribute, a request the CSP refuses) must produce console lines, or 'no console
    errors' would prove nothing."""
    broken = tmp_path / "broken.html"
    broken.write_text(
        '<!doctype html><html><head><meta charset="utf-8">'
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'">'
        '<title>broken</title></head><body><svg><rect width="-5" height="NaN"/></svg>'
        '<img src="https://example.invalid/x.png" alt=""></body></html>',
        encoding="utf-8",
    )
    result = headless(broken, tmp_path / "broken.png", tmp_path / "profile")
    lines = console_lines(result.stderr)
    assert any("<rect> attribute width" in line for line in lines), result.stderr[-3000:]
    assert any("Content Security Policy" in line for line in lines), result.stderr[-3000:]


@needs_chromium
def test_html_report_renders_in_headless_chromium_without_console_errors(
    report: Report, tmp_path: Path
) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page = ARTIFACTS / "report.html"
    page.write_text(render(report, "html"), encoding="utf-8")
    screenshot = ARTIFACTS / "report.png"
    screenshot.unlink(missing_ok=True)
    result = headless(page, screenshot, tmp_path / "profile")
    assert result.returncode == 0, result.stderr[-3000:]
    assert console_lines(result.stderr) == []
    width, height, pixels = png_facts(screenshot.read_bytes())
    assert (width, height) == (1280, 2400)
    # A blank page of this size is a 14 KB PNG whose filtered rows are zero bytes but for the
    # filter byte (~2,400 non-zero bytes); this report's is ~250 KB with ~240,000.
    assert screenshot.stat().st_size > 100_000
    assert sum(1 for b in pixels if b) > 20 * height


# -- gpuwatch report: arguments -----------------------------------------------------------------

NOW = datetime(2026, 11, 20, 9, 30, 15, tzinfo=UTC)


def report_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="gpuwatch")
    report_cli.add_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["report", *argv])


@pytest.mark.parametrize(
    "argv",
    [
        ("--month", "2026-11", "--week"),
        ("--last-month", "--week"),
        ("--month", "--from", "2026-11-01"),
        ("--week", "--from", "2026-11-01", "--to", "2026-11-08"),
    ],
)
def test_report_refuses_two_period_choices(
    argv: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        report_args(*argv)
    assert exit_.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("--month", "2026-13"), "--month: expected YYYY-MM (e.g. 2026-11), got '2026-13'"),
        (("--month", "Nov"), "--month: expected YYYY-MM"),
        (("--month", "2027-01"), "--month: 2027-01 has not started yet"),
        (("--from", "2026-11-01"), "--from: a range needs both --from and --to (--to missing)"),
        (("--to", "2026-11-08"), "--to: a range needs both --from and --to (--from missing)"),
        (("--month", "2026-10", "--to", "2026-11-08"), "--to: a range needs both"),
        (("--from", "2026-11-31", "--to", "2026-12-08"), "--from: expected a date YYYY-MM-DD"),
        (("--from", "2026-11-08", "--to", "2026-11-01"), "--to: '2026-11-01' is not after"),
    ],
)
def test_report_names_the_argument_it_cannot_use(argv: tuple[str, ...], message: str) -> None:
    with pytest.raises(report_cli.ReportArgumentError, match=re.escape(message)):
        report_cli.choose_period(report_args(*argv), NOW, "Europe/Madrid")


def test_report_periods_from_the_flags() -> None:
    def label(*argv: str) -> str:
        return report_cli.choose_period(report_args(*argv), NOW, "Europe/Madrid").label

    assert label() == "2026-11", "default: the current month to date"
    assert label("--month") == "2026-11"
    assert label("--month", "2026-10") == "2026-10"
    assert label("--last-month") == "2026-10"
    assert label("--week") == "2026-W47"
    assert label("--from", "2026-11-03", "--to", "2026-11-10") == "2026-11-03..2026-11-10"
    current = report_cli.choose_period(report_args(), NOW, "Europe/Madrid")
    assert current.end == datetime(2026, 11, 20, 9, 30, tzinfo=UTC), "to date, to the minute"


def test_report_defaults_and_filters_parse() -> None:
    args = report_args("--host", "a", "--host", "b", "--model", "m", "--format", "csv")
    assert (args.host, args.model, args.format, args.output) == (["a", "b"], ["m"], "csv", None)
    assert report_args().format == "table"
    with pytest.raises(SystemExit):
        report_args("--format", "xml")


def test_report_writes_the_file_it_is_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = Config(host="box", database_url=f"sqlite:///{tmp_path / 'gpuwatch.db'}")
    target = tmp_path / "report.json"
    args = report_args("--month", "2026-10", "--format", "json", "--output", str(target))
    assert report_cli.run(args, config, NOW) == 0
    out, err = capsys.readouterr()
    assert out == "" and err == f"gpuwatch: json report for 2026-10 written to {target}\n"
    document = json.loads(target.read_text(encoding="utf-8"))
    assert document["schema_version"] == SCHEMA_VERSION
    assert document["period"]["label"] == "2026-10"
    assert document["totals"]["spend_usd"] == "0.00"


def test_report_prints_to_stdout_and_explains_an_unwritable_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = Config(host="box", database_url=f"sqlite:///{tmp_path / 'gpuwatch.db'}")
    assert report_cli.run(report_args("--week"), config, NOW) == 0
    out = capsys.readouterr().out
    assert out.startswith("gpuwatch report 2026-W47: ")
    assert max(len(line) for line in out.splitlines()) <= 100
    missing = tmp_path / "no-such-folder" / "r.html"
    args = report_args("--format", "html", "--output", str(missing))
    with pytest.raises(report_cli.ReportArgumentError, match="--output: cannot write"):
        report_cli.run(args, config, NOW)
