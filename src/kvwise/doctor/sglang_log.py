"""What an SGLang start-up log or traceback states: its flags, its memory figures, its errors.

SGLang words its start-up as `Load weight begin. avail mem=X GB` (free memory after the TP
buffers, the base of mem_fraction_static), `Load weight end. ... avail mem=X GB, mem usage=Y GB`
(the weights), `KV Cache is allocated. #tokens: N`, `max_total_num_tokens=N, ..., context_len=C`,
and prints its resolved flags as `server_args=ServerArgs(...)`. Its "GB" are GiB
(`get_available_gpu_memory` divides by 1 << 30).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from kvwise.doctor.text import LogLine, LogText

# lines only SGLang prints (vLLM's logs have none of them)
_MARKS = re.compile(
    r"Load weight (?:begin|end)\.|KV Cache is allocated\.|Memory pool end\.|"
    r"max_total_num_tokens=|--mem-fraction-static|mem_fraction_static=|sglang\.launch_server|"
    r"sglang serve|Capture cuda graph (?:begin|end|failed)|/sglang/srt/"
)
_FIGURES = {
    "free_before_load_gib": r"Load weight begin\. avail mem=([\d.]+) GB",
    "free_after_load_gib": r"Load weight end\.[^\n]*?avail mem=([\d.]+) GB",
    "weights_gib": r"Load weight end\.[^\n]*?mem usage=([\d.]+) GB",
    "kv_tokens": r"KV Cache is allocated\.[^\n]*?#tokens: (\d+)",
    "max_total_num_tokens": r"max_total_num_tokens=(\d+)",
    "context_len": r"max_total_num_tokens=[^\n]*?context_len=(\d+)",
}
# flags as `server_args=ServerArgs(...)` prints them (resolved) and as a command states them
_ARG_KEYS = {
    "model_path": ("model_path", "model-path", "model"),
    "tp_size": ("tp_size", "tp", "tp-size", "tensor-parallel-size"),
    "mem_fraction_static": ("mem_fraction_static", "mem-fraction-static", "mem-frac"),
    "context_length": ("context_length", "context-length"),
    "chunked_prefill_size": ("chunked_prefill_size", "chunked-prefill-size"),
    "cuda_graph_max_bs": ("cuda_graph_max_bs", "cuda-graph-max-bs"),
    "max_running_requests": ("max_running_requests", "max-running-requests"),
    "kv_cache_dtype": ("kv_cache_dtype", "kv-cache-dtype"),
    "quantization": ("quantization",),
}
_VERSION = re.compile(
    r"sglang(?:[ _-]?version)?\s*(?:==|:|=|\s)\s*v?(\d+\.\d+\.\d+(?:\.post\d+)?)|"
    r"sglang:v(\d+\.\d+\.\d+(?:\.post\d+)?)|sglang-v(\d+\.\d+\.\d+(?:\.post\d+)?)",
    re.IGNORECASE,
)
_GPU = re.compile(
    r"GPU(?: \d+(?:,\d+)*)?:\s*([^\n,(]+)|"
    r"\b((?:NVIDIA )?(?:GeForce )?(?:RTX[ -]?\d{4}(?: ?Ti)?|A100|H100|H200|H20|L40S|L40|L20|L4|"
    r"A10G|A10|A800|T4|V100|B200)(?:[- ]?(?:SXM\d?|PCIe|NVL|\d+GB|HBM3))*)\b"
)


@dataclass(frozen=True)
class SglangLog:
    text: LogText
    args: dict[str, str] = field(default_factory=dict)
    figures: dict[str, float] = field(default_factory=dict)
    version: str | None = None
    gpu_names: tuple[str, ...] = ()

    def arg_int(self, name: str) -> int | None:
        value = self.args.get(name)
        return int(value) if value is not None and re.fullmatch(r"-?\d+", value) else None

    def arg_float(self, name: str) -> float | None:
        value = self.args.get(name)
        return float(value) if value is not None and re.fullmatch(r"\d*\.?\d+", value) else None

    def first(self, pattern: str) -> tuple[LogLine, re.Match[str]] | None:
        match = re.search(pattern, self.text.joined)
        return None if match is None else (self.text.line_at(match.start()), match)


def is_sglang_log(text: LogText) -> bool:
    return _MARKS.search(text.joined) is not None


def _server_args(joined: str) -> dict[str, str]:
    found = re.search(r"server_args=ServerArgs\(([^\n]*)", joined)
    if found is None:
        return {}
    pairs = re.findall(r"(\w+)=('[^']*'|\"[^\"]*\"|[^,)]+)", found.group(1))
    return {key: value.strip().strip("'\"") for key, value in pairs}


def _command_args(joined: str) -> dict[str, str]:
    pairs = re.findall(
        r"(?<![\w-])--([a-z][\w-]*)(?:[ =]+|\s*\\\s*\n\s*)([^\s\\-][^\s\\]*)", joined
    )
    return {key: value.strip("'\"") for key, value in pairs}


def _loose_args(joined: str) -> dict[str, str]:
    """`key=value` pairs quoted out of a ServerArgs line whose head was cut."""
    pairs = re.findall(r"\b([a-z_]+)=('[^']*'|[\w./-]+)", joined)
    return {key: value.strip("'") for key, value in pairs}


def _args(joined: str) -> dict[str, str]:
    sources = (_server_args(joined), _command_args(joined), _loose_args(joined))
    args: dict[str, str] = {}
    for name, spellings in _ARG_KEYS.items():
        for source in sources:  # SGLang's own resolved line wins over the command
            value = next((source[s].rstrip(".,;") for s in spellings if s in source), None)
            if value is not None and value not in ("None", "auto", ""):
                args[name] = value
                break
    return args


def _figures(joined: str) -> dict[str, float]:
    figures = {}
    for name, pattern in _FIGURES.items():
        found = re.search(pattern, joined)
        if found is not None:
            figures[name] = float(found.group(1))
    return figures


def _version(joined: str) -> str | None:
    found = _VERSION.search(joined)
    return None if found is None else next(g for g in found.groups() if g)


def parse_sglang(text: LogText) -> SglangLog:
    joined = text.joined
    names = [next(g for g in m.groups() if g).strip() for m in _GPU.finditer(joined)]
    return SglangLog(
        text, _args(joined), _figures(joined), _version(joined), tuple(dict.fromkeys(names))
    )
