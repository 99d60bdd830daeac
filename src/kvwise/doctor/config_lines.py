"""The configuration a log states, under vLLM's flag names.

vLLM states its configuration in several shapes across versions, and users paste their own:

- a command: `vllm serve M --max-model-len 4096`, `python -m vllm.entrypoints.openai.api_server
  --model M ...`, a Docker `entrypoint: ["vllm", "serve", ...]` list, `LLM(model=..., ...)`;
- `non-default args: {'model': ..., 'max_model_len': 4096}` (V1 API server, 0.9+);
- `args: Namespace(model=..., max_model_len=None, ...)` (older API server: defaults included);
- the engine line `Initializing a V1 LLM engine (v0.8.4) with config: model='...',
  dtype=torch.bfloat16, max_seq_len=131072, ..., tensor_parallel_size=2, ...` (resolved values).

Every reader here is tolerant: a value that does not parse is skipped, never raised.
"""

from __future__ import annotations

import ast
import math
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kvwise.core.flags import parse_bytes
from kvwise.errors import InvalidFlagError


def _to_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # "nan", "inf": no flag takes them
        raise ValueError(text)
    return value


def _to_int(text: str) -> int:
    return int(float(text)) if re.fullmatch(r"-?\d+(?:\.0+)?", text) else int(text)


def _to_length(text: str) -> int:
    """max_model_len: integers, `auto`/-1, and vLLM's `32k` (32000) / `32K` (32768)."""
    if text.lower() in ("auto", "-1"):
        return -1
    if text[-1:].isalpha():
        return parse_bytes(text)
    return _to_int(text)


def _to_bool(text: str) -> bool:
    lowered = text.lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise ValueError(text)


def _to_name(text: str) -> str:
    # engine lines print torch dtypes (`torch.bfloat16`) and enums (`LoadFormat.AUTO`)
    return text.split(".")[-1].strip("'\"").lower()


# vLLM flag (underscore form) -> converter from its text
FLAG_TYPES: dict[str, Callable[[str], Any]] = {
    "gpu_memory_utilization": _to_float,
    "max_model_len": _to_length,
    "max_num_seqs": _to_int,
    "max_num_batched_tokens": _to_int,
    "kv_cache_dtype": _to_name,
    "quantization": _to_name,
    "dtype": _to_name,
    "tensor_parallel_size": _to_int,
    "pipeline_parallel_size": _to_int,
    "enforce_eager": _to_bool,
    "block_size": _to_int,
    "kv_cache_memory_bytes": parse_bytes,
    "enable_prefix_caching": _to_bool,
    "enable_chunked_prefill": _to_bool,
    "cpu_offload_gb": _to_float,
    "swap_space": _to_float,
    "num_gpu_blocks_override": _to_int,
}
BOOL_FLAGS = frozenset(k for k, v in FLAG_TYPES.items() if v is _to_bool)
# other spellings of the same settings, in commands and in vLLM's own lines
ALIASES = {
    "max_seq_len": "max_model_len",
    "chunked_prefill_enabled": "enable_chunked_prefill",
    "tp": "tensor_parallel_size",
    "pp": "pipeline_parallel_size",
    "q": "quantization",
    "kv_cache_memory": "kv_cache_memory_bytes",
    "cache_dtype": "kv_cache_dtype",
}


@dataclass(frozen=True)
class ConfigFinding:
    """Flags and model read from one place in the log."""

    shape: str  # "command", "non_default_args", "namespace", "engine_config", "llm_call"
    line_number: int
    model: str | None
    flags: dict[str, Any]

    @property
    def is_explicit(self) -> bool:
        """True when the user set these values (not vLLM's resolved defaults)."""
        return self.shape in ("command", "non_default_args", "llm_call")


def flag_name(text: str) -> str | None:
    name = text.lstrip("-").replace("-", "_").lower()
    name = ALIASES.get(name, name)
    return name if name in FLAG_TYPES else None


