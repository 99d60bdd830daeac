"""`kvwise simulate --engine sglang`: SGLang's flags under SGLang's names, the replicas they
give (`sglang_deploy.py`, the same model `plan --workload --engine vllm,sglang` runs), and a
one-line error for a flag only the other engine has.

The flags are SGLang's (`server_args.py` add_cli_args, SGLang 0.5.23): `--mem-fraction-static`,
`--max-running-requests`, `--chunked-prefill-size`, `--cuda-graph-max-bs`, `--schedule-policy`,
`--disable-radix-cache`, `--context-length`, `--tp-size` (alias `--tp`), with `--kv-cache-dtype`,
`--dtype` and `--quantization` spelt alike in both engines.
"""

from __future__ import annotations

import argparse
import shlex
from dataclasses import dataclass, fields, replace

from kvwise.core.command_parser import CommandParser
from kvwise.core.flags import VllmFlags, add_vllm_flags, flags_from_args
from kvwise.errors import UsageError
from kvwise.planner.cli import add_sglang_flags, sglang_flags_from_args
from kvwise.planner.sglang import SglangFlags

SCHEDULE_POLICIES = ("fcfs", "lpm")  # the two sglang_scheduler.py models (SGLang has more)

# vLLM's flags SGLang has no counterpart for in this model, and what to give instead
_VLLM_ONLY: dict[str, tuple[str, str]] = {
    "gpu_memory_utilization": (
        "--gpu-memory-utilization",
        "give --mem-fraction-static (weights + KV as a fraction of the memory free before loading)",
    ),
    "max_num_seqs": ("--max-num-seqs", "give --max-running-requests"),
    "max_num_batched_tokens": ("--max-num-batched-tokens", "give --chunked-prefill-size"),
    "block_size": ("--block-size", "SGLang's radix cache pages one token at a time (page_size 1)"),
    "enable_prefix_caching": (
        "--[no-]enable-prefix-caching",
        "the radix cache is on by default; --disable-radix-cache turns it off",
    ),
    "enable_chunked_prefill": (
        "--[no-]enable-chunked-prefill",
        "--chunked-prefill-size -1 turns chunking off",
    ),
    "enforce_eager": ("--[no-]enforce-eager", "SGLang's --disable-cuda-graph is not modelled"),
    "pipeline_parallel_size": (
        "--pipeline-parallel-size",
        "SGLang's --pp-size is not modelled in its simulation",
    ),
    "vllm_version": ("--vllm-version", "give --sglang-version"),
    "vllm_use_v1": ("--vllm-use-v1", "SGLang has one engine"),
}
_NO_COUNTERPART = {
    "kv_cache_memory_bytes": "--kv-cache-memory-bytes",
    "cpu_offload_gb": "--cpu-offload-gb",
    "swap_space": "--swap-space",
    "num_gpu_blocks_override": "--num-gpu-blocks-override",
    "enable_lora": "--[no-]enable-lora",
    "max_loras": "--max-loras",
    "max_lora_rank": "--max-lora-rank",
    "max_cpu_loras": "--max-cpu-loras",
    "lora_dtype": "--lora-dtype",
    "nodes": "--nodes",
    "gpus_per_node": "--gpus-per-node",
    "interconnect": "--interconnect",
    "inter_node_link": "--inter-node-link",
}
# SGLang's flags, and vLLM's name for the same knob (None: vLLM has none)
_SGLANG_ONLY: dict[str, tuple[str, str | None]] = {
    "sglang_version": ("--sglang-version", "--vllm-version"),
    "mem_fraction_static": ("--mem-fraction-static", "--gpu-memory-utilization"),
    "chunked_prefill_size": ("--chunked-prefill-size", "--max-num-batched-tokens"),
    "cuda_graph_max_bs": ("--cuda-graph-max-bs", None),
    "max_running_requests": ("--max-running-requests", "--max-num-seqs"),
    "schedule_policy": ("--schedule-policy", None),
    "disable_radix_cache": ("--disable-radix-cache", "--no-enable-prefix-caching"),
}


