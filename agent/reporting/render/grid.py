"""The report's sections as data: columns, rows of cells and a layout, which every renderer
(table, markdown, CSV, HTML) draws in its own way; and the helpers that build them."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import TypeVar

from agent.reporting.render.fields import Record
from agent.reporting.render.values import Cell, Kind

T = TypeVar("T")


class Layout(Enum):
    GRID = "grid"  # a table with a header row
    PAIRS = "pairs"  # figure / value lines (the summary, the budget)
    NOTES = "notes"  # numbered paragraphs for people (recommendations); a grid in CSV


@dataclass(frozen=True, slots=True)
class Column:
    key: str
    label: str
    numeric: bool = True  # right-aligned
    shrink: bool = False  # the terminal table may cut this text column short to fit


@dataclass(frozen=True, slots=True)
class Section:
    key: str  # "# key" in CSV, the id of the HTML table
    title: str
    columns: tuple[Column, ...]
    rows: tuple[tuple[Cell, ...], ...]
    empty: str = "none in this period"
    layout: Layout = Layout.GRID
    note: str = ""  # one line under the heading
    daily: bool = False  # a daily series: in CSV and HTML only (table and markdown summarise)


def text_column(key: str, label: str, shrink: bool = True) -> Column:
    return Column(key, label, numeric=False, shrink=shrink)


def grid(
    key: str,
    title: str,
    columns: Sequence[Column],
    records: Iterable[Record],
    *,
    note: str = "",
    layout: Layout = Layout.GRID,
    empty: str = "none in this period",
    daily: bool = False,
) -> Section:
    rows = tuple(tuple(record[c.key] for c in columns) for record in records)
    return Section(key, title, tuple(columns), rows, empty, layout, note, daily)


PAIR_COLUMNS = (text_column("figure", "figure", shrink=False), Column("value", "value"))


def pairs(key: str, title: str, record: Record, labels: dict[str, str], note: str = "") -> Section:
    rows = tuple((Cell(Kind.LABEL, (k, labels[k])), record[k]) for k in labels)
    return Section(key, title, PAIR_COLUMNS, rows, layout=Layout.PAIRS, note=note)


def each(items: Iterable[T], make: Callable[[T], Record]) -> list[Record]:
    return [make(item) for item in items]