def convert(name: str, raw: object) -> Any | None:
    """A flag's value from text or a Python literal; None when it is absent or unreadable."""
    if raw is None or (isinstance(raw, str) and raw.strip("'\" ").lower() in ("none", "")):
        return None
    if isinstance(raw, bool):
        return raw if name in BOOL_FLAGS else None
    text = str(raw).strip().strip("'\"")
    try:
        return FLAG_TYPES[name](text)
    except (ValueError, InvalidFlagError):
        return None


def flags_from_pairs(pairs: dict[str, object]) -> dict[str, Any]:
    flags: dict[str, Any] = {}
    for key, raw in pairs.items():
        name = flag_name(key)
        value = None if name is None else convert(name, raw)
        if name is not None and value is not None:
            flags[name] = value
    return flags


def flags_from_tokens(tokens: list[str]) -> tuple[str | None, dict[str, Any]]:
    """(model, flags) from command-line tokens, accepting `--a-b`, `--a_b`, `--flag=value`."""
    model: str | None = None
    pairs: dict[str, object] = {}
    index = 0
    while index < len(tokens):
        token = tokens[index]
        key, has_value, value = token.partition("=")
        following = tokens[index + 1] if index + 1 < len(tokens) else ""
        index += 1
        if not token.startswith("-"):
            model = model or (token if "/" in token or "-" in token else None)
            continue
        if key.lstrip("-") == "model" and not has_value and following:
            model, index = following, index + 1
            continue
        if key.lstrip("-") == "model":
            model = value
            continue
        name = flag_name(key.removeprefix("--no-").removeprefix("--no_"))
        if name in BOOL_FLAGS:
            pairs[name] = value if has_value else not key.startswith(("--no-", "--no_"))
        elif name is not None and has_value:
            pairs[name] = value
        elif name is not None and following and not following.startswith("--"):
            pairs[name], index = following, index + 1
    return model, flags_from_pairs(pairs)


_KEY_VALUE = re.compile(r"(\w+)\s*=\s*('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|[^,()\s]+)")
_QUOTED_PAIR = re.compile(r"'(\w+)'\s*:\s*('(?:[^'\\]|\\.)*'|\"[^\"]*\"|[\w.+-]+)")


def pairs_from_keywords(text: str) -> dict[str, object]:
    """`a=1, b='x', c=torch.bfloat16` as it appears in engine-config and Namespace lines."""
    pairs: dict[str, object] = {}
    for key, value in _KEY_VALUE.findall(text):
        pairs.setdefault(key, value)
    return pairs


def pairs_from_dict_text(text: str) -> dict[str, object]:
    """`{'model': 'x', 'max_model_len': 4096}`; a truncated dict falls back to a scan."""
    start = text.find("{")
    end = text.rfind("}")
    if 0 <= start < end:
        try:
            value = ast.literal_eval(text[start : end + 1])
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            value = None
        if isinstance(value, dict):
            return {str(k): v for k, v in value.items()}
    return {key: value for key, value in _QUOTED_PAIR.findall(text)}


_SHELL_STOP = re.compile(r"\s(?:\||&&|;|>|2>)\s")
_FULLWIDTH = str.maketrans(
    {"，": " ", "。": " ", "；": " ", "：": " ", "、": " ", "“": '"', "”": '"'}
)


def command_tokens(text: str) -> list[str]:
    """Tokens of a pasted shell command, from `vllm serve` or the api_server module on."""
    text = _SHELL_STOP.split(text.translate(_FULLWIDTH).replace("\\\n", " "))[0]
    match = re.search(r"vllm\s+serve\b|vllm\.entrypoints\.\S+|\bapi_server\.py\b", text)
    if match is None:
        return []
    rest = text[match.end() :]
    try:
        return shlex.split(rest)
    except ValueError:  # an unbalanced quote in a pasted fragment
        return rest.replace('"', " ").replace("'", " ").split()


def list_tokens(text: str) -> list[str]:
    """`["vllm", "serve", "M", "--tensor-parallel-size", "4"]` (Docker entrypoint / command)."""
    items = re.findall(r"[\"']([^\"']*)[\"']", text)
    if "serve" in items:
        return items[items.index("serve") + 1 :]
    return []
