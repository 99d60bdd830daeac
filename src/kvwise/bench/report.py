"""Bench results for people: a terminal table (rich) and a self-contained HTML report.

The HTML works offline: inline CSS and inline SVG charts (latency and throughput against
concurrency, measured solid and predicted dashed; the TTFT distribution of each run).
"""

from __future__ import annotations

from html import escape
from typing import Any

from rich.console import Console
from rich.table import Table

from kvwise.bench.predict import relative_errors
from kvwise.bench.results import BenchResults, RunResult
from kvwise.bench.summary import COMPARED_KEYS
from kvwise.core.charts import Series, cdf_series, line_chart

BURST_NOTE = (
    "{} answers arrived in one burst (the server's API process or this client was starved of "
    "CPU): their TTFT and ITL are not token timings; E2E and throughput still are"
)
FIGURES = ("completed", "failed", "total_input_tokens", "total_output_tokens", *COMPARED_KEYS)
SERVER_KEYS = (
    "num_preemptions",
    "prefix_cache_hit_rate",
    "max_kv_cache_usage",
    "max_num_requests_running",
    "max_num_requests_waiting",
    "num_steps",
    "mean_queue_time_ms",
    "mean_prefill_time_ms",
    "mean_decode_time_ms",
)


def level_name(run: RunResult) -> str:
    return f"c={run.max_concurrency}" if run.max_concurrency else "no cap"


def level_x(run: RunResult) -> float:
    """Where a run sits on a concurrency axis: its cap, else the sessions it ran at once."""
    return float(run.max_concurrency or len({r.session for r in run.requests}))


def _fmt(value: Any) -> str:
    if value is None:
        return "n/a"  # nothing measured (every request failed)
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _columns(run: RunResult) -> list[tuple[str, dict[str, Any]]]:
    """(header, figures) columns of one run: measured, and predicted with errors when present."""
    columns = [(f"{level_name(run)} measured", run.metrics)]
    if run.prediction is not None:
        errors = {k: f"{v:+.0%}" for k, v in relative_errors(run.metrics, run.prediction).items()}
        columns += [(f"{level_name(run)} predicted", run.prediction), ("error", errors)]
    return columns


def _server_cells(runs: list[RunResult], key: str) -> list[str]:
    """A server figure under each run's measured column (blank under predictions and errors)."""
    return [
        _fmt((run.server_metrics or {}).get(key, "")) if header.endswith("measured") else ""
        for run in runs
        for header, _ in _columns(run)
    ]


def _terminal_table(results: BenchResults, runs: list[RunResult], title: str) -> Table:
    table = Table(title=title)
    table.add_column("figure")
    columns = [c for run in runs for c in _columns(run)]
    for header, _ in columns:
        table.add_column(header, justify="right")
    for key in FIGURES:
        table.add_row(key, *(_fmt(values.get(key, "")) for _, values in columns))
    for key in SERVER_KEYS:
        cells = _server_cells(runs, key)
        if any(cells):
            table.add_row(f"server {key}", *cells)
    return table


def terminal_report(results: BenchResults, console: Console) -> None:
    """One table with a column per run; with predictions, a table per run (measured,
    predicted, error), which stays narrow enough for a terminal."""
    title = f"kvwise bench {results.server.url} ({results.server.model})"
    if any(run.prediction for run in results.runs):
        for run in results.runs:
            console.print(_terminal_table(results, [run], f"{title}, {level_name(run)}"))
    else:
        console.print(_terminal_table(results, results.runs, title))
    for run in results.runs:
        if run.metrics.get("errors"):
            console.print(f"{level_name(run)} errors: {run.metrics['errors']}")
        if run.metrics.get("num_burst_streamed"):
            console.print(
                f"{level_name(run)}: {BURST_NOTE.format(run.metrics['num_burst_streamed'])}"
            )
        if run.prediction is not None:
            console.print(f"{level_name(run)} prediction: {run.prediction['coefficients']}")
            for line in band_verdicts(run):
                console.print(f"  {line}", soft_wrap=True)


