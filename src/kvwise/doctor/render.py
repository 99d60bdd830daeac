"""The human view of a diagnosis: a Rich panel with the cause, the evidence, what was read, the
fix with the planner's before/after numbers, and the corrected command."""

from __future__ import annotations

from typing import Any

from rich.console import Console, Group
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from kvwise.doctor.command import flags_text
from kvwise.doctor.diagnose import Report
from kvwise.doctor.figures import GIB
from kvwise.planner.result import Plan

_PARSED_ROWS = ("vllm_version", "engine", "model", "gpu", "gpu_memory_gib", "stage")


def render(report: Report, console: Console) -> None:
    data = report.to_json()
    parts: list[Any] = [Text(data["summary"])]
    if data["evidence"]:
        parts += [Text("\nEvidence", style="bold"), *(_evidence(line) for line in data["evidence"])]
    table = _parsed_table(data["parsed"])
    if table.row_count:  # nothing read (a client's error alone): no empty table
        parts += [Text(""), table]
    if report.prescription is not None:
        parts += _fix_parts(report)
    style = "green" if data["kind"] == "unknown" else "red"
    console.print(Panel(Group(*parts), title=f"[bold]{data['kind']}[/bold]", border_style=style))


def _evidence(line: str) -> Text:
    return Text("  " + line, style="dim")


def _parsed_table(parsed: dict[str, Any]) -> Table:
    table = Table(title="Read from the log", show_header=False, title_justify="left", box=None)
    table.add_column(style="bold")
    table.add_column()
    for key in _PARSED_ROWS:
        if parsed.get(key) is not None:
            table.add_row(key, escape(str(parsed[key])))
    if parsed["flags"]:
        flags = " ".join(_flag(name, value) for name, value in parsed["flags"].items())
        table.add_row("flags", escape(flags))
    for key, value in parsed["figures"].items():
        table.add_row(key, _number(value))
    return table


def _flag(name: str, value: Any) -> str:
    flag = name.replace("_", "-")
    if isinstance(value, bool):
        return f"--{flag}" if value else f"--no-{flag}"
    return f"--{flag} {value}"


def _number(value: Any) -> str:
    if isinstance(value, float) and value.is_integer() and abs(value) >= 100:
        return f"{int(value):,}"  # block and token counts
    return f"{value:,}" if isinstance(value, (int, float)) else escape(str(value))


def _fix_parts(report: Report) -> list[Any]:
    prescription = report.prescription
    assert prescription is not None
    parts: list[Any] = [Text("\nFix", style="bold"), Text("  " + prescription.advice)]
    best = prescription.best
    if best is not None and (prescription.before or best.plan):
        parts.append(_before_after(prescription.before, best.plan))
    if prescription.command is not None:
        parts.append(Text("\n  " + prescription.command, style="bold cyan"))
    elif best is not None:
        parts.append(Text("\n  add to the vllm serve command you ran:", style="bold"))
        parts.append(Text("  " + flags_text(best.changes), style="bold cyan"))
    for option in prescription.options[1:]:
        parts.append(Text(f"  or: {option.reason}", style="dim"))
    for remedy in prescription.remedies:
        parts.append(Text(f"  {remedy}", style="dim"))
    for note in prescription.notes:
        parts.append(Text(f"  note: {note}", style="yellow"))
    return parts


def _before_after(before: Plan | None, after: Plan | None) -> Table:
    table = Table(title="Planner, per GPU", title_justify="left")
    table.add_column("")
    table.add_column("as logged", justify="right")
    table.add_column("with the fix", justify="right")
    for label, read in _ROWS:
        table.add_row(label, read(before) if before else "-", read(after) if after else "-")
    return table


def _verdict(plan: Plan) -> str:
    if plan.error is not None:
        return plan.error.kind
    return "verdict not modelled" if plan.verdict_not_modelled is not None else "starts"


_ROWS = (
    ("verdict", _verdict),
    ("KV cache", lambda p: f"{p.memory.kv_cache_bytes / GIB:.2f} GiB"),
    ("KV tokens", lambda p: f"{p.kv.tokens:,}"),
    ("max concurrency", lambda p: f"{p.kv.max_concurrency:.2f}x at {p.flags.max_model_len:,}"),
    ("weights", lambda p: f"{p.memory.weights_bytes / GIB:.2f} GiB"),
    ("activation peak", lambda p: f"{p.memory.activation_peak_bytes / GIB:.2f} GiB"),
    ("CUDA graphs", lambda p: f"{p.memory.cuda_graph_bytes / GIB:.2f} GiB"),
)
