"""Every report format parsed back: terminal grids, CSV sections, markdown tables and HTML
pages, and from each the headline figures, to compare with the JSON document's
(``PARSERS``; also used by tests/agent/test_report.py)."""

from __future__ import annotations

import csv
import io
import re
from decimal import Decimal
from html.parser import HTMLParser
from typing import Any

from agent.reporting.render.sections import SUMMARY_LABELS

# How the JSON and CSV spell money and a cost per million tokens.
MONEY = re.compile(r"^-?\d+\.\d{2}$")
PER_M = re.compile(r"^-?\d+\.\d{4}$")


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
