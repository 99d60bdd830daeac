"""The command a fix prints: `vllm serve MODEL --flag value ...`, in vLLM's spelling of each flag.

Without a model name (the log names none and no `--model` was given) only the flags are printed,
to be added to the command the user ran: a placeholder such as `<MODEL>` is never printed.
"""

from __future__ import annotations

import shlex
from typing import Any


def flag_words(flags: dict[str, Any]) -> list[str]:
    """`--max-model-len 8192 --enforce-eager ...`, one word per item, as vLLM's CLI takes them."""
    words: list[str] = []
    for name, value in flags.items():
        flag = "--" + name.replace("_", "-")
        if isinstance(value, bool):
            if value:
                words.append(flag)
            elif name in ("enable_prefix_caching", "enable_chunked_prefill"):
                words.append("--no-" + flag[2:])
        elif name == "kv_cache_memory_bytes":
            words += [flag, _size_text(int(value))]
        elif name == "max_model_len" and value == -1:
            words += [flag, "auto"]
        else:
            words += [flag, f"{value:g}" if isinstance(value, float) else str(value)]
    return words


def flags_text(flags: dict[str, Any]) -> str:
    return " ".join(shlex.quote(word) for word in flag_words(flags))


def serve_command(model: str, flags: dict[str, Any]) -> str:
    """`vllm serve MODEL --flag value ...`."""
    return " ".join(shlex.quote(word) for word in ["vllm", "serve", model, *flag_words(flags)])


def _size_text(value: int) -> str:
    for unit, size in (("G", 2**30), ("M", 2**20)):
        if value % size == 0:
            return f"{value // size}{unit}"
    return str(value)
