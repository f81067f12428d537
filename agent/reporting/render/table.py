"""``--format table``: the report for a terminal, no line longer than 100 characters.

Numbers are never cut: when a grid is too wide, its free-text columns (model, host, summary)
are shortened with "…"; if even that is not enough, every row is printed as "label: value"
lines. GPU UUIDs are shown alike in every section: their first group ("GPU-5ec84d8d…"), and
their last characters where two GPUs of the report share it. The full strings are in every
other format.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from agent.reporting.model import Report
from agent.reporting.render import fields
from agent.reporting.render.sections import Column, Layout, Section, sections
from agent.reporting.render.values import Cell, Kind, text
from foundation.printable import printable

WIDTH = 100
INDENT = "  "
GAP = "  "
MIN_SHRUNK = 8  # a shortened text column keeps at least this many characters
UUID_SHOWN = len("GPU-5ec84d8d")  # "GPU-" or "MIG-" and the UUID's first group
UUID = "gpu_uuid"


def render_table(report: Report) -> str:
    lines = _header(report)
    uuids = short_uuids(g.gpu_uuid for g in (*report.gpus, *report.top_waste))
    for section in sections(report, daily=False):
        lines += ["", *_section(_with_short_uuids(section, uuids))]
    return "\n".join(line.rstrip() for line in lines) + "\n"


def short_uuids(uuids: Iterable[str]) -> dict[str, str]:
    """Each UUID as the table shows it, in every section alike: its first group; where two of
    the report share that (made-up UUIDs, never NVIDIA's random ones in practice), its last
    characters too, as many as tell them all apart: "GPU-00000000…0003"."""
    whole = sorted(set(uuids))
    longest = max((len(u) for u in whole), default=0)
    for tail in (0, *range(4, longest + 1)):
        shown = {u: _short(u, tail) for u in whole}
        if len(set(shown.values())) == len(whole):
            return shown
    return {u: u for u in whole}


def _short(uuid: str, tail: int) -> str:
    if len(uuid) <= UUID_SHOWN + 1 + tail:
        return uuid
    return uuid[:UUID_SHOWN] + "…" + (uuid[-tail:] if tail else "")


def _with_short_uuids(section: Section, uuids: Mapping[str, str]) -> Section:
    """The section with its UUID column as :func:`short_uuids` says, never cut further."""
    at = next((i for i, c in enumerate(section.columns) if c.key == UUID), None)
    if at is None:
        return section
    columns = list(section.columns)
    columns[at] = replace(columns[at], shrink=False)
    rows = tuple(
        tuple(
            replace(cell, value=uuids.get(str(cell.value), str(cell.value))) if i == at else cell
            for i, cell in enumerate(row)
        )
        for row in section.rows
    )
    return replace(section, columns=tuple(columns), rows=rows)


def _header(report: Report) -> list[str]:
    zone = fields.zone_of(report)
    period = report.period
    start, end, generated = (
        text(Cell(Kind.TIME, fields.local(moment, zone)))
        for moment in (period.start, period.end, report.generated_at)
    )
    hosts = _printable(", ".join(report.hosts_filter) or "all")
    models = _printable(", ".join(report.models_filter) or "all")
    return [
        *_wrap(f"gpuwatch report {period.label}: {start} to {end} ({period.timezone})", ""),
        *_wrap(
            f"generated {generated}; previous period {report.previous_period.label}; "
            f"hosts: {hosts}; models: {models}",
            "",
        ),
        *_wrap(fields.data_note(report), ""),
    ]


def _wrap(line: str, indent: str) -> list[str]:
    wrapped = textwrap.wrap(line, WIDTH, initial_indent=indent, subsequent_indent=indent + "  ")
    return wrapped or [indent]


def _section(section: Section) -> list[str]:
    heading = section.title.upper()
    lines = _wrap(f"{heading}  ({section.note})" if section.note else heading, "")
    if not section.rows:
        return [*lines, INDENT + section.empty]
    if section.layout is Layout.PAIRS:
        return lines + _pairs(section)
    if section.layout is Layout.NOTES:
        return lines + _notes(section)
    return lines + _grid(section)


def _pairs(section: Section) -> list[str]:
    rows = [(_show(label), _show(value)) for label, value in section.rows]
    left = max(len(label) for label, _ in rows)
    right = max(len(value) for _, value in rows)
    if len(INDENT) + left + len(GAP) + right > WIDTH:
        return [line for label, value in rows for line in _wrap(f"{label}: {value}", INDENT)]
    return [f"{INDENT}{label:<{left}}{GAP}{value:>{right}}" for label, value in rows]


def _notes(section: Section) -> list[str]:
    """Numbered paragraphs: "[first] second  (third: value)", then the rest wrapped."""
    third = section.columns[2]
    lines: list[str] = []
    for number, row in enumerate(section.rows, 1):
        kind, title, figure, *more = (_show(cell) for cell in row)
        lead = f"{number}. [{kind}] {title}  ({third.label}: {figure})"
        lines += _wrap(lead, INDENT)
        for cell in more:
            lines += textwrap.wrap(
                cell, WIDTH, initial_indent=INDENT + "   ", subsequent_indent=INDENT + "   "
            )
    return lines


def _grid(section: Section) -> list[str]:
    cells = [[_show(cell) for cell in row] for row in section.rows]
    columns = section.columns
    # A free-text last column (an incident's summary) goes under its row, wrapped and named:
    # cutting it to what the other columns leave of 100 would lose most of its words. Empty,
    # it takes no line, so rows without one stay together.
    below = not columns[-1].numeric and columns[-1].shrink
    shown = columns[:-1] if below else columns
    widths = _fit(shown, [row[: len(shown)] for row in cells])
    if widths is None:
        return _records(section, cells)
    lines = [_line(shown, [c.label for c in shown], widths)]
    for row in cells:
        lines.append(_line(shown, row[: len(shown)], widths))
        if below and row[-1]:
            lines += _wrap(f"{columns[-1].label}: {row[-1]}", INDENT + "    ")
    return lines


def _show(cell: Cell) -> str:
    return _printable(text(cell))


def _printable(value: str) -> str:
    """Control characters from the data (an escape sequence in a model name) would drive the
    terminal; they are shown as their escapes instead, newlines and tabs included (a cell is
    one line)."""
    return printable(value)


def _fit(columns: Sequence[Column], cells: list[list[str]]) -> list[int] | None:
    """Column widths that fit WIDTH, shortening the widest shrinkable column first;
    None when the numbers alone are too wide."""
    widths = [max([len(c.label), *(len(row[i]) for row in cells)]) for i, c in enumerate(columns)]
    floor = [
        max(len(c.label), MIN_SHRUNK) if c.shrink else w
        for c, w in zip(columns, widths, strict=True)
    ]

    def total() -> int:
        return len(INDENT) + sum(widths) + len(GAP) * (len(widths) - 1)

    while total() > WIDTH:
        room = [i for i, w in enumerate(widths) if w > floor[i]]
        if not room:
            return None
        widest = max(room, key=lambda i: widths[i])
        widths[widest] -= 1
    return widths


def _cut(value: str, width: int) -> str:
    return value if len(value) <= width else value[: width - 1] + "…"


def _line(columns: Sequence[Column], values: Sequence[str], widths: Sequence[int]) -> str:
    parts = [
        f"{_cut(v, w):>{w}}" if c.numeric else f"{_cut(v, w):<{w}}"
        for c, v, w in zip(columns, values, widths, strict=True)
    ]
    return INDENT + GAP.join(parts)


def _records(section: Section, cells: list[list[str]]) -> list[str]:
    """The fallback for a grid that cannot fit: one "label: value" line per figure."""
    lines: list[str] = []
    for row in cells:
        for column, value in zip(section.columns, row, strict=True):
            lines += _wrap(f"{column.label}: {value}", INDENT)
        lines.append("")
    return lines[:-1]
