"""Inline SVG charts for the HTML report, drawn here from the daily series: no script, no
library, no request. Each chart has a <title> and <desc> (read by screen readers) and every mark a
<title> with its figure as the tables spell it; the HTML puts the data table under each chart.

Colours are attributes, not CSS, so a chart copied out of the page keeps them; the series palette
is Okabe-Ito (distinguishable with the common colour-vision deficiencies), dashed after 7 series.

The two charts with a dollar axis share one scale rule (:func:`robust_top`): the axis tops at the
highest day that is not an outlier of its own series, so one paused day ($680/M beside $5-8/M)
cannot flatten every other day to nothing. A day above the axis is still drawn, cut at the top
with an axis-break sign and its figure written above it (:func:`_off_scale`); the chart's
description counts them. The heatmap's scale is fixed (0-100 %) and needs no such rule.
"""

from __future__ import annotations

import html
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date
from decimal import Decimal

from agent.reporting.model import DailySpend, GpuDay, ModelDay
from agent.reporting.render.values import Cell, Kind, text
from foundation.printable import printable

WIDTH = 960
HEAD = 28.0  # above the plot: the unit and the swatches
OUTLIER_RATIO = 4  # a day above 4 times its series' 75th percentile may be cut off the axis
_BAND_ROW = 14.0  # a row of figures of the days cut at the top, between the head and the plot
_BAND_ROWS = 4  # at most; a figure with no room left keeps its break sign and <title>
_CHAR = 7.0  # an 11 px figure's character, wide enough for the widest digit
BUSY, IDLE = "#0072B2", "#D55E00"
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#D55E00", "#56B4E9", "#000000")
NO_DATA = "#d9d9d9"
_LOW, _HIGH = (239, 243, 255), (8, 48, 107)  # the heatmap's 0 % and 100 %


def escape(value: str) -> str:
    """Text for HTML and SVG: markup escaped, and control characters (NUL, bidi overrides
    from a scraped model name) shown as escapes; the report's HTML shares it."""
    return html.escape(printable(value, keep="\n\t"))


@dataclass(frozen=True, slots=True)
class Series:
    """One line of the cost chart, for the legend."""

    name: str
    color: str
    dashed: bool


@dataclass(frozen=True, slots=True)
class _Plot:
    left: float
    top: float
    width: float
    height: float

    @property
    def bottom(self) -> float:
        return self.top + self.height

    def y(self, value: float, top_value: float) -> float:
        return self.bottom - self.height * max(0.0, min(value, top_value)) / top_value


def _f(number: float) -> str:
    """A coordinate: one decimal is finer than a pixel and keeps the page small."""
    return f"{number:.1f}"


def _open(chart_id: str, height: float, title: str, desc: str) -> str:
    return (
        f'<svg class="chart" id="{chart_id}" viewBox="0 0 {WIDTH} {_f(height)}" '
        f'width="{WIDTH}" height="{_f(height)}" role="img" '
        f'aria-labelledby="{chart_id}-title {chart_id}-desc">'
        f'<title id="{chart_id}-title">{escape(title)}</title>'
        f'<desc id="{chart_id}-desc">{escape(desc)}</desc>'
    )


def scale(top: float, ticks: int = 4) -> tuple[float, float]:
    """A round axis maximum >= top and its tick step (1, 2, 2.5 or 5 times a power of ten)."""
    if not math.isfinite(top) or top <= 0:
        return 1.0, 1.0 / ticks
    raw = top / ticks
    magnitude = 10 ** math.floor(math.log10(raw))
    for multiple in (1.0, 2.0, 2.5, 5.0, 10.0):
        step = multiple * magnitude
        if step * ticks >= top * (1 - 1e-9):
            return step * ticks, step
    return 10 * magnitude * ticks, 10 * magnitude  # not reached: 10 x magnitude always fits


def robust_top(series: Iterable[Iterable[float]]) -> float:
    """The highest value, over every series, that is not an outlier of its own series (the
    axis' top before :func:`scale` rounds it up).

    An outlier is more than OUTLIER_RATIO times its series' 75th percentile (nearest rank,
    over the values above zero): a quarter of the days may be high before they set the scale,
    and a series that is high every day (a large model beside small ones) is its own reference,
    never cut. With fewer than four days, no day is an outlier."""
    top = 0.0
    for values in series:
        positive = sorted(v for v in values if math.isfinite(v) and v > 0)
        if not positive:
            continue
        limit = OUTLIER_RATIO * positive[math.ceil(0.75 * len(positive)) - 1]
        top = max(top, max(v for v in positive if v <= limit))
    return top


