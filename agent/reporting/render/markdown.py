"""``--format markdown``: headings and pipe tables (GitHub-flavoured), the table's figures.

Strings from the data are backslash-escaped so that a model called ``<b>*x*</b>`` stays text
(CommonMark lets any ASCII punctuation be escaped; GitHub also renders raw HTML and ``$`` math).
The daily series are left to CSV, JSON and HTML, as in the terminal table.
"""

from __future__ import annotations

from agent.reporting.model import Report
from agent.reporting.render import fields
from agent.reporting.render.sections import Layout, Section, sections
from agent.reporting.render.values import Cell, Kind, text
from foundation.printable import printable

_SPECIAL = frozenset("\\`*_[]<>|~$&#!")


def escape(value: str) -> str:
    """Markdown-safe inline text on one line (a newline would end a table row)."""
    flat = printable(" ".join(value.split()))
    return "".join("\\" + ch if ch in _SPECIAL else ch for ch in flat)


def _cell(cell: Cell) -> str:
    # Figures (digits, "$", ",", "%", arrows) are safe as they are and stay readable in the
    # source; only strings from the data need escaping. A "|" never appears in a figure.
    value = text(cell)
    return escape(value) if cell.kind in (Kind.TEXT, Kind.LABEL) else value


def render_markdown(report: Report) -> str:
    lines = _header(report)
    for section in sections(report, daily=False):
        lines += ["", *_section(section)]
    return "\n".join(lines) + "\n"


def _header(report: Report) -> list[str]:
    zone = fields.zone_of(report)
    period = report.period
    start, end, generated = (
        text(Cell(Kind.TIME, fields.local(moment, zone)))
        for moment in (period.start, period.end, report.generated_at)
    )
    hosts = ", ".join(report.hosts_filter) or "all"
    models = ", ".join(report.models_filter) or "all"
    return [
        f"# gpuwatch report {escape(period.label)}",
        "",
        f"- period: {start} to {end} ({escape(period.timezone)})",
        f"- previous period: {escape(report.previous_period.label)}",
        f"- hosts: {escape(hosts)}; models: {escape(models)}",
        f"- generated: {generated}",
        f"- {escape(fields.data_note(report))}",
    ]


def _section(section: Section) -> list[str]:
    lines = [f"## {section.title}", ""]
    if section.note:
        lines += [f"_{escape(section.note)}_", ""]
    if not section.rows:
        return [*lines, section.empty[:1].upper() + section.empty[1:] + "."]
    if section.layout is Layout.NOTES:
        return lines + _notes(section)
    return lines + _table(section)


def _table(section: Section) -> list[str]:
    header = "| " + " | ".join(c.label for c in section.columns) + " |"  # ours: no escaping
    align = "|" + "|".join("---:" if c.numeric else ":---" for c in section.columns) + "|"
    rows = ["| " + " | ".join(_cell(cell) for cell in row) + " |" for row in section.rows]
    return [header, align, *rows]


def _notes(section: Section) -> list[str]:
    figure_label = section.columns[2].label
    lines: list[str] = []
    for number, row in enumerate(section.rows, 1):
        kind, title, figure, *rest = (_cell(cell) for cell in row)
        lines.append(f"{number}. **{title}** ({kind}; {figure_label}: {figure})")
        for more in rest:  # a second paragraph of the same item, not run into the title
            lines += ["", f"   {more}"]
        lines.append("")
    return lines[:-1]
