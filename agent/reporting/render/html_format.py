"""``--format html``: one self-contained page to mail or archive.

Inline CSS, inline SVG charts (:mod:`.svg`), no script, font, image or link to fetch; a
Content-Security-Policy of ``default-src 'none'`` makes the browser refuse any request the page
might still try, so "self-contained" is enforced, not just intended. Every string from the data
goes through ``html.escape``. Each chart has its data table below it (in a <details>), and every
section is a real <table> with header cells, for screen readers and copy-paste.
"""

from __future__ import annotations

from collections.abc import Sequence

from agent.reporting.basis import spend_kind
from agent.reporting.model import Report
from agent.reporting.render import fields, svg
from agent.reporting.render.sections import Layout, Section, daily_sections, sections
from agent.reporting.render.svg import escape
from agent.reporting.render.values import Cell, Kind, text

CSP = "default-src 'none'; style-src 'unsafe-inline'"

STYLE = """
:root { color-scheme: light; --ink: #1d2330; --muted: #5b6472; --rule: #d8dde5; --band: #f4f6f9; }
* { box-sizing: border-box; }
body { margin: 0; padding: 24px 32px 48px; color: var(--ink); background: #fff;
  font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, Arial, sans-serif; }
header { border-bottom: 2px solid var(--ink); margin-bottom: 16px; }
h1 { font-size: 24px; margin: 0 0 4px; }
h2 { font-size: 18px; margin: 32px 0 4px; }
h3 { font-size: 15px; margin: 20px 0 4px; }
.meta, .note, .empty, figcaption { color: var(--muted); margin: 2px 0 8px; }
.kpis { display: flex; flex-wrap: wrap; gap: 12px; margin: 12px 0; padding: 0; list-style: none; }
.kpis li { border: 1px solid var(--rule); border-radius: 6px; padding: 10px 14px;
  min-width: 180px; }
.kpis .label { display: block; color: var(--muted); font-size: 12px; }
.kpis .value { display: block; font-size: 20px; font-weight: 600;
  font-variant-numeric: tabular-nums; }
.scroll { overflow-x: auto; max-width: 100%; }
table { border-collapse: collapse; margin: 6px 0 4px; font-variant-numeric: tabular-nums; }
th, td { padding: 4px 10px; border-bottom: 1px solid var(--rule); vertical-align: top;
  white-space: nowrap; }
td.wrap { white-space: normal; min-width: 18em; }
thead th { background: var(--band); text-align: left; white-space: nowrap; }
tbody th { text-align: left; font-weight: normal; }
td.num, th.num { text-align: right; white-space: nowrap; }
tbody tr:nth-child(even) td, tbody tr:nth-child(even) th { background: #fafbfc; }
figure { margin: 12px 0 24px; }
svg.chart { width: 100%; max-width: 960px; height: auto; display: block; }
svg.chart text { font-size: 11px; fill: #333; }
ul.legend { display: flex; flex-wrap: wrap; gap: 6px 18px; list-style: none; padding: 0;
  margin: 6px 0; }
.swatch { display: inline-block; width: 18px; height: 4px; margin-right: 6px;
  vertical-align: middle; }
details { margin: 4px 0 0; }
summary { cursor: pointer; color: var(--muted); }
ol.notes li { margin-bottom: 10px; }
ol.notes .detail { display: block; color: var(--muted); }
@media print { body { padding: 0; } details { display: none; } h2 { break-after: avoid; } }
"""

_KPIS = (
    ("spend_usd", "spend"),
    ("cost_per_million_tokens_usd", "cost per million useful tokens (metered)"),
    ("cost_per_million_tokens_change_ratio", "vs previous period"),
    ("idle_cost_usd", "idle cost"),
    ("utilization_ratio", "utilization"),
)


def render_html(report: Report) -> str:
    title = f"gpuwatch report {report.period.label}"
    body = [
        *_header(report, title),
        "<main>",
        _kpis(report),
        *_charts(report),
        *(_section(s) for s in sections(report, daily=False)),
        "</main>",
    ]
    return (
        "<!doctype html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        '<meta name="generator" content="gpuwatch">\n'
        f"<title>{escape(title)}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n"
        + "\n".join(body)
        + "\n</body>\n</html>\n"
    )


def _header(report: Report, title: str) -> list[str]:
    zone = fields.zone_of(report)
    start, end, generated = (
        text(Cell(Kind.TIME, fields.local(moment, zone)))
        for moment in (report.period.start, report.period.end, report.generated_at)
    )
    hosts = ", ".join(report.hosts_filter) or "all"
    models = ", ".join(report.models_filter) or "all"
    meta = (
        f"{start} to {end} ({report.period.timezone}); previous period "
        f"{report.previous_period.label}; hosts: {hosts}; models: {models}; generated {generated}; "
        f"{fields.data_note(report)}"
    )
    return [f"<header><h1>{escape(title)}</h1>", f'<p class="meta">{escape(meta)}</p></header>']