@dataclass(frozen=True, slots=True)
class _Off:
    """A mark above the axis' top: where it is, how wide, its figure as the tables spell it,
    and what it is (for its <title>)."""

    x: float
    half: float
    figure: str
    about: str


def _band_rows(offs: Sequence[_Off]) -> list[int | None]:
    """Each figure's row in the band above the plot: the first row where it does not overlap
    the figure before it (adjacent days cut alike would otherwise write over each other); None
    past _BAND_ROWS rows (a long range's many cut days: the table below has every figure)."""
    ends: list[float] = []
    rows: list[int | None] = []
    for off in offs:
        half = len(off.figure) * _CHAR / 2
        row = next((i for i, end in enumerate(ends) if off.x - half > end + 4), len(ends))
        if row == len(ends) < _BAND_ROWS:
            ends.append(0.0)
        if row < len(ends):
            ends[row] = off.x + half
        rows.append(row if row < len(ends) else None)
    return rows


def _band(rows: Sequence[int | None]) -> float:
    """The height the figures of the marks cut at the top need above the plot (``rows``:
    :func:`_band_rows`)."""
    used = [row for row in rows if row is not None]
    return _BAND_ROW * (max(used, default=-1) + 1)


def _off_scale(
    offs: Sequence[_Off], rows: Sequence[int | None], plot: _Plot, top: float
) -> list[str]:
    """Each mark above the axis: an axis-break sign across it just under the plot's top edge
    (a white gap with slanted edges) and its figure in the band above, on its own x."""
    parts = []
    for off, row in zip(offs, rows, strict=True):
        x, h, y = off.x, max(off.half, 5.0), plot.top + 6
        gap = (
            f"M{_f(x - h)} {_f(y + 3)} L{_f(x + h)} {_f(y - 3)} "
            f"L{_f(x + h)} {_f(y + 1)} L{_f(x - h)} {_f(y + 7)} Z"
        )
        label = f"{off.about}: {off.figure}, above the axis' top ({_axis_usd(top)}): cut there"
        figure = (
            ""
            if row is None
            else f'<text class="clipped-value" x="{_f(x)}" '
            f'y="{_f(plot.top - 4 - _BAND_ROW * row)}" text-anchor="middle" '
            f'font-weight="bold">{escape(off.figure)}</text>'
        )
        parts.append(
            f'<g class="clipped"><title>{escape(label)}</title>'
            f'<path class="break" d="{gap}" fill="#fff" stroke="#333" stroke-width="1"/>'
            f"{figure}</g>"
        )
    return parts


def _off_note(count: int, what: str, top: float) -> str:
    """For the chart's description: how many marks are cut, and how they are drawn."""
    if not count:
        return ""
    return (
        f" {count} {what} above {_axis_usd(top)} would flatten the others: cut at the top with "
        "a break sign, their figure written above them."
    )


def _axis_usd(value: float) -> str:
    spelled = f"{value:,.4f}".rstrip("0").rstrip(".")
    return f"${spelled}"


def _y_axis(plot: _Plot, top: float, step: float, unit: str) -> list[str]:
    parts = []
    ticks = round(top / step)
    for i in range(ticks + 1):
        value = step * i
        y = _f(plot.y(value, top))
        parts.append(
            f'<line class="grid" x1="{_f(plot.left)}" x2="{_f(plot.left + plot.width)}" '
            f'y1="{y}" y2="{y}" stroke="#ddd" stroke-width="1"/>'
            f'<text x="{_f(plot.left - 6)}" y="{y}" text-anchor="end" '
            f'dominant-baseline="middle">{escape(_axis_usd(value))}</text>'
        )
    parts.append(f'<text x="{_f(plot.left)}" y="{_f(HEAD - 8)}">{escape(unit)}</text>')
    return parts


def _x_labels(plot: _Plot, days: Sequence[date], x_of: dict[date, float]) -> list[str]:
    every = max(1, math.ceil(len(days) / 10))
    y = _f(plot.bottom + 16)
    return [
        f'<text x="{_f(x_of[day])}" y="{y}" text-anchor="middle">{day:%m-%d}</text>'
        for day in days[::every]
    ]


def _usd(value: Decimal | None) -> str:
    return text(Cell(Kind.USD, value))