@dataclass(frozen=True)
class SglangSettings:
    """What one SGLang replica is started with: the flags both engines share (in vLLM's
    dataclass), SGLang's own, and the scheduler's."""

    flags: VllmFlags
    sglang: SglangFlags
    schedule_policy: str | None = None  # None: the release's default
    disable_radix_cache: bool = False


def add_sglang_simulate_flags(parser: argparse.ArgumentParser) -> None:
    add_sglang_flags(parser)
    group = parser.add_argument_group("SGLang's scheduler and spellings (with --engine sglang)")
    group.add_argument(
        "--schedule-policy",
        choices=SCHEDULE_POLICIES,
        help="waiting-queue order (default: the release's, fcfs from 0.4.4)",
    )
    group.add_argument(
        "--disable-radix-cache",
        action="store_true",
        default=None,
        help="no prefix cache: every prompt is computed whole",
    )
    group.add_argument(
        "--context-length",
        dest="max_model_len",
        type=int,
        metavar="TOKENS",
        help="longest request, prompt + output (vLLM's --max-model-len)",
    )
    group.add_argument(
        "--tp-size",
        "--tp",
        dest="tensor_parallel_size",
        type=int,
        metavar="N",
        help="tensor parallel GPUs",
    )


def _given(args: argparse.Namespace, name: str) -> bool:
    return getattr(args, name, None) is not None


def check_vllm_args(args: argparse.Namespace) -> None:
    """`--engine vllm` (the default) with a flag only SGLang has: one line, naming vLLM's."""
    given = [(flag, twin) for name, (flag, twin) in _SGLANG_ONLY.items() if _given(args, name)]
    if given:
        flag, twin = given[0]
        instead = f"; vLLM's is {twin}" if twin else ""
        raise UsageError(f"{flag} is SGLang's: add --engine sglang{instead}")


def check_sglang_args(args: argparse.Namespace, where: str = "--engine sglang") -> None:
    """A flag only vLLM has, given to the SGLang simulation: one line, naming SGLang's."""
    for name, (flag, instead) in _VLLM_ONLY.items():
        if _given(args, name):
            raise UsageError(f"{flag} is vLLM's, not SGLang's ({where}): {instead}")
    for name, flag in _NO_COUNTERPART.items():
        if _given(args, name):
            raise UsageError(f"{flag} is not modelled for SGLang ({where})")


def settings_from_args(args: argparse.Namespace) -> SglangSettings:
    check_sglang_args(args)
    sglang = sglang_flags_from_args(args)
    _check_values(sglang)
    return SglangSettings(
        flags_from_args(args), sglang, args.schedule_policy, bool(args.disable_radix_cache)
    )


def _check_values(sglang: SglangFlags) -> None:
    if sglang.max_running_requests is not None and sglang.max_running_requests < 1:
        raise UsageError("--max-running-requests must be at least 1")
    chunk = sglang.chunked_prefill_size
    if chunk is not None and chunk != -1 and chunk < 1:
        raise UsageError("--chunked-prefill-size must be a positive number of tokens, or -1 (off)")


def compare_settings(base: SglangSettings, text: str) -> SglangSettings:
    """`--compare "--mem-fraction-static 0.8"`: the base settings with the changes in `text`."""
    parser = CommandParser(prog="--compare", add_help=False)
    add_vllm_flags(parser)
    add_sglang_simulate_flags(parser)
    try:
        args = parser.parse_args(shlex.split(text))
    except UsageError as exc:
        raise UsageError(f"--compare {text!r}: {exc}") from exc
    check_sglang_args(args, where=f"--compare {text!r}")
    override = flags_from_args(args)
    shared = {
        f.name: getattr(override, f.name)
        for f in fields(override)
        if getattr(override, f.name) is not None
    }
    own = sglang_flags_from_args(args)
    changed = {
        f.name: getattr(own, f.name) for f in fields(own) if getattr(own, f.name) is not None
    }
    sglang = replace(base.sglang, **changed)
    _check_values(sglang)
    return SglangSettings(
        replace(base.flags, **shared).validate(),
        sglang,
        args.schedule_policy or base.schedule_policy,
        base.disable_radix_cache or bool(args.disable_radix_cache),
    )
