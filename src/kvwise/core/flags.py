"""vLLM's launch flags, under vLLM's own names, shared by every command that takes them.

`VllmFlags` holds what the user set (None = left to vLLM's default); the planner resolves the
defaults for a vLLM version and GPU (`kvwise.planner.defaults`). `add_vllm_flags` puts the same
options on any argparse parser, and `parse_vllm_command` reads a pasted `vllm serve ...` line.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass, fields, replace
from typing import Any

from kvwise.errors import InvalidFlagError

KV_CACHE_DTYPES = ("auto", "fp8", "fp8_e4m3", "fp8_e5m2", "bfloat16", "float16")
DTYPES = ("auto", "bfloat16", "float16", "half", "float32", "float")
LORA_DTYPES = ("auto", "bfloat16", "float16", "float32")
# --quantization accepts vLLM's method names (model_executor/layers/quantization/__init__.py,
# QUANTIZATION_METHODS, union of 0.4.0-0.33.0). Besides fp8 and bitsandbytes, which quantize a
# 16-bit checkpoint while loading, a method only names the checkpoint's own quantization.
QUANTIZATIONS = (
    "awq",
    "awq_marlin",
    "gptq",
    "gptq_marlin",
    "gptq_marlin_24",
    "marlin",
    "fp8",
    "bitsandbytes",
    "compressed-tensors",
    "mxfp4",
    "mxfp8",
    "modelopt",
    "modelopt_fp4",
    "modelopt_mxfp8",
    "modelopt_mixed",
    "auto-round",
    "inc",
    "gguf",
    "fbgemm_fp8",
    "ptpc_fp8",
    "experts_int8",
    "moe_wna16",
    "quark",
    "torchao",
    "aqlm",
    "squeezellm",
    "deepspeedfp",
    "bitblas",
    "gptq_bitblas",
    "hqq",
    "qqq",
)


@dataclass(frozen=True)
class VllmFlags:
    gpu_memory_utilization: float | None = None
    max_model_len: int | None = None  # -1 means "auto" (fit the KV pool)
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    kv_cache_dtype: str | None = None
    quantization: str | None = None
    dtype: str | None = None
    tensor_parallel_size: int | None = None
    pipeline_parallel_size: int | None = None
    enforce_eager: bool | None = None
    block_size: int | None = None
    kv_cache_memory_bytes: int | None = None
    enable_prefix_caching: bool | None = None
    enable_chunked_prefill: bool | None = None
    cpu_offload_gb: float | None = None
    swap_space: float | None = None  # V0 only (GiB of pinned host memory per GPU)
    num_gpu_blocks_override: int | None = None
    enable_lora: bool | None = None
    max_loras: int | None = None  # adapters resident on the GPU at once (LoRA slots)
    max_lora_rank: int | None = None
    max_cpu_loras: int | None = None  # adapters cached in host memory (>= max_loras)
    lora_dtype: str | None = None  # "auto" = the model's dtype
    # items per prompt and modality, as vLLM takes it: '{"image": 1, "video": 0}' (or image=1,video=0)
    limit_mm_per_prompt: str | None = None
    # vLLM flags kvwise does not model (--enable-auto-tool-choice, --tool-call-parser hermes...),
    # as pasted: they change no memory figure and go verbatim into every command kvwise prints
    extra_args: tuple[str, ...] | None = None

    def set_values(self) -> dict[str, Any]:
        """The flags the user set, vLLM's names with underscores."""
        return {
            f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None
        }

    def merged(self, **changes: Any) -> VllmFlags:
        return replace(self, **changes)

    def validate(self) -> VllmFlags:
        """Reject values vLLM itself would refuse, with the allowed range in the message."""
        util = self.gpu_memory_utilization
        if util is not None and not 0 < util <= 1:
            raise InvalidFlagError(f"--gpu-memory-utilization must be in (0, 1], got {util}")
        for name in (
            "max_num_seqs",
            "max_num_batched_tokens",
            "tensor_parallel_size",
            "pipeline_parallel_size",
            "block_size",
            "num_gpu_blocks_override",
            "max_loras",
            "max_lora_rank",
            "max_cpu_loras",
        ):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise InvalidFlagError(f"--{name.replace('_', '-')} must be positive, got {value}")
        if self.max_model_len is not None and self.max_model_len <= 0 and self.max_model_len != -1:
            raise InvalidFlagError(
                f"--max-model-len must be positive or 'auto', got {self.max_model_len}"
            )
        if self.kv_cache_memory_bytes is not None and self.kv_cache_memory_bytes <= 0:
            raise InvalidFlagError("--kv-cache-memory-bytes must be positive")
        for name in ("cpu_offload_gb", "swap_space"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise InvalidFlagError(
                    f"--{name.replace('_', '-')} must not be negative, got {value}"
                )
        if self.max_cpu_loras is not None and self.max_cpu_loras < (self.max_loras or 1):
            raise InvalidFlagError(
                f"max_cpu_loras ({self.max_cpu_loras}) must be >= max_loras ({self.max_loras or 1})"
            )
        _check_choice("lora-dtype", self.lora_dtype, LORA_DTYPES)
        _check_choice("kv-cache-dtype", self.kv_cache_dtype, KV_CACHE_DTYPES)
        _check_choice("dtype", self.dtype, DTYPES)
        _check_choice("quantization", self.quantization, QUANTIZATIONS)
        return self


def _check_choice(flag: str, value: str | None, allowed: tuple[str, ...]) -> None:
    if value is not None and value not in allowed:
        raise InvalidFlagError(f"--{flag} {value!r} is not one of: {', '.join(allowed)}")


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kKmMgGtT]?)(i?[bB]?)?\s*$")


