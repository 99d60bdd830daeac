"""Charts of a simulation over time: KV use, running and waiting requests, latency.

`FILE.html` is self-contained: inline SVG (`kvwise.core.charts`), no scripts, no extra
package. Several configurations share each chart, one colour each.
"""

from __future__ import annotations

import html
from pathlib import Path

from kvwise.core.charts import Series, line_chart
from kvwise.errors import UsageError
from kvwise.sim.runner import SimResult

# (title, x series, x label, y series, y scale)
CHARTS = (
    ("KV-cache use (%)", "time_s", "time (s)", "kv_usage", 100.0),
    ("running requests", "time_s", "time (s)", "num_running", 1.0),
    ("waiting requests", "time_s", "time (s)", "num_waiting", 1.0),
    ("TTFT at completion (s)", "finish_s", "completion time (s)", "ttft_ms", 0.001),
    ("end-to-end latency at completion (s)", "finish_s", "completion time (s)", "e2el_ms", 0.001),
)

Runs = list[tuple[str, SimResult]]


def write_plot(path: str, runs: Runs) -> None:
    if not path.endswith(".html"):
        raise UsageError(f"--plot {path}: use a .html file name (self-contained SVG charts)")
    Path(path).write_text(html_report(runs))


def _chart(title: str, x_key: str, x_label: str, y_key: str, scale: float, runs: Runs) -> str:
    series = [
        Series(
            label,
            tuple(result.series[x_key]),
            tuple(v * scale for v in result.series[y_key]),
            color_index=i,
        )
        for i, (label, result) in enumerate(runs)
    ]
    return line_chart(title, x_label, title, series)


def html_report(runs: Runs) -> str:
    charts = "\n".join(f"<div>{_chart(*chart, runs)}</div>" for chart in CHARTS)
    title = html.escape("kvwise simulate: " + ", ".join(label for label, _ in runs))
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title></head>"
        f"<body style='font-family:sans-serif'><h2>{title}</h2>{charts}</body></html>\n"
    )