def band_verdicts(run: RunResult) -> list[str]:
    """Per banded metric: whether the measurement fell inside the prediction's band."""
    lines = []
    for metric, cell in ((run.prediction or {}).get("bands") or {}).items():
        inside, error = cell.get("measured_inside"), cell.get("measured_relative_error")
        low, high = cell["p10_relative_error"], cell["p90_relative_error"]
        if low is None:
            where = f"no out-of-sample data for {cell['gpu_class']} {cell['regime']}"
        else:
            where = (
                f"80% of out-of-sample cases within {low:+.0%} to {high:+.0%}, "
                f"{cell['cell']}, n={cell['n']}"
            )
        if inside is None:
            verdict = "not judged" if error is None else "no band to judge by"
        else:
            verdict = "inside the band" if inside else "OUTSIDE the band"
        shown = "not measured" if error is None else f"error {error:+.0%}"
        lines.append(f"{metric}: {shown}, {verdict} ({where})")
    return lines


def _html_table(results: BenchResults) -> str:
    columns = [c for run in results.runs for c in _columns(run)]
    head = "".join(f"<th>{escape(h)}</th>" for h, _ in columns)
    rows = []
    for key in FIGURES:
        row = "".join(f"<td>{escape(_fmt(values.get(key, '')))}</td>" for _, values in columns)
        rows.append(f"<tr><th>{escape(key)}</th>{row}</tr>")
    for key in SERVER_KEYS:
        cells = _server_cells(results.runs, key)
        if any(cells):
            row = "".join(f"<td>{escape(cell)}</td>" for cell in cells)
            rows.append(f"<tr><th>server {escape(key)}</th>{row}</tr>")
    return f"<table><tr><th>figure</th>{head}</tr>{''.join(rows)}</table>"


def _by_concurrency(results: BenchResults, keys: tuple[str, ...], title: str, unit: str) -> str:
    """Figures against the concurrency cap: measured solid, simulated dashed (same colour)."""
    # a run with nothing measured (every request failed) has no point to draw
    runs = sorted((r for r in results.runs if r.metrics["completed"]), key=level_x)
    xs = tuple(level_x(r) for r in runs)
    series = []
    for index, key in enumerate(keys):
        series.append(Series(key, xs, tuple(r.metrics[key] for r in runs), color_index=index))
        predictions = [r.prediction for r in runs if r.prediction is not None]
        if len(predictions) == len(runs):
            ys = tuple(p[key] for p in predictions)
            series.append(Series(f"{key} (sim)", xs, ys, dashed=True, color_index=index))
    return line_chart(title, "max concurrency", unit, series)


def _ttft_chart(results: BenchResults) -> str:
    series = [
        cdf_series(
            level_name(run), [r.ttft_s * 1000 for r in run.requests if r.ttft_s is not None], i
        )
        for i, run in enumerate(results.runs)
    ]
    return line_chart("TTFT distribution", "TTFT (ms)", "fraction of requests", series)


STYLE = """body{font-family:sans-serif;margin:2em;color:#222}table{border-collapse:collapse;margin:1em 0}
td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}th{background:#f4f4f4}
tr th:first-child{text-align:left}.meta{color:#555}svg{display:block;margin:1em 0}"""


def html_report(results: BenchResults) -> str:
    server = results.server
    meta = [
        f"server {server.url} ({server.backend}), model {server.model}",
        f"workload: {results.workload}",
        f"seed {results.seed}; tokens counted with {results.tokenizer}; {results.date}",
    ]
    meta += [
        f"{level_name(r)} prediction: {r.prediction['coefficients']}"
        for r in results.runs
        if r.prediction
    ]
    charts = [
        _by_concurrency(
            results, ("mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms"), "TTFT vs concurrency", "ms"
        ),
        _by_concurrency(
            results, ("mean_tpot_ms", "mean_itl_ms"), "TPOT and ITL vs concurrency", "ms"
        ),
        _by_concurrency(
            results, ("output_throughput",), "Output throughput vs concurrency", "tokens/s"
        ),
        _ttft_chart(results),
    ]
    return (
        "<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>kvwise bench</title>"
        f"<style>{STYLE}</style></head><body>\n<h1>kvwise bench</h1>\n"
        + "".join(f"<p class='meta'>{escape(line)}</p>\n" for line in meta)
        + _html_table(results)
        + "\n".join(charts)
        + "\n</body></html>\n"
    )
