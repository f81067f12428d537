"""``--format csv``: every section in one file, for spreadsheets and scripts.

Each section is a ``# key`` line, a header row of JSON keys, then its rows; sections are separated
by an empty line. Values are JSON's figures unformatted: money to the cent as "1234.50", counts as
integers, ratios 0-1, seconds, bytes; unknown is an empty field.
"""

from __future__ import annotations

import csv
import io

from agent.reporting.model import Report
from agent.reporting.render.sections import Section, meta_section, sections
from agent.reporting.render.values import Cell, Kind, plain

# A spreadsheet runs a cell that starts with one of these as a formula (CSV injection); strings
# from the data (model names, summaries) that do are prefixed with an apostrophe, as OWASP advises.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def render_csv(report: Report) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    for number, section in enumerate([meta_section(report), *sections(report)]):
        if number:
            writer.writerow([])
        writer.writerows(_rows(section))
    return out.getvalue()


def _rows(section: Section) -> list[list[str]]:
    return [
        [f"# {section.key}"],
        [column.key for column in section.columns],
        *([_field(cell) for cell in row] for row in section.rows),
    ]


def _field(cell: Cell) -> str:
    value = plain(cell)
    if cell.kind is Kind.TEXT and value.startswith(_FORMULA_START):
        return "'" + value
    return value
