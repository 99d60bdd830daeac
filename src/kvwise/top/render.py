"""The Rich view of one status (the dict of /kvwise/status, or the engines' own)."""

from __future__ import annotations

import time
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text


def _n(value: Any, digits: int = 0) -> str:
    if value is None:
        return "–"
    return f"{value:,.{digits}f}" if isinstance(value, float) else f"{value:,}"


def _pair_ms(low: Any, high: Any) -> str:
    return f"{_n(low, 1)} / {_n(high, 1)}"


def view(status: dict[str, Any], interval_s: float) -> RenderableType:
    clock = time.strftime("%H:%M:%S", time.localtime(status.get("time_s", time.time())))
    parts: list[RenderableType] = [
        Text.assemble(
            ("kvwise top", "bold"),
            f"  {status.get('source')} · {clock} · every {interval_s:g} s · Ctrl-C to quit",
        )
    ]
    parts += [
        Text(f"unreachable: {line}", style="bold red") for line in status.get("unreachable", [])
    ]
    parts += [Text(f"plan vs live: {line}", style="yellow") for line in status["departures"]]
    if status.get("gateway"):
        parts.append(_gateway(status["gateway"]))
    if status["replicas"]:
        parts.append(_replicas(status["replicas"]))
    memory = (status.get("host") or {}).get("memory")
    parts.append(
        Text(
            f"host memory: {memory['used_gib']:.1f} / {memory['total_gib']:.1f} GiB used "
            f"({memory['available_gib']:.1f} GiB available)"
            if memory
            else "host memory: not available (no /proc/meminfo)"
        )
    )
    for gpu in (status.get("host") or {}).get("gpus") or []:
        parts.append(
            Text(f"GPU {gpu['index']} {gpu['name']}: {gpu['used_gib']:.1f} / "
                 f"{gpu['total_gib']:.1f} GiB used (NVML)")
        )  # fmt: skip
    return Group(*parts)


def _gateway(g: dict[str, Any]) -> Table:
    table = Table(title="gateway", title_justify="left", show_header=False, box=None)
    table.add_row("queue depth", f"{_n(g['queue_depth'])} ({_n(g['queue_tokens'])} KV tokens)")
    table.add_row(
        "admitted / queued / rejected",
        f"{_n(g['num_admitted'])} / {_n(g['num_queued'])} / {_n(g['num_rejected'])}"
        f"  (429s: {_n(g['rejected_429_per_min'], 1)}/min)",
    )
    table.add_row(
        "budget in use", f"{_n(g['reserved_tokens'])} / {_n(g['budget_tokens'])} KV tokens"
    )
    sessions = g.get("num_sessions")
    table.add_row("sessions", "store off" if sessions is None else _n(sessions))
    window = f"over {_n(g['window_s'], 0)} s"
    table.add_row("TTFT p50 / p99 ms", f"{_pair_ms(g['ttft_p50_ms'], g['ttft_p99_ms'])}  {window}")
    table.add_row("TPOT p50 / p99 ms", f"{_pair_ms(g['tpot_p50_ms'], g['tpot_p99_ms'])}  {window}")
    flows = g.get("top_queued_flows") or []
    table.add_row(
        "top queued (KV tokens)",
        ", ".join(f"{f['flow']}: {_n(f['queued_tokens'])}" for f in flows) or "none queued",
    )
    return table


ENGINES = {"vllm": "vLLM", "sglang": "SGLang"}


def _preemption_label(replicas: list[dict[str, Any]]) -> str:
    """SGLang retracts where vLLM preempts (sglang:num_retracted_requests_total)."""
    engines = {r.get("engine") for r in replicas}
    if engines == {"sglang"}:
        return "retractions/min"
    return "preempt./retract. /min" if "sglang" in engines else "preemptions/min"


def _replicas(replicas: list[dict[str, Any]]) -> Table:
    """A column per replica, a row per figure: fits an 80-column terminal for a few replicas."""
    table = Table(title="replicas", title_justify="left")
    table.add_column("")
    for r in replicas:
        name = r["name"] if r.get("healthy", True) else f"{r['name']} (down)"
        table.add_column(name, justify="right", overflow="fold")
    rows: tuple[tuple[str, Any], ...] = (
        ("engine", lambda r: ENGINES.get(r.get("engine") or "", "–")),
        (
            "KV used / pool",
            lambda r: f"{_n(r.get('kv_used_tokens'))} / {_n(r.get('kv_pool_tokens'))}",
        ),
        ("KV used %", lambda r: _n(r.get("kv_usage_pct"), 1)),
        ("planned pool", lambda r: _n(r.get("planned_pool_tokens"))),
        (
            "running / waiting",
            lambda r: f"{_n(r.get('num_requests_running'))} / {_n(r.get('num_requests_waiting'))}",
        ),
        (_preemption_label(replicas), lambda r: _n(r.get("preemptions_per_min"), 1)),
        ("TTFT p50 / p99 ms", lambda r: _pair_ms(r.get("ttft_p50_ms"), r.get("ttft_p99_ms"))),
        ("TPOT p50 / p99 ms", lambda r: _pair_ms(r.get("tpot_p50_ms"), r.get("tpot_p99_ms"))),
        ("tokens/s", lambda r: _n(r.get("tokens_per_s"), 1)),
        ("over the last", lambda r: f"{_n(r.get('window_s'), 1)} s"),
    )
    for label, value in rows:
        table.add_row(label, *(value(r) for r in replicas))
    return table
