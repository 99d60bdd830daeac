"""GPU specs: the catalog (`data/gpus.json`), lenient name matching, and NVML detection."""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources

from kvwise.errors import InvalidFlagError, UnknownGpuError

GIB = 2**30


@dataclass(frozen=True)
class GpuSpec:
    name: str
    memory_bytes: int  # total as CUDA reports it; vLLM's budget is a fraction of this
    bandwidth_bytes_s: float
    bf16_flops: float  # dense tensor-core FLOP/s
    fp8_flops: float | None  # None: no FP8 tensor cores
    compute_capability: str = "8.0"
    interconnect_bytes_s: float = 32e9  # per-direction GPU-to-GPU bandwidth (PCIe or NVLink)
    free_bytes: int | None = None  # measured free memory (NVML), when known
    memory_source: str = ""

    @property
    def memory_gib(self) -> float:
        return self.memory_bytes / GIB

    @property
    def has_fp8(self) -> bool:
        return self.fp8_flops is not None

    @property
    def supports_bf16(self) -> bool:
        # bf16 needs compute capability 8.0 (Ampere) or newer
        return float(self.compute_capability) >= 8.0


def _normalize(name: str) -> str:
    text = name.lower().replace("nvidia", "").replace("geforce", "").replace("tesla", "")
    return re.sub(r"[^a-z0-9]", "", text)


@cache
def _catalog() -> tuple[dict[str, object], ...]:
    raw = resources.files("kvwise.core").joinpath("data/gpus.json").read_text()
    return tuple(json.loads(raw)["gpus"])


def _from_entry(entry: dict[str, object]) -> GpuSpec:
    fp8 = entry.get("fp8_tflops")
    return GpuSpec(
        name=str(entry["name"]),
        memory_bytes=int(float(str(entry["memory_gib"])) * GIB),
        bandwidth_bytes_s=float(str(entry["bandwidth_gb_s"])) * 1e9,
        bf16_flops=float(str(entry["bf16_tflops"])) * 1e12,
        fp8_flops=None if fp8 is None else float(str(fp8)) * 1e12,
        compute_capability=str(entry["compute_capability"]),
        interconnect_bytes_s=float(str(entry.get("interconnect_gb_s", 32))) * 1e9,
        memory_source=str(entry.get("memory_source", "")),
    )


def list_gpus() -> list[GpuSpec]:
    return [_from_entry(entry) for entry in _catalog()]


def _keys(entry: dict[str, object]) -> list[str]:
    aliases = entry.get("aliases") or []
    assert isinstance(aliases, list)
    return [_normalize(str(entry["name"]))] + [_normalize(str(a)) for a in aliases]


def find_gpu(name: str) -> GpuSpec:
    """Match a catalog GPU leniently: `rtx4090`, `NVIDIA GeForce RTX 4090`, `H100-PCIe-80GB`."""
    wanted = _normalize(name)
    if not wanted:
        raise UnknownGpuError("empty GPU name")
    by_key = {key: entry for entry in _catalog() for key in _keys(entry)}
    if wanted in by_key:
        return _from_entry(by_key[wanted])
    # Longest alias contained in the given name: "h100pcie80gbhbm2e" -> "h100pcie"; short
    # aliases ("l4") only as a prefix, so "l44cards" is an L4 but "a100l4x" is not
    contained = [
        key for key in by_key if (len(key) >= 3 and key in wanted) or wanted.startswith(key)
    ]
    if contained:
        return _from_entry(by_key[max(contained, key=len)])
    close = difflib.get_close_matches(wanted, list(by_key), n=3, cutoff=0.5)
    names = sorted({str(by_key[k]["name"]) for k in close}) or [str(e["name"]) for e in _catalog()]
    raise UnknownGpuError(
        f"unknown GPU {name!r}; closest catalog entries: {', '.join(names)} "
        "(or give --gpu-memory-gib for any other card)"
    )


def custom_gpu(memory_gib: float, like: GpuSpec | None = None) -> GpuSpec:
    """A GPU known only by its memory size (speed figures borrowed from `like`, or an RTX 4090)."""
    if not memory_gib > 0:
        raise InvalidFlagError(f"--gpu-memory-gib must be positive, got {memory_gib}")
    base = like or find_gpu("rtx4090")
    name = base.name if like else f"custom {memory_gib:g} GiB"
    return GpuSpec(
        name=name,
        memory_bytes=int(memory_gib * GIB),
        bandwidth_bytes_s=base.bandwidth_bytes_s,
        bf16_flops=base.bf16_flops,
        fp8_flops=base.fp8_flops,
        compute_capability=base.compute_capability,
        interconnect_bytes_s=base.interconnect_bytes_s,
        memory_source="--gpu-memory-gib",
    )


def detect_gpus() -> list[GpuSpec]:
    """GPUs on this machine through NVML, with the memory other processes already hold.

    Returns [] when NVML (nvidia-ml-py) or a driver is absent. Not exercised in CI: the CI
    machines have no GPU, so only the absent path runs there.
    """
    try:
        import pynvml
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return []
    try:
        found = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            name = pynvml.nvmlDeviceGetName(handle)
            name = name.decode() if isinstance(name, bytes) else str(name)
            info = pynvml.nvmlDeviceGetMemoryInfo(handle)
            try:
                base = find_gpu(name)
            except UnknownGpuError:
                base = custom_gpu(info.total / GIB)
            found.append(
                GpuSpec(
                    name=base.name,
                    memory_bytes=int(info.total),
                    bandwidth_bytes_s=base.bandwidth_bytes_s,
                    bf16_flops=base.bf16_flops,
                    fp8_flops=base.fp8_flops,
                    compute_capability=base.compute_capability,
                    interconnect_bytes_s=base.interconnect_bytes_s,
                    free_bytes=int(info.free),
                    memory_source="NVML",
                )
            )
        return found
    finally:
        pynvml.nvmlShutdown()