def parse_bytes(text: str) -> int:
    """vLLM's size syntax: `8G` = 8 * 2**30, `8g` = 8 * 10**9, plain integers are bytes."""
    match = _SIZE.match(str(text))
    if not match:
        raise InvalidFlagError(f"not a size: {text!r} (use bytes, or e.g. 8G / 8GiB / 8g)")
    number, unit, suffix = float(match.group(1)), match.group(2), match.group(3) or ""
    if not unit:
        return int(number)
    power = "kmgt".index(unit.lower()) + 1
    binary = unit.isupper() or suffix.lower().startswith("i")
    return int(number * (1024 if binary else 1000) ** power)


def _max_model_len(text: str) -> int:
    """vLLM accepts `auto`/-1, plain integers and human sizes (`32k` = 32000, `32K` = 32768)."""
    if text.lower() in ("auto", "-1"):
        return -1
    try:
        return parse_bytes(text) if text[-1:].isalpha() else int(text)
    except (ValueError, InvalidFlagError) as exc:
        raise argparse.ArgumentTypeError(f"not a length: {text!r}") from exc


def _bool_flag(parser: argparse.ArgumentParser, name: str, help_text: str) -> None:
    parser.add_argument(
        f"--{name}", dest=name.replace("-", "_"), action="store_true", default=None, help=help_text
    )
    parser.add_argument(
        f"--no-{name}", dest=name.replace("-", "_"), action="store_false", help=argparse.SUPPRESS
    )


def add_vllm_flags(parser: argparse.ArgumentParser) -> None:
    """vLLM's memory-relevant flags, spelled as vLLM spells them."""
    group = parser.add_argument_group("vLLM flags (vLLM's names and meanings)")
    group.add_argument(
        "--gpu-memory-utilization",
        type=float,
        help="fraction of total GPU memory for this instance",
    )
    group.add_argument(
        "--max-model-len",
        type=_max_model_len,
        help="tokens per request (prompt + output); 'auto' fits the pool",
    )
    group.add_argument("--max-num-seqs", type=int, help="maximum running requests")
    group.add_argument("--max-num-batched-tokens", type=int, help="token budget per engine step")
    group.add_argument("--kv-cache-dtype", help=f"one of {', '.join(KV_CACHE_DTYPES)}")
    group.add_argument("--quantization", "-q", help=f"one of {', '.join(QUANTIZATIONS)}")
    group.add_argument("--dtype", help=f"one of {', '.join(DTYPES)}")
    group.add_argument("--tensor-parallel-size", "-tp", type=int)
    group.add_argument("--pipeline-parallel-size", "-pp", type=int)
    group.add_argument("--block-size", type=int)
    group.add_argument(
        "--kv-cache-memory-bytes", type=parse_bytes, help="KV pool per GPU (e.g. 8G)"
    )
    group.add_argument("--cpu-offload-gb", type=float)
    group.add_argument("--swap-space", type=float, help="V0 only: pinned host GiB per GPU")
    group.add_argument("--num-gpu-blocks-override", type=int)
    group.add_argument("--max-loras", type=int, help="LoRA adapters resident on the GPU at once")
    group.add_argument("--max-lora-rank", type=int, help="largest LoRA rank served")
    group.add_argument("--max-cpu-loras", type=int, help="LoRA adapters cached in host memory")
    group.add_argument("--lora-dtype", help=f"one of {', '.join(LORA_DTYPES)}")
    group.add_argument(
        "--limit-mm-per-prompt",
        help='multimodal items per prompt, e.g. \'{"image": 1, "video": 0}\' (sizes the '
        "encoder profile of modelled vision models)",
    )
    _bool_flag(group, "enable-lora", "serve LoRA adapters (GPU slots for --max-loras)")  # type: ignore[arg-type]
    _bool_flag(group, "enforce-eager", "no CUDA graphs")  # type: ignore[arg-type]
    _bool_flag(group, "enable-prefix-caching", "prefix caching (default on in V1)")  # type: ignore[arg-type]
    _bool_flag(group, "enable-chunked-prefill", "chunked prefill (always on in V1)")  # type: ignore[arg-type]


def flags_from_args(args: argparse.Namespace) -> VllmFlags:
    values = {f.name: getattr(args, f.name, None) for f in fields(VllmFlags)}
    return VllmFlags(**values).validate()


@dataclass(frozen=True)
class ParsedCommand:
    model: str
    flags: VllmFlags
    ignored: tuple[str, ...]  # flags kvwise does not model (reported, kept in `flags.extra_args`)


def parse_vllm_command(argv: list[str] | str) -> ParsedCommand:
    """Read `vllm serve MODEL --flags`, `python -m vllm.entrypoints.openai.api_server --model M ...`."""
    import shlex  # a pasted command's only: not imported by every plan

    tokens = shlex.split(argv) if isinstance(argv, str) else list(argv)
    tokens = [t for t in tokens if t not in ("\\", "")]
    while tokens and (
        tokens[0] in ("vllm", "serve", "python", "python3", "-m") or "vllm.entrypoints" in tokens[0]
    ):
        tokens = tokens[1:]
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("model_pos", nargs="?")
    parser.add_argument("--model")
    add_vllm_flags(parser)
    args, unknown = parser.parse_known_args(tokens)
    model = args.model or args.model_pos
    if not model:
        raise InvalidFlagError("the pasted command names no model (vllm serve MODEL ...)")
    ignored = tuple(t for t in unknown if t.startswith("-"))
    flags = replace(flags_from_args(args), extra_args=tuple(unknown) or None)
    return ParsedCommand(model=model, flags=flags, ignored=ignored)
