"""A report in the format asked for by name: the one table of renderers."""

from __future__ import annotations

from collections.abc import Callable

from agent.reporting.formats import FORMATS
from agent.reporting.model import Report
from agent.reporting.render.csv_format import render_csv
from agent.reporting.render.html_format import render_html
from agent.reporting.render.json_format import render_json
from agent.reporting.render.markdown import render_markdown
from agent.reporting.render.table import render_table

RENDERERS: dict[str, Callable[[Report], str]] = {
    "table": render_table,
    "json": render_json,
    "csv": render_csv,
    "markdown": render_markdown,
    "html": render_html,
}
assert tuple(RENDERERS) == FORMATS, "agent/reporting/formats.py names every renderer"


def render(report: Report, fmt: str) -> str:
    """The report as text in ``fmt`` (one of FORMATS), ending with a newline."""
    try:
        renderer = RENDERERS[fmt]
    except KeyError:
        raise ValueError(
            f"unknown report format {fmt!r}: use one of {', '.join(FORMATS)}"
        ) from None
    return renderer(report)
