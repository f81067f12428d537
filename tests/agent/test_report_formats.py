"""Each report format's own layout, from one hand-built month (tests/agent/report_sample.py):
the 100-column terminal table, CSV sections with plain numbers and defused formulas,
escaped markdown, and a self-contained HTML page with its escaped names and charts."""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import replace
from decimal import Decimal

import pytest

from agent.reporting.model import DataExtent, ModelDay, Report
from agent.reporting.render import svg
from agent.reporting.render.dispatch import render
from tests.agent.report_parsers import (
    MONEY,
    Page,
    csv_sections,
    grid_table,
    markdown_tables,
    parse_html,
    terminal_sections,
)
from tests.agent.report_sample import DAYS, EVIL, MODELS, make_report


@pytest.fixture(scope="module")
def report() -> Report:
    return make_report()


# -- table -----------------------------------------------------------------------------------------


TABLE_SECTIONS = ["SUMMARY", "SPEND BY SOURCE", "MODELS", "USEFUL AND ABANDONED WORK", "TARGETS",
                  "HOSTS", "MODEL EFFICIENCY AND ENERGY", "SERVING EFFICIENCY", "GPU TIME",
                  "REAL WORK AND ENERGY", "TOP WASTE",
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


def gpu_uuids_shown(out: str, section: str) -> dict[tuple[str, str], str]:
    """(host, index) -> the UUID as the section shows it."""
    rows = grid_table(terminal_sections(out)[section])[1:]
    return {(row[0], row[1]): row[2] for row in rows}


def test_table_shows_each_gpu_uuid_alike_in_every_section(report: Report) -> None:
    out = render(report, "table")
    gpu_time, top_waste = (gpu_uuids_shown(out, s) for s in ("GPU TIME", "TOP WASTE"))
    whole = {(g.host, g.gpu_index): g.gpu_uuid for g in report.gpus}
    assert len(top_waste) == 5 and len(gpu_time) == 6
    for key, shown in top_waste.items():
        assert gpu_time[key] == shown
    for key, shown in gpu_time.items():
        assert shown == whole[key][:12] + "…"  # "GPU-" and the first group
    assert whole[("gpu-box-1", "0")] in render(report, "json")  # whole everywhere else


def test_table_uuids_that_share_their_first_group_are_told_apart(report: Report) -> None:
    twins = tuple(
        replace(g, gpu_uuid=f"GPU-00000000-1111-2222-3333-44444444444{n}")
        for n, g in enumerate(report.gpus)
    )
    out = render(replace(report, gpus=twins, top_waste=twins[4:]), "table")
    gpu_time = [row[2] for row in grid_table(terminal_sections(out)["GPU TIME"])[1:]]
    assert gpu_time == [f"GPU-00000000…444{n}" for n in range(6)]
    top_waste = [row[2] for row in grid_table(terminal_sections(out)["TOP WASTE"])[1:]]
    assert top_waste == gpu_time[4:]


def test_table_rows_follow_each_other_without_blank_lines(report: Report) -> None:
    """A blank line only between sections; a row's free-text figure (why its cost is unknown)
    goes under it, named, and an empty one takes no line."""
    unknown = replace(report.models[1], cost_unknown_reason="no rate for GPU-x on gpu-box-1")
    models = (report.models[0], unknown, report.models[2])
    out = render(replace(report, models=models), "table")
    assert "\n\n\n" not in out
    chunks = out.rstrip("\n").split("\n\n")[1:]  # after the header: one per section
    assert [c.split("\n")[0].split("  (")[0] for c in chunks] == TABLE_SECTIONS
    work = next(c for c in chunks if c.startswith("USEFUL AND ABANDONED WORK")).split("\n")
    at = next(i for i, line in enumerate(work) if "counted from" in line)
    rows = work[at + 1 :]
    assert len(rows) == 4, rows
    assert rows[0].startswith("  Qwen/Qwen2.5-7B-Instruct ")
    assert rows[1].startswith("  meta-llama/")
    assert rows[2] == "      cost unknown: no rate for GPU-x on gpu-box-1"
    assert rows[3].startswith("  " + EVIL)
    markdown = render(replace(report, models=models), "markdown")
    table = markdown.split("## Useful and abandoned work")[1].split("\n\n")[2].splitlines()
    assert len(table) == 2 + len(models) and all(line.startswith("| ") for line in table[2:])


def test_empty_sections_say_so(report: Report) -> None:
    empty = replace(report, alerts=(), queue_incidents=(), recommendations=(), models=())
    out = render(empty, "table")
    sections = terminal_sections(out)
    assert sections["ALERTS"] == ["  none in this period"]
    assert sections["RECOMMENDATIONS"] == ["  nothing to change"]
    assert "Alerts" in render(empty, "markdown")
    assert csv_sections(render(empty, "csv"))["alerts"] == []


def test_a_report_says_up_to_when_its_data_is_complete(report: Report) -> None:
    header = render(report, "table").split("\n\n")[0]
    assert "data complete to 2026-11-30 23:57" in header
    assert "no data before 2026-11-02 00:00" in header
    nothing = replace(report, recommendations=(), data=DataExtent(None, None))
    out = render(nothing, "table")
    assert "no data for this period" in out.split("\n\n")[0]
    assert terminal_sections(out)["RECOMMENDATIONS"] == ["  no data for this period"]
    assert "no data for this period" in render(nothing, "markdown")
    assert json.loads(render(nothing, "json"))["data"] == {"first": None, "complete_to": None}
    document = json.loads(render(report, "json"))["data"]
    assert document["complete_to"].startswith("2026-11-30T23:57")


# -- CSV -------------------------------------------------------------------------------------------

CSV_SECTIONS = ["report", "summary", "spend_sources", "models", "work", "targets", "hosts",
                "efficiency", "serving", "gpus", "real_work", "top_waste", "latency", "alerts",
                "queue_incidents", "budget", "recommendations",
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


def _grid_ys(chart: list[tuple[str, dict[str, str | None]]]) -> tuple[float, float]:
    """The plot's bottom ($0) and top: its first and last grid lines."""
    ys = [float(a["y1"] or 0) for t, a in chart if t == "line" and a.get("class") == "grid"]
    return ys[0], ys[-1]


def _svg(out: str, chart_id: str) -> str:
    return out[out.index(f'<svg class="chart" id="{chart_id}"') :].split("</svg>")[0]


def test_html_cost_chart_keeps_every_day_readable_beside_an_outlier(report: Report) -> None:
    """One paused day ($680/M beside $5-8/M) is cut at the top with a break sign and its figure
    written; every other day keeps a readable height (on the old scale, $1,000, they were a
    pixel or two off zero)."""
    qwen, llama = MODELS[0], MODELS[1]
    days = sorted({m.day for m in report.model_days})
    paused = days[12]
    model_days = tuple(
        ModelDay(qwen, d, Decimal("680.00") if d == paused else Decimal(5 + i % 4))
        for i, d in enumerate(days)
    )
    out = render(replace(report, model_days=model_days), "html")
    chart = _chart(parse_html(out), "chart-cost")
    bottom, top = _grid_ys(chart)
    heights = [bottom - float(a["cy"] or 0) for t, a in chart if t == "circle"]
    assert len(heights) == DAYS
    outlier = heights.pop(12)
    assert outlier == bottom - top, "the outlier stops at the top"
    assert min(heights) > 0.5 * (bottom - top), "a $5 day stands at least half the height"
    drawn = _svg(out, "chart-cost")
    assert drawn.count('class="clipped"') == 1 and drawn.count('class="break"') == 1
    assert ">$680.0000</text>" in drawn, "its figure written above it"
    assert f"{qwen}, {paused}: $680.0000, above the axis" in drawn, "its <title> says why"
    assert "1 model-day(s) above $8 would flatten the others" in drawn, "and its description"

    # A model dear every day ($300/M) beside it is its own reference: none of its days is cut.
    dear = tuple(ModelDay(llama, d, Decimal(300 + i % 5)) for i, d in enumerate(days))
    out = render(replace(report, model_days=model_days + dear), "html")
    chart = _chart(parse_html(out), "chart-cost")
    bottom, top = _grid_ys(chart)
    llama_color = svg.series_of([qwen, llama])[1].color
    ys = [float(a["cy"] or 0) for t, a in chart if t == "circle" and a["fill"] == llama_color]
    assert len(ys) == DAYS and min(ys) > top
    assert _svg(out, "chart-cost").count('class="clipped"') == 1


def test_html_spend_chart_cuts_an_outlier_day_and_keeps_the_others_readable(
    report: Report,
) -> None:
    spend = list(report.daily_spend)
    spend[9] = replace(spend[9], busy_usd=Decimal("9000.00"), idle_usd=Decimal("1500.00"))
    out = render(replace(report, daily_spend=tuple(spend)), "html")
    chart = _chart(parse_html(out), "chart-spend")
    bottom, top = _grid_ys(chart)
    busy = [float(a["height"] or 0) for t, a in chart if t == "rect" and a.get("class") == "busy"]
    idle = [float(a["height"] or 0) for t, a in chart if t == "rect" and a.get("class") == "idle"]
    totals = [b + i for b, i in zip(busy, idle, strict=True)]
    assert totals[9] == bottom - top, "the outlier reaches the top, no further"
    normal = totals[:9] + totals[10:]
    assert min(normal) > 0.25 * (bottom - top), "every other day has a readable height"
    drawn = _svg(out, "chart-spend")
    assert drawn.count('class="clipped"') == 1 and ">$10,500.00</text>" in drawn


def test_html_figures_of_adjacent_cut_days_do_not_overlap(report: Report) -> None:
    spend = [replace(d, busy_usd=Decimal("9000.00")) if 10 <= i < 17 else d
             for i, d in enumerate(report.daily_spend)]  # fmt: skip
    drawn = svg.spend_chart(spend)
    figures = re.findall(r'class="clipped-value" x="([\d.]+)" y="([\d.]+)"[^>]*>([^<]+)<', drawn)
    assert drawn.count('class="clipped"') == len(figures) == 7
    for (x1, y1, a), (x2, y2, b) in itertools.combinations(figures, 2):
        apart = abs(float(x1) - float(x2)) > (len(a) + len(b)) * svg._CHAR / 2
        assert y1 != y2 or apart, (a, b)


def test_html_charts_cut_nothing_without_an_outlier(report: Report) -> None:
    out = render(report, "html")
    assert 'class="clipped"' not in out and "above the axis" not in out


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