def spend_chart(days: Sequence[DailySpend]) -> str:
    """Daily spend as stacked bars: busy time below, idle time above; a day far above the
    others is cut at the axis' top (:func:`robust_top`)."""
    left, width = 80.0, WIDTH - 80 - 16
    totals = [max(Decimal(0), d.busy_usd) + max(Decimal(0), d.idle_usd) for d in days]
    top, step = scale(robust_top([[float(t) for t in totals]]))
    slot = width / max(1, len(days))
    bar = slot * 0.72
    x_of = {d.day: left + (i + 0.5) * slot for i, d in enumerate(days)}
    offs = [
        _Off(x_of[d.day], bar / 2, _usd(total), f"{d.day} total")
        for d, total in zip(days, totals, strict=True)
        if float(total) > top
    ]
    rows = _band_rows(offs)
    plot = _Plot(left=left, top=HEAD + _band(rows), width=width, height=240)
    parts = [
        _open(
            "chart-spend",
            plot.bottom + 32,
            "Daily spend, busy and idle",
            f"Stacked bars, one per day over {len(days)} days: the cost of busy GPU time below, "
            "the cost of idle GPU time above. The table below has the figures."
            + _off_note(len(offs), "day(s)", top),
        ),
        *_y_axis(plot, top, step, "USD per day"),
    ]
    for d in days:
        busy, idle = float(max(Decimal(0), d.busy_usd)), float(max(Decimal(0), d.idle_usd))
        x = _f(x_of[d.day] - bar / 2)
        y_busy, y_idle = plot.y(busy, top), plot.y(busy + idle, top)
        label = f"{d.day}: busy {_usd(d.busy_usd)}, idle {_usd(d.idle_usd)}"
        parts.append(
            f"<g><title>{escape(label)}</title>"
            f'<rect class="busy" x="{x}" y="{_f(y_busy)}" width="{_f(bar)}" '
            f'height="{_f(plot.bottom - y_busy)}" fill="{BUSY}"/>'
            f'<rect class="idle" x="{x}" y="{_f(y_idle)}" width="{_f(bar)}" '
            f'height="{_f(y_busy - y_idle)}" fill="{IDLE}"/></g>'
        )
    parts += _off_scale(offs, rows, plot, top)
    parts += _x_labels(plot, [d.day for d in days], x_of)
    parts += _swatches(plot, [("busy", BUSY), ("idle", IDLE)])
    return "".join(parts) + "</svg>"


def _swatches(plot: _Plot, entries: Sequence[tuple[str, str]]) -> list[str]:
    parts, x = [], plot.left + plot.width - 80 * len(entries)
    for name, color in entries:
        y = _f(HEAD - 18)
        parts.append(
            f'<rect x="{_f(x)}" y="{y}" width="12" height="12" fill="{color}"/>'
            f'<text x="{_f(x + 16)}" y="{_f(HEAD - 8)}">{escape(name)}</text>'
        )
        x += 80
    return parts


def series_of(names: Sequence[str]) -> list[Series]:
    return [
        Series(name, PALETTE[i % len(PALETTE)], dashed=i >= len(PALETTE))
        for i, name in enumerate(names)
    ]


def cost_chart(model_days: Sequence[ModelDay], series: Sequence[Series]) -> str:
    """Cost per million tokens, one line per model; a day without tokens breaks the line, and
    a day far above its model's others is cut at the axis' top (:func:`robust_top`)."""
    left, width = 80.0, WIDTH - 80 - 24
    days = sorted({m.day for m in model_days})
    values = {
        (m.model, m.day): m.cost_per_million_tokens_usd
        for m in model_days
        if m.cost_per_million_tokens_usd is not None
    }
    per_series: dict[str, list[float]] = defaultdict(list)
    for (name, _), value in values.items():
        per_series[name].append(float(value))
    top, step = scale(robust_top(per_series.values()))
    slot = width / max(1, len(days))
    x_of = {day: left + (i + 0.5) * slot for i, day in enumerate(days)}
    offs = sorted(
        (
            _Off(x_of[day], 4.0, text(Cell(Kind.USD_PER_M, value)), f"{name}, {day}")
            for (name, day), value in values.items()
            if float(value) > top
        ),
        key=lambda off: off.x,
    )
    rows = _band_rows(offs)
    plot = _Plot(left=left, top=HEAD + _band(rows), width=width, height=240)
    parts = [
        _open(
            "chart-cost",
            plot.bottom + 32,
            "Cost per million useful tokens, per model, per day",
            f"One line per model ({len(series)}) over {len(days)} days; a gap is a day without "
            "tokens. The legend names the lines; the table below has the figures."
            + _off_note(len(offs), "model-day(s)", top),
        ),
        *_y_axis(plot, top, step, "USD per million useful tokens"),
    ]
    for s in series:
        points = [(day, values.get((s.name, day))) for day in days]
        parts.append(_line(s, points, plot, top, x_of))
    parts += _off_scale(offs, rows, plot, top)
    parts += _x_labels(plot, days, x_of)
    return "".join(parts) + "</svg>"


