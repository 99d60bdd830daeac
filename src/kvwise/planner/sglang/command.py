"""A pasted SGLang launch command (`python -m sglang.launch_server ...`, `sglang serve ...`)
as the planner's flags, under SGLang's own flag names."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvwise.core.flags import VllmFlags
from kvwise.errors import UsageError
from kvwise.planner.sglang.plan import SglangFlags

# SGLang's spellings (server_args.py add_cli_args) -> (which set, field, type)
_FLAGS: dict[str, tuple[str, str, type]] = {
    "--tp": ("vllm", "tensor_parallel_size", int),
    "--tp-size": ("vllm", "tensor_parallel_size", int),
    "--tensor-parallel-size": ("vllm", "tensor_parallel_size", int),
    "--context-length": ("vllm", "max_model_len", int),
    "--kv-cache-dtype": ("vllm", "kv_cache_dtype", str),
    "--quantization": ("vllm", "quantization", str),
    "--dtype": ("vllm", "dtype", str),
    "--mem-fraction-static": ("sglang", "mem_fraction_static", float),
    "--mem-frac": ("sglang", "mem_fraction_static", float),
    "--chunked-prefill-size": ("sglang", "chunked_prefill_size", int),
    "--cuda-graph-max-bs": ("sglang", "cuda_graph_max_bs", int),
    "--max-running-requests": ("sglang", "max_running_requests", int),
}
_MODEL = ("--model-path", "--model")


@dataclass(frozen=True)
class SglangCommand:
    model: str
    flags: VllmFlags
    sglang: SglangFlags
    ignored: tuple[str, ...]


def is_sglang_command(argv: list[str]) -> bool:
    return any("sglang" in word for word in argv[:4])


def _split(argv: list[str]) -> list[tuple[str, str | None]]:
    pairs: list[tuple[str, str | None]] = []
    for word in argv:
        if word.startswith("--"):
            name, _, value = word.partition("=")
            pairs.append((name, value or None))
        elif pairs and pairs[-1][1] is None:
            pairs[-1] = (pairs[-1][0], word)
    return pairs


def parse_sglang_command(argv: list[str]) -> SglangCommand:
    model: str | None = None
    vllm: dict[str, Any] = {}
    sglang: dict[str, Any] = {}
    ignored: list[str] = []
    for name, value in _split(argv):
        if name in _MODEL:
            model = value
        elif name in _FLAGS and value is not None:
            target, field, kind = _FLAGS[name]
            (vllm if target == "vllm" else sglang)[field] = _value(name, value, kind)
        else:
            ignored.append(name)
    if not model:
        raise UsageError("the pasted SGLang command names no --model-path")
    if vllm.get("kv_cache_dtype", "auto") != "auto":
        vllm["kv_cache_dtype"] = "fp8"  # fp8_e4m3 / fp8_e5m2: one byte per value either way
    return SglangCommand(model, VllmFlags(**vllm), SglangFlags(**sglang), tuple(ignored))


def _value(name: str, value: str, kind: type) -> object:
    try:
        return kind(value)
    except ValueError:
        raise UsageError(f"{name} {value!r}: expected a {kind.__name__}") from None
