"""The CLI's plain-text tables (`gpuwatch alerts`, `silence list`, `cost`): every column as wide
as its widest cell, header included, two spaces apart, so that rows stay in line whatever the
names; nothing is cut. Cells are made printable before they are measured: an escaped control
character takes the room it is shown in.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Collection, Sequence

from foundation.printable import printable

GAP = "  "


def width(text: str) -> int:
    """Terminal columns: East Asian wide and full-width characters take two, combining marks
    none (a CJK model name would otherwise push its row's later columns out of line)."""
    total = 0
    for ch in text:
        if unicodedata.combining(ch):
            continue
        total += 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1
    return total


def aligned(rows: Sequence[Sequence[str]], right: Collection[int] = ()) -> list[str]:
    """``rows`` (the header first) as lines: the columns whose index is in ``right`` (figures)
    right-aligned, the others left-aligned; no trailing spaces."""
    shown = [[printable(cell) for cell in row] for row in rows]
    columns = max((len(row) for row in shown), default=0)
    widths = [max((width(row[i]) for row in shown if i < len(row)), default=0)
              for i in range(columns)]  # fmt: skip
    lines = []
    for row in shown:
        cells = []
        for i, cell in enumerate(row):
            pad = " " * (widths[i] - width(cell))
            cells.append(pad + cell if i in right else cell + pad)
        lines.append(GAP.join(cells).rstrip())
    return lines
