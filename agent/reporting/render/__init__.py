"""A :class:`agent.reporting.model.Report` in every format `gpuwatch report` offers.

Layout: :mod:`.values` rounds and spells each figure (the only place that does), :mod:`.fields`
names every figure of the report by its JSON key, :mod:`.sections` arranges them in titled
tables; one module per format lays those out (:mod:`.table`, :mod:`.json_format`,
:mod:`.csv_format`, :mod:`.markdown`, :mod:`.html_format`, with charts from :mod:`.svg`).
Every format therefore shows the same figures with the same rounding.
"""

from __future__ import annotations

from collections.abc import Callable

from agent.reporting.formats import DAILY_FORMATS, FORMATS
from agent.reporting.model import Report
from agent.reporting.render.csv_format import render_csv
from agent.reporting.render.html_format import render_html
from agent.reporting.render.json_format import render_json, to_document
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

__all__ = [
    "DAILY_FORMATS",
    "FORMATS",
    "render",
    "render_csv",
    "render_html",
    "render_json",
    "render_markdown",
    "render_table",
    "to_document",
]


def render(report: Report, fmt: str) -> str:
    """The report as text in ``fmt`` (one of FORMATS), ending with a newline."""
    try:
        renderer = RENDERERS[fmt]
    except KeyError:
        raise ValueError(
            f"unknown report format {fmt!r}: use one of {', '.join(FORMATS)}"
        ) from None
    return renderer(report)
