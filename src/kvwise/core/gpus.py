"""GPU specs: the catalog (`data/gpus.json`), lookup by any driver name, and NVML detection."""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cache
from typing import TYPE_CHECKING, Any

from kvwise.core.data_files import read_json
from kvwise.errors import InvalidFlagError, UnknownGpuError, UsageError

if TYPE_CHECKING:
    from kvwise.core.gpu_names import NameIndex

GIB = 2**30

# Below this CUDA compute capability no official vLLM wheel has shipped kernels: the installation
# docs say "GPU: compute capability 7.0 or higher" (v0.3.3, v0.4.0, v0.5.0, v0.6.1, v0.14.0) and
# "7.5 or higher" (v0.21.0); CMakeLists.txt CUDA_SUPPORTED_ARCHS starts at 7.0 (CUDA < 12.8) or
# 7.5 (CUDA 12.8+), and setup.py's SUPPORTED_ARCHS before it at "7.0". Pascal (6.0, 6.1) runs
# only a build made for it: vllm-project/vllm#963 (a maintainer: "just try installing vLLM from
# source"; a user ran it on a Pascal Quadro P2000 after removing setup.py's arch check, and the
# CMake arch lists above filter 6.x out the same way). The 7.5 floor of recent wheels (Volta) is
# not applied here.
OFFICIAL_VLLM_MIN_CAPABILITY = 7.0


@dataclass(frozen=True)
class GpuSpec:
    name: str
    memory_bytes: int  # total as CUDA reports it; vLLM's budget is a fraction of this
    bandwidth_bytes_s: float
    bf16_flops: float  # dense tensor-core FLOP/s
    fp8_flops: float | None  # None: no FP8 tensor cores
    compute_capability: str = "8.0"  # CUDA sm version, or the gfx target on AMD ("gfx942")
    interconnect_bytes_s: float = 32e9  # per-direction GPU-to-GPU bandwidth (PCIe or NVLink)
    free_bytes: int | None = None  # measured free memory (NVML), when known
    key: str = ""  # what --gpu takes for this catalog entry ("" for a card known only by size)

    @property
    def memory_gib(self) -> float:
        return self.memory_bytes / GIB

    @property
    def has_fp8(self) -> bool:
        return self.fp8_flops is not None

    @property
    def is_rocm(self) -> bool:
        """An AMD card: `compute_capability` holds its gfx target, not a CUDA version."""
        return self.compute_capability.startswith("gfx")

    @property
    def has_official_vllm_build(self) -> bool:
        """Whether vLLM's official wheels have kernels for this card (every ROCm target vLLM
        lists does; CUDA: compute capability 7.0 or newer)."""
        return self.is_rocm or float(self.compute_capability) >= OFFICIAL_VLLM_MIN_CAPABILITY

    @property
    def supports_bf16(self) -> bool:
        if self.is_rocm:
            return True  # every ROCm target vLLM builds for (gfx90a and newer) has bf16
        return float(self.compute_capability) >= 8.0  # CUDA: Ampere (8.0) or newer


@cache
def _catalog() -> tuple[dict[str, Any], ...]:
    return tuple(read_json("gpus.json")["gpus"])


@cache
def _by_key() -> dict[str, dict[str, Any]]:
    return {str(entry["key"]): entry for entry in _catalog()}


@cache
def _index() -> NameIndex:
    from kvwise.core.gpu_names import build_index  # driver names: not needed for a catalog key

    return build_index(_catalog())


def _from_entry(entry: dict[str, Any]) -> GpuSpec:
    fp8 = entry["fp8_tflops"]
    return GpuSpec(
        name=str(entry["name"]),
        memory_bytes=int(float(entry["memory_gib"]) * GIB),
        bandwidth_bytes_s=float(entry["bandwidth_gb_s"]) * 1e9,
        bf16_flops=float(entry["bf16_tflops"]) * 1e12,
        fp8_flops=None if fp8 is None else float(fp8) * 1e12,
        compute_capability=str(entry["compute_capability"]),
        interconnect_bytes_s=float(entry["interconnect_gb_s"]) * 1e9,
        key=str(entry["key"]),
    )


def list_gpus() -> list[GpuSpec]:
    return [_from_entry(entry) for entry in _catalog()]


def find_gpu(name: str, memory_gib: float | None = None) -> GpuSpec:
    """The catalog GPU a driver or a user names: `rtx4090`, `NVIDIA GeForce RTX 4090`,
    `NVIDIA A100-SXM4-40GB`, `AMD Instinct MI300X`. A name that fits cards of several memory
    sizes ("A100") is narrowed by `memory_gib` (the total the caller knows), else refused with
    the choices (see `kvwise.core.gpu_names`)."""
    entry = _by_key().get(name)  # a catalog key, as `kvwise gpus` lists them: no index needed
    return _from_entry(entry if entry is not None else _index().find(name, memory_gib))


def custom_gpu(memory_gib: float, like: GpuSpec | None = None) -> GpuSpec:
    """A GPU known only by its memory size (speed figures borrowed from `like`, or an RTX 4090)."""
    if not memory_gib > 0:
        raise InvalidFlagError(f"--gpu-memory-gib must be positive, got {memory_gib}")
    base = like or find_gpu("rtx4090")
    name = base.name if like else f"custom {memory_gib:g} GiB"
    key = base.key if like else ""
    return replace(base, name=name, memory_bytes=int(memory_gib * GIB), free_bytes=None, key=key)


def resolve_gpu(
    name: str | None,
    memory_gib: float | None = None,
    free_gib: float | None = None,
    *,
    detect: bool = True,
) -> GpuSpec:
    """The GPU a command's --gpu / --gpu-memory-gib / --gpu-free-gib name, or the one NVML
    finds here when none is named (with `detect`)."""
    if name:
        gpu = find_gpu(name, memory_gib)  # the memory size picks among variants ("A100")
        if memory_gib:
            gpu = custom_gpu(memory_gib, like=gpu)
    elif memory_gib:
        gpu = custom_gpu(memory_gib)
    else:
        detected = detect_gpus() if detect else []
        if not detected:
            found = " and no GPU detected" if detect else ""
            raise UsageError(
                f"no --gpu given{found}: give --gpu NAME or --gpu-memory-gib X for any other card"
            )
        gpu = detected[0]
    if free_gib is not None:
        if not 0 <= free_gib <= gpu.memory_gib:
            raise UsageError(
                f"--gpu-free-gib must be between 0 and the card's {gpu.memory_gib:.2f} GiB"
            )
        gpu = replace(gpu, free_bytes=int(free_gib * GIB))
    return gpu


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
                base = find_gpu(name, info.total / GIB)  # the total tells variants apart
            except UnknownGpuError:
                base = custom_gpu(info.total / GIB)
            found.append(replace(base, memory_bytes=int(info.total), free_bytes=int(info.free)))
        return found
    finally:
        pynvml.nvmlShutdown()


def gpu_memory() -> list[dict[str, Any]]:
    """Each local GPU's memory in use, by NVML, for the live views ([] without NVML or a GPU).
    Not exercised in CI (no GPU there): the tests feed `detect_gpus` a card instead."""
    return [
        {
            "index": index,
            "name": gpu.name,
            "total_gib": round(gpu.memory_gib, 2),
            "used_gib": round((gpu.memory_bytes - (gpu.free_bytes or 0)) / GIB, 2),
        }
        for index, gpu in enumerate(detect_gpus())
    ]