def _kpis(report: Report) -> str:
    record = fields.totals_record(report.totals)
    items = "".join(
        f'<li><span class="label">{escape(_kpi_label(report, key, label))}</span>'
        f'<span class="value">{escape(text(record[key]))}</span></li>'
        for key, label in _KPIS
    )
    return f'<ul class="kpis" aria-label="key figures">{items}</ul>'


def _kpi_label(report: Report, key: str, label: str) -> str:
    """The spend says whether it is the bill or the meter (agent.reporting.basis)."""
    return f"{label} ({spend_kind(report.totals)})" if key == "spend_usd" else label


def _charts(report: Report) -> list[str]:
    spend, per_m, util = daily_sections(report)
    names = _model_names(report)
    series = svg.series_of(names)
    gpus = _gpu_keys(report)
    return [
        "<h2>Charts</h2>",
        _figure(
            svg.spend_chart(report.daily_spend) if report.daily_spend else "",
            "Daily spend: busy GPU time and idle GPU time.",
            spend,
        ),
        _figure(
            svg.cost_chart(report.model_days, series) + _legend(series) if names else "",
            "Cost per million useful tokens, per model, per day.",
            per_m,
        ),
        _figure(
            svg.heatmap(gpus, report.gpu_days) if gpus and report.gpu_days else "",
            "GPU utilization per day (darker is busier).",
            util,
        ),
    ]


def _model_names(report: Report) -> list[str]:
    """The models of the table first, in its order, then any only in the daily series."""
    with_data = {m.model for m in report.model_days if m.cost_per_million_tokens_usd is not None}
    names = [m.model for m in report.models if m.model in with_data]
    extra = sorted(with_data - set(names))
    return names + extra


def _gpu_keys(report: Report) -> list[svg.GpuKey]:
    keys = [svg.GpuKey(g.host, g.gpu_uuid, g.gpu_index) for g in report.gpus]
    seen = set(keys)
    for g in report.gpu_days:
        key = svg.GpuKey(g.host, g.gpu_uuid, g.gpu_index)
        if key not in seen:
            keys.append(key)
            seen.add(key)
    return keys


def _figure(chart: str, caption: str, data: Section) -> str:
    drawing = chart or f'<p class="empty">{escape(data.title)}: no data in this period.</p>'
    table = _table(data) if data.rows else ""
    fallback = (
        f"<details><summary>{escape(data.title)}: the figures</summary>{table}</details>"
        if table
        else ""
    )
    return (
        f'<figure id="figure-{data.key}">{drawing}'
        f"<figcaption>{escape(caption)}</figcaption>{fallback}</figure>"
    )


def _legend(series: Sequence[svg.Series]) -> str:
    items = "".join(
        f'<li><span class="swatch" style="background:{s.color}"></span>{escape(s.name)}'
        f"{' (dashed)' if s.dashed else ''}</li>"
        for s in series
    )
    return f'<ul class="legend" aria-label="legend">{items}</ul>'


def _section(section: Section) -> str:
    parts = [f'<section id="{section.key}">', f"<h2>{escape(section.title)}</h2>"]
    if section.note:
        parts.append(f'<p class="note">{escape(section.note)}</p>')
    if not section.rows:
        parts.append(f'<p class="empty">{escape(section.empty)}</p>')
    elif section.layout is Layout.NOTES:
        parts.append(_notes(section))
    else:
        parts.append(_table(section))
    parts.append("</section>")
    return "".join(parts)


def _table(section: Section) -> str:
    head = "".join(
        f'<th scope="col"{_num(c.numeric)}>{escape(c.label)}</th>' for c in section.columns
    )
    # Figures, names and times stay on one line; a free-text last column (a summary) wraps.
    last = section.columns[-1]
    classes = [_num(c.numeric) for c in section.columns]
    if not last.numeric and last.shrink:
        classes[-1] = ' class="wrap"'
    rows = []
    for row in section.rows:
        cells = []
        for i, (css, cell) in enumerate(zip(classes, row, strict=True)):
            # The first cell names the row (a figure, a model, a host): a row header.
            tag, scope = ("th", ' scope="row"') if i == 0 else ("td", "")
            cells.append(f"<{tag}{scope}{css}>{escape(text(cell))}</{tag}>")
        rows.append(f"<tr>{''.join(cells)}</tr>")
    return (
        f'<div class="scroll"><table id="table-{section.key}">'
        f"<thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table></div>"
    )


def _num(numeric: bool) -> str:
    return ' class="num"' if numeric else ""


def _notes(section: Section) -> str:
    figure_label = section.columns[2].label
    items = []
    for row in section.rows:
        kind, title, figure, *rest = (escape(text(cell)) for cell in row)
        details = "".join(f'<span class="detail">{more}</span>' for more in rest)
        items.append(
            f"<li><strong>{title}</strong> ({kind}; {escape(figure_label)}: {figure}){details}</li>"
        )
    return f'<ol class="notes" id="list-{section.key}">{"".join(items)}</ol>'
