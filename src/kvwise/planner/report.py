"""Human-readable view of a plan (Rich), and the `vllm serve` command that reproduces it."""

from __future__ import annotations

import shlex

from rich.console import Console
from rich.table import Table

from kvwise.core.gpus import GIB
from kvwise.errors import KvwiseError
from kvwise.planner.defaults import default_flags
from kvwise.planner.result import Plan, ResolvedFlags

# flags worth printing in a command when they differ from what vLLM would pick itself
_COMMAND_FLAGS = (
    "gpu_memory_utilization",
    "max_model_len",
    "max_num_seqs",
    "max_num_batched_tokens",
    "kv_cache_dtype",
    "quantization",
    "dtype",
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "block_size",
    "kv_cache_memory_bytes",
    "cpu_offload_gb",
    "limit_mm_per_prompt",
)


def vllm_command(model_id: str, flags: ResolvedFlags, defaults: ResolvedFlags | None = None) -> str:
    """`vllm serve MODEL --flag value ...` with every flag that differs from `defaults`
    (vLLM's own choices for this model, GPU and release), or every flag without them."""
    parts = ["vllm", "serve", model_id]
    for name in _COMMAND_FLAGS:
        value = getattr(flags, name)
        if value is None or (defaults is not None and getattr(defaults, name) == value):
            continue
        if name in ("kv_cache_dtype", "dtype") and value == "auto":
            continue
        if name == "cpu_offload_gb" and not value:
            continue
        parts += [f"--{name.replace('_', '-')}", str(value)]
    if flags.enforce_eager and not (defaults and defaults.enforce_eager):
        parts.append("--enforce-eager")
    if defaults is not None and flags.enable_prefix_caching != defaults.enable_prefix_caching:
        parts.append(
            "--enable-prefix-caching"
            if flags.enable_prefix_caching
            else "--no-enable-prefix-caching"
        )
    parts += _lora_args(flags)
    parts += flags.extra_args  # what kvwise does not model, as the user wrote it
    return " ".join(shlex.quote(p) for p in parts)


def _lora_args(flags: ResolvedFlags) -> list[str]:
    if not flags.enable_lora:
        return []
    args = ["--enable-lora"]
    for name in ("max_loras", "max_lora_rank", "max_cpu_loras", "lora_dtype"):
        value = getattr(flags, name)
        if value is not None:
            args += [f"--{name.replace('_', '-')}", str(value)]
    return args


def _gib(value: int) -> str:
    return f"{value / GIB:.2f}"


def memory_table(plan: Plan) -> Table:
    mem = plan.memory
    table = Table(
        title=f"Per-GPU memory (GiB) — {plan.gpu.name} × {plan.num_gpus}", title_justify="left"
    )
    table.add_column("component")
    table.add_column("GiB", justify="right")
    table.add_column("how vLLM gets it")
    flags = plan.flags
    table.add_row("total", _gib(mem.total_bytes), "device memory as CUDA reports it")
    table.add_row(
        "budget",
        _gib(mem.budget_bytes),
        f"total × gpu_memory_utilization {flags.gpu_memory_utilization}",
    )
    table.add_row("  weights", _gib(mem.weights_bytes), _weights_note(plan))
    table.add_row(
        "  activation peak",
        _gib(mem.activation_peak_bytes),
        f"profile run: {flags.max_num_batched_tokens} tokens, sampler over "
        f"{min(flags.max_num_seqs, flags.max_num_batched_tokens)} × {plan.model.vocab_size} logits",
    )
    table.add_row(
        "  non-torch", _gib(mem.non_torch_bytes), "cuBLAS/attention workspaces, NCCL buffers"
    )
    where = "inside the budget (estimate)" if mem.cuda_graph_in_budget else "OUTSIDE the budget"
    graphs = "none (--enforce-eager)" if flags.enforce_eager else where
    table.add_row("  CUDA graphs", _gib(mem.cuda_graph_bytes), graphs)
    table.add_row("  KV cache", _gib(mem.kv_cache_bytes), "the rest of the budget", style="bold")
    table.add_row(
        "device peak", _gib(mem.peak_device_bytes), "CUDA context + budget (+ graphs outside it)"
    )
    return table


def _weights_note(plan: Plan) -> str:
    quant = plan.model.quant
    layout = quant.label if quant else plan.flags.dtype
    ranks = plan.flags.tensor_parallel_size * plan.flags.pipeline_parallel_size
    return f"{layout}, split over {ranks} GPU(s)" if ranks > 1 else layout


def kv_table(plan: Plan) -> Table:
    kv, flags = plan.kv, plan.flags
    table = Table(title="KV cache", title_justify="left", show_header=False)
    table.add_column("what")
    table.add_column("value", justify="right")
    dtype = plan.flags.kv_cache_dtype
    table.add_row("KV bytes per token (per GPU)", f"{kv.bytes_per_token:,} ({dtype})")
    table.add_row("blocks × block size", f"{kv.num_gpu_blocks:,} × {kv.block_size}")
    table.add_row("GPU KV cache size", f"{kv.tokens:,} tokens")
    table.add_row(
        f"max concurrency at {flags.max_model_len:,} tokens", f"{kv.max_concurrency:.2f}x"
    )
    return table


def render(plan: Plan, console: Console) -> None:
    console.print(
        f"[bold]{plan.model.model_id}[/] on {plan.num_gpus} × {plan.gpu.name}, "
        f"vLLM {plan.vllm_version} ({plan.engine} engine)"
    )
    console.print(memory_table(plan))
    console.print(kv_table(plan))
    if plan.verdict_not_modelled is not None:
        console.print(f"[bold yellow]Start/fail verdict {plan.verdict_not_modelled}[/]")
    elif plan.error is None:
        console.print("[bold green]vLLM starts.[/]")
    else:
        stage = plan.error.stage.replace("_", " ")
        console.print(f"[bold red]vLLM fails at start-up, stage {stage} ({plan.error.kind}):[/]")
        console.print(plan.error.message, markup=False, highlight=False)
    console.print(f"Host RAM needed: about {plan.host_ram_bytes / GIB:.1f} GiB")
    for warning in plan.warnings:
        console.print(f"[yellow]warning:[/] {warning}", highlight=False)
    for part in plan.not_modelled:
        console.print(f"[magenta]not modelled:[/] {part}", highlight=False)
    try:
        defaults: ResolvedFlags | None = default_flags(plan.model, plan.gpu, plan.vllm_version)
    except KvwiseError:
        # vLLM itself refuses its defaults here (a bf16 checkpoint on a card without bf16): the
        # command then names every flag
        defaults = None
    command = vllm_command(plan.model.model_id, plan.flags, defaults)
    # one line however narrow the terminal: a wrapped command would not paste whole
    console.print(f"\n{command}", markup=False, highlight=False, soft_wrap=True)
