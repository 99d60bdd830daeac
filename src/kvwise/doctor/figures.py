"""vLLM's start-up figures, in every wording from V0 0.4 to V1 0.33.

Each entry of `PATTERNS` names a figure and the regular expression that finds it; sizes become
bytes (vLLM's "GB" in `Loading model weights took %.4f GB` divides by 2**30, so it is GiB).
Several wordings feed the same figure; `Occurrence` remembers the line each value came from.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kvwise.doctor.text import LogLine, LogText

GIB = 2**30
_UNITS = {"gib": GIB, "gb": GIB, "g": GIB, "mib": 2**20, "mb": 2**20, "kib": 2**10, "kb": 2**10}
_NUM = r"(?P<v>-?\d+(?:\.\d+)?)"
_SIZE = _NUM + r"\s*(?P<u>GiB|GB|MiB|MB|KiB)?"
_INT = r"(?P<v>\d[\d,]*)"


@dataclass(frozen=True)
class Occurrence:
    value: float
    line: LogLine


# figure -> patterns; `v` is the value, `u` its unit (GiB when absent)
PATTERNS: dict[str, tuple[str, ...]] = {
    "weights_bytes": (
        r"Loading model weights took\s+" + _SIZE,  # V0
        r"Model loading took\s+" + _SIZE,  # V1
        r"model weights take\s+" + _SIZE,  # V0 0.6.5+ profiling line (and its table form)
        r"weights memory:\s*" + _SIZE,  # V1 DEBUG profiler line
    ),
    "activation_peak_bytes": (
        r"PyTorch activation peak memory(?: takes)?\s+" + _SIZE,
        r"torch peak memory increase:\s*" + _SIZE,
    ),
    "peak_torch_bytes": (r"peak_torch_memory=" + _SIZE,),  # V0 0.6.4: includes the weights
    "non_torch_bytes": (
        r"non_torch_memory(?: takes|=)?\s*" + _SIZE,
        r"non-torch forward increase memory:\s*" + _SIZE,
    ),
    "kv_cache_bytes": (
        r"the rest of the memory reserved for KV Cache is\s+" + _SIZE,
        r"Available KV cache memory:\s*" + _SIZE,
        r"available_kv_cache_memory\s+" + _SIZE,
        r"kv_cache_size=" + _SIZE,
        r"available KV cache memory \(" + _SIZE + r"\)",
    ),
    "total_bytes": (
        r"total_gpu_memory\s*(?:[=(]\s*)?" + _SIZE,
        r"has a total capaci?ty of\s+" + _SIZE,  # PyTorch 2.1 prints "capacty"
        r"Free memory on device[^()\n]*\(\s*-?[\d.]+\s*/\s*" + _SIZE + r"\s*\)",
    ),
    "budget_bytes": (
        r"gpu_memory_utilization \([\d.]+\)\s*=\s*" + _SIZE,
        r"the current vLLM instance can use\s+" + _SIZE,
        r"desired GPU memory utilization \([\d.]+,\s*" + _SIZE,
        r"Desired GPU memory utilization is \([\d.]+,\s*" + _SIZE,
    ),
    "free_at_startup_bytes": (r"Free memory on device[^()\n]*\(\s*" + _SIZE + r"\s*/",),
    "cuda_graph_bytes": (
        r"Graph capturing finished in\s+\d+(?:\.\d+)?\s*secs?,\s*took\s+" + _SIZE,
        r"CUDA graph pool memory:\s*" + _SIZE + r"\s*\(actual\)",
    ),
    "cuda_graph_estimate_bytes": (r"Estimated CUDA graph memory:\s*" + _SIZE,),
    "total_non_kv_bytes": (r"Total non KV cache memory:\s*" + _SIZE,),
    # "... max seq len (N), (X GiB KV cache is needed": anchored on its literal start for speed
    "kv_needed_bytes": (r"max seq len \(\d+\),?\s*\(?" + _SIZE + r"\s+KV cache is needed",),
    "gpu_memory_utilization": (
        r"gpu_memory_utilization\s*(?:=|\()\s*" + _NUM,
        r"gpu_memory_utilization\s+" + _NUM + r"(?![\d.]*\s*GiB)",
        r"desired GPU memory utilization \(" + _NUM,
        r"Desired GPU memory utilization is \(" + _NUM,
    ),
    "num_gpu_blocks": (
        r"GPU blocks:\s*" + _INT,
        r"cuda blocks:\s*" + _INT,
        r"num_gpu_blocks is:\s*" + _INT,
        r"with num_gpu_blocks_override=" + _INT,
    ),
    "num_cpu_blocks": (r"# CPU blocks:\s*" + _INT,),
    "kv_cache_tokens": (
        r"GPU KV cache size:\s*" + _INT + r"\s*tokens",
        r"tokens that can be stored in KV cache \(" + _INT + r"\)",
    ),
    "max_concurrency": (r"Maximum concurrency for\s+[\d,]+\s+tokens per request:\s*" + _NUM,),
    "max_model_len": (
        r"Maximum concurrency for\s+" + _INT + r"\s+tokens per request",
        r"max seq len \(" + _INT + r"\)",
        r"Using max model len\s+" + _INT,
        r"max_seq_len=" + _INT,
    ),
    "estimated_max_model_len": (r"estimated maximum model length is\s+" + _INT,),
    "max_num_seqs": (
        r"warming up sampler with\s+" + _INT + r"\s+dummy requests",
        r"Defaulting max_num_seqs to\s+" + _INT,
    ),
    "max_num_batched_tokens": (r"Chunked prefill is enabled with max_num_batched_tokens=" + _INT,),
    "block_size": (r"(?:Setting|Forcing) kv cache block size to\s+" + _INT,),
}


def flexible(pattern: str) -> str:
    """Let each space also match a line break: pasted errors are often wrapped."""
    return pattern if "(?<" in pattern else pattern.replace(" ", r"\s+")


_COMPILED = {name: tuple(re.compile(flexible(p)) for p in pats) for name, pats in PATTERNS.items()}


def _value(match: re.Match[str], name: str) -> float:
    number = float(match["v"].replace(",", ""))
    if not name.endswith("_bytes"):
        return number
    unit = (match.groupdict().get("u") or "GiB").lower()
    return number * _UNITS[unit]


def find_figures(log: LogText) -> dict[str, tuple[Occurrence, ...]]:
    """Every occurrence of every figure, in log order."""
    found: dict[str, list[tuple[int, Occurrence]]] = {}
    for name, patterns in _COMPILED.items():
        for pattern in patterns:
            for match in pattern.finditer(log.joined):
                occurrence = Occurrence(_value(match, name), log.line_at(match.start()))
                found.setdefault(name, []).append((match.start(), occurrence))
    return {
        name: tuple(occ for _, occ in sorted(items, key=lambda item: item[0]))
        for name, items in found.items()
    }