def _line(
    s: Series,
    points: Sequence[tuple[date, Decimal | None]],
    plot: _Plot,
    top: float,
    x_of: dict[date, float],
) -> str:
    path: list[str] = []
    marks: list[str] = []
    pen_down = False
    for day, value in points:
        if value is None:
            pen_down = False
            continue
        x, y = _f(x_of[day]), _f(plot.y(float(value), top))
        path.append(f"{'L' if pen_down else 'M'}{x} {y}")
        pen_down = True
        label = f"{s.name}, {day}: {text(Cell(Kind.USD_PER_M, value))}"
        marks.append(f'<circle cx="{x}" cy="{y}" r="3" fill="{s.color}">')
        marks.append(f"<title>{escape(label)}</title></circle>")
    dash = ' stroke-dasharray="6 4"' if s.dashed else ""
    return (
        f'<g><title>{escape(s.name)}</title><path class="line" d="{" ".join(path)}" '
        f'fill="none" stroke="{s.color}" stroke-width="2"{dash}/>{"".join(marks)}</g>'
    )


@dataclass(frozen=True, slots=True)
class GpuKey:
    host: str
    gpu_uuid: str
    gpu_index: str


def _heat(ratio: float) -> str:
    t = max(0.0, min(1.0, ratio))
    r, g, b = (round(lo + (hi - lo) * t) for lo, hi in zip(_LOW, _HIGH, strict=True))
    return f"#{r:02x}{g:02x}{b:02x}"


def heatmap(gpus: Sequence[GpuKey], gpu_days: Sequence[GpuDay]) -> str:
    """Utilization per GPU (rows) and day (columns); grey where nothing was observed."""
    days = sorted({g.day for g in gpu_days})
    ratios = {
        (GpuKey(g.host, g.gpu_uuid, g.gpu_index), g.day): g.utilization_ratio for g in gpu_days
    }
    label_width, row = 170.0, 22.0
    plot = _Plot(left=label_width, top=28, width=WIDTH - label_width - 16, height=row * len(gpus))
    cell = plot.width / max(1, len(days))
    x_of = {day: plot.left + (i + 0.5) * cell for i, day in enumerate(days)}
    parts = [
        _open(
            "chart-heatmap",
            plot.bottom + 56,
            "GPU utilization per day",
            f"A grid of {len(gpus)} GPUs by {len(days)} days; darker is busier, grey is no data. "
            "The table below has the figures.",
        )
    ]
    # A month of a large fleet is tens of thousands of cells: what is the same along a row or
    # a column is formatted once.
    width, height = _f(max(cell - 1, 0.5)), _f(row - 2)
    columns = [(day, f'<rect class="cell" x="{_f(x_of[day] - cell / 2)}" y="') for day in days]
    for i, gpu in enumerate(gpus):
        y = plot.top + i * row
        name = f"{gpu.host} #{gpu.gpu_index}"
        short = name if len(name) <= 24 else name[:23] + "…"
        parts.append(
            f'<text x="{_f(label_width - 8)}" y="{_f(y + row / 2)}" text-anchor="end" '
            f'dominant-baseline="middle"><title>{escape(f"{name} {gpu.gpu_uuid}")}</title>'
            f"{escape(short)}</text>"
        )
        rest = f'{_f(y)}" width="{width}" height="{height}" fill="'
        about = escape(f"{name} ({gpu.gpu_uuid}), ")
        for day, opening in columns:
            ratio = ratios.get((gpu, day))
            fill = NO_DATA if ratio is None or not math.isfinite(ratio) else _heat(ratio)
            figure = escape(f"{day}: {text(Cell(Kind.RATIO, ratio, 'no data'))}")
            parts.append(f'{opening}{rest}{fill}"><title>{about}{figure}</title></rect>')
    parts += [
        f'<text x="{_f(x_of[day])}" y="{_f(plot.top - 8)}" text-anchor="middle">{day:%m-%d}</text>'
        for day in days[:: max(1, math.ceil(len(days) / 10))]
    ]
    parts += _heat_legend(plot)
    return "".join(parts) + "</svg>"


def _heat_legend(plot: _Plot) -> list[str]:
    y = plot.bottom + 16
    parts = [f'<text x="{_f(plot.left)}" y="{_f(y + 11)}">utilization</text>']
    x = plot.left + 80
    for step in range(5):
        ratio = step / 4
        parts.append(
            f'<rect x="{_f(x)}" y="{_f(y)}" width="28" height="14" fill="{_heat(ratio)}"/>'
            f'<text x="{_f(x + 32)}" y="{_f(y + 11)}">{step * 25}%</text>'
        )
        x += 80
    parts.append(
        f'<rect x="{_f(x)}" y="{_f(y)}" width="28" height="14" fill="{NO_DATA}"/>'
        f'<text x="{_f(x + 32)}" y="{_f(y + 11)}">no data</text>'
    )
    return parts
