"""Charts of a simulation over time: KV use, running and waiting requests, latency.

`FILE.html` is self-contained (inline SVG, no scripts, no extra package); `FILE.png` needs the
optional `plot` extra (matplotlib). Several configurations share each chart, one colour each.
"""

from __future__ import annotations

import html
from pathlib import Path

from kvwise.errors import UsageError
from kvwise.sim.runner import SimResult

COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b")
WIDTH, HEIGHT, MARGIN = 720, 220, 48

# (title, x series, y series, y scale)
CHARTS = (
    ("KV-cache use (%)", "time_s", "kv_usage", 100.0),
    ("running requests", "time_s", "num_running", 1.0),
    ("waiting requests", "time_s", "num_waiting", 1.0),
    ("TTFT at completion (s)", "finish_s", "ttft_ms", 0.001),
    ("end-to-end latency at completion (s)", "finish_s", "e2el_ms", 0.001),
)

Runs = list[tuple[str, SimResult]]


def write_plot(path: str, runs: Runs) -> None:
    if path.endswith(".html"):
        Path(path).write_text(html_report(runs))
    elif path.endswith(".png"):
        _write_png(path, runs)
    else:
        raise UsageError(f"--plot {path}: use a .html or .png file name")


def _polyline(xs: list[float], ys: list[float], x_max: float, y_max: float, colour: str) -> str:
    if not xs:
        return ""
    sx = (WIDTH - 2 * MARGIN) / (x_max or 1.0)
    sy = (HEIGHT - 2 * MARGIN) / (y_max or 1.0)
    points = " ".join(
        f"{MARGIN + x * sx:.1f},{HEIGHT - MARGIN - y * sy:.1f}"
        for x, y in zip(xs, ys, strict=False)
    )
    return f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{points}"/>'


def _svg_chart(title: str, x_key: str, y_key: str, scale: float, runs: Runs) -> str:
    series = [(r.series[x_key], [v * scale for v in r.series[y_key]]) for _, r in runs]
    x_max = max((max(xs) for xs, _ in series if xs), default=1.0)
    y_max = max((max(ys) for _, ys in series if ys), default=1.0) * 1.05 or 1.0
    lines = "".join(
        _polyline(xs, ys, x_max, y_max, COLOURS[i % len(COLOURS)])
        for i, (xs, ys) in enumerate(series)
    )
    axes = (
        f'<line x1="{MARGIN}" y1="{HEIGHT - MARGIN}" x2="{WIDTH - MARGIN}" y2="{HEIGHT - MARGIN}" stroke="#888"/>'
        f'<line x1="{MARGIN}" y1="{MARGIN}" x2="{MARGIN}" y2="{HEIGHT - MARGIN}" stroke="#888"/>'
        f'<text x="{MARGIN}" y="{MARGIN - 12}" font-size="13" font-weight="bold">{html.escape(title)}</text>'
        f'<text x="{MARGIN - 6}" y="{MARGIN + 4}" font-size="11" text-anchor="end">{y_max:.3g}</text>'
        f'<text x="{MARGIN - 6}" y="{HEIGHT - MARGIN}" font-size="11" text-anchor="end">0</text>'
        f'<text x="{WIDTH - MARGIN}" y="{HEIGHT - MARGIN + 16}" font-size="11" text-anchor="end">{x_max:.0f} s</text>'
    )
    return f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}">{axes}{lines}</svg>'


def html_report(runs: Runs) -> str:
    legend = " ".join(
        f'<span style="color:{COLOURS[i % len(COLOURS)]}">&#9632; {html.escape(label)}</span>'
        for i, (label, _) in enumerate(runs)
    )
    charts = "\n".join(f"<div>{_svg_chart(*chart, runs)}</div>" for chart in CHARTS)
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>kvwise simulate</title></head>"
        f"<body style='font-family:sans-serif'><h2>kvwise simulate</h2><p>{legend}</p>{charts}</body></html>\n"
    )


def _write_png(path: str, runs: Runs) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise UsageError(
            "--plot FILE.png needs matplotlib (pip install 'kvwise[plot]'), or use FILE.html"
        ) from exc
    figure, axes = plt.subplots(len(CHARTS), 1, figsize=(9, 2.4 * len(CHARTS)), sharex=False)
    for axis, (title, x_key, y_key, scale) in zip(axes, CHARTS, strict=False):
        for i, (label, result) in enumerate(runs):
            ys = [v * scale for v in result.series[y_key]]
            axis.plot(
                result.series[x_key],
                ys,
                color=COLOURS[i % len(COLOURS)],
                label=label,
                linewidth=1.2,
            )
        axis.set_title(title, fontsize=10, loc="left")
        axis.set_xlabel("time (s)", fontsize=8)
    axes[0].legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
