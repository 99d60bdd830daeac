"""Small inline-SVG line charts for the HTML reports of `simulate --plot` and `bench`: no network,
no JavaScript, no plotting library (the base install draws them)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape

WIDTH, HEIGHT = 700, 300
LEFT, RIGHT, TOP, BOTTOM = 64, 190, 34, 44  # margins: axis labels left and below, legend right
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#17becf", "#7f7f7f")


@dataclass(frozen=True)
class Series:
    name: str
    xs: tuple[float, ...]
    ys: tuple[float, ...]
    dashed: bool = False
    color_index: int = 0


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """Round tick values covering [low, high] (1, 2 or 5 times a power of ten apart)."""
    if high <= low:
        high = low + 1.0
    raw = (high - low) / count
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.floor(low / step) * step
    return [first + i * step for i in range(math.ceil((high - first) / step) + 1)]


def _label(value: float) -> str:
    return f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"


class _Frame:
    """Maps data coordinates onto the plot area."""

    def __init__(self, x_ticks: list[float], y_ticks: list[float]) -> None:
        self.x0, self.x1 = x_ticks[0], x_ticks[-1]
        self.y0, self.y1 = y_ticks[0], y_ticks[-1]
        self.x_ticks, self.y_ticks = x_ticks, y_ticks

    def x(self, value: float) -> float:
        return LEFT + (value - self.x0) / (self.x1 - self.x0) * (WIDTH - LEFT - RIGHT)

    def y(self, value: float) -> float:
        return HEIGHT - BOTTOM - (value - self.y0) / (self.y1 - self.y0) * (HEIGHT - TOP - BOTTOM)


def _axes(frame: _Frame, title: str, x_label: str, y_label: str) -> list[str]:
    parts = [f'<text x="{LEFT}" y="20" font-weight="bold">{escape(title)}</text>']
    for tick in frame.y_ticks:
        y = frame.y(tick)
        parts.append(
            f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y:.1f}" y2="{y:.1f}" stroke="#ddd"/>'
        )
        parts.append(
            f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{_label(tick)}</text>'
        )
    for tick in frame.x_ticks:
        x = frame.x(tick)
        parts.append(
            f'<text x="{x:.1f}" y="{HEIGHT - BOTTOM + 16}" text-anchor="middle">{_label(tick)}</text>'
        )
    parts.append(
        f'<text x="{(LEFT + WIDTH - RIGHT) / 2}" y="{HEIGHT - 8}" text-anchor="middle">'
        f"{escape(x_label)}</text>"
    )
    parts.append(
        f'<text x="14" y="{(TOP + HEIGHT - BOTTOM) / 2}" text-anchor="middle" '
        f'transform="rotate(-90 14 {(TOP + HEIGHT - BOTTOM) / 2})">{escape(y_label)}</text>'
    )
    return parts


def _series(frame: _Frame, series: Series, row: int) -> list[str]:
    color = PALETTE[series.color_index % len(PALETTE)]
    dash = ' stroke-dasharray="6 4"' if series.dashed else ""
    points = " ".join(
        f"{frame.x(x):.1f},{frame.y(y):.1f}" for x, y in zip(series.xs, series.ys, strict=True)
    )
    parts = [f'<polyline fill="none" stroke="{color}" stroke-width="2"{dash} points="{points}"/>']
    if len(series.xs) < 30:  # mark the measured points of short series
        parts += [
            f'<circle cx="{frame.x(x):.1f}" cy="{frame.y(y):.1f}" r="3" fill="{color}"/>'
            for x, y in zip(series.xs, series.ys, strict=True)
        ]
    legend_y = TOP + 16 * row
    parts.append(
        f'<line x1="{WIDTH - RIGHT + 10}" x2="{WIDTH - RIGHT + 30}" y1="{legend_y}" '
        f'y2="{legend_y}" stroke="{color}" stroke-width="2"{dash}/>'
    )
    parts.append(f'<text x="{WIDTH - RIGHT + 35}" y="{legend_y + 4}">{escape(series.name)}</text>')
    return parts


def line_chart(title: str, x_label: str, y_label: str, series: list[Series]) -> str:
    """Lines through (x, y) points, y from zero."""
    xs = [x for s in series for x in s.xs] or [0.0, 1.0]
    ys = [y for s in series for y in s.ys] or [1.0]
    frame = _Frame(nice_ticks(min(xs), max(xs)), nice_ticks(0.0, max(ys)))
    parts = _axes(frame, title, x_label, y_label)
    for row, one in enumerate(series):
        parts += _series(frame, one, row)
    body = "\n".join(parts)
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'font-family="sans-serif" font-size="11" role="img" aria-label="{escape(title)}">\n'
        f"{body}\n</svg>"
    )


def cdf_series(name: str, values: list[float], color_index: int) -> Series:
    """The empirical distribution function of the values, as a step line."""
    ordered = sorted(values)
    n = len(ordered)
    xs: list[float] = []
    ys: list[float] = []
    for i, value in enumerate(ordered):
        xs += [value, value]
        ys += [i / n, (i + 1) / n]
    return Series(name, tuple(xs), tuple(ys), color_index=color_index)
