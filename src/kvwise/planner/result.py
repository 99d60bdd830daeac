"""The planner's output: what vLLM would log and decide at start-up, per GPU, in bytes."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from kvwise.core.gpus import GIB, GpuSpec
from kvwise.core.models import ModelSpec

# error.kind values (the brief's vocabulary)
MAX_MODEL_LEN_EXCEEDS_KV_CACHE = "max_model_len_exceeds_kv_cache"
NO_KV_CACHE_MEMORY = "no_kv_cache_memory"
INSUFFICIENT_FREE_MEMORY = "insufficient_free_memory_at_startup"
WEIGHTS_EXCEED_MEMORY = "weights_exceed_memory"
CUDA_OOM_SAMPLER_WARMUP = "cuda_oom_sampler_warmup"
CUDA_OOM_CUDA_GRAPH_CAPTURE = "cuda_oom_cuda_graph_capture"
CUDA_OOM_PROFILE_RUN = "cuda_oom_profile_run"  # the dummy forward pass that measures activations
HOST_RAM = "host_ram"


@dataclass(frozen=True)
class ResolvedFlags:
    """Every memory-relevant vLLM flag with the value vLLM would use (defaults resolved)."""

    gpu_memory_utilization: float
    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    kv_cache_dtype: str
    dtype: str
    quantization: str | None
    tensor_parallel_size: int
    pipeline_parallel_size: int
    enforce_eager: bool
    block_size: int
    enable_prefix_caching: bool
    enable_chunked_prefill: bool
    kv_cache_memory_bytes: int | None = None
    cpu_offload_gb: float = 0.0
    swap_space: float = 0.0
    num_gpu_blocks_override: int | None = None
    enable_lora: bool = False
    max_loras: int | None = None  # None: vLLM's default (as the user left it)
    max_lora_rank: int | None = None
    max_cpu_loras: int | None = None
    lora_dtype: str | None = None
    limit_mm_per_prompt: str | None = None  # as the user gave it (vision_profile.py parses it)
    extra_args: tuple[str, ...] = ()  # flags not modelled, passed through as pasted


@dataclass(frozen=True)
class MemoryBreakdown:
    """Bytes per GPU, as vLLM's start-up log itemises them."""

    total_bytes: int  # device memory as CUDA reports it
    budget_bytes: int  # total x gpu_memory_utilization
    weights_bytes: int
    activation_peak_bytes: int  # transient peak of the profile run (incl. the sampler pass)
    non_torch_bytes: int  # charged non-torch growth (cuBLAS/attention workspaces, NCCL buffers)
    cuda_graph_bytes: int  # graph pool; inside the budget or on top of it, per version
    kv_cache_bytes: int
    cuda_graph_in_budget: bool
    peak_device_bytes: int  # what the process holds after start-up (context + budget or beyond)


@dataclass(frozen=True)
class KvCapacity:
    bytes_per_token: int  # per GPU (per rank), summed over that rank's attention layers
    block_size: int
    bytes_per_block: int
    num_gpu_blocks: int  # as vLLM logs it (includes the null block)
    tokens: int  # "GPU KV cache size: N tokens"
    max_concurrency: float  # "Maximum concurrency for max_model_len tokens per request"
    blocks_per_request: int  # blocks one max_model_len request needs (all KV groups)


# The start-up stage each failure happens at, in vLLM's order (both engines: free-memory check
# (V1 0.9.1+), load weights, profile run, size and allocate the KV cache, capture CUDA graphs,
# V1's sampler warm-up); the names are `kvwise doctor`'s stages (doctor/kinds.py).
STAGE_STARTUP_CHECK = "startup_free_memory_check"
STAGE_WEIGHTS = "weights"
STAGE_PROFILE_RUN = "profile_run"
STAGE_KV_CACHE_ALLOCATION = "kv_cache_allocation"
STAGE_CUDA_GRAPH_CAPTURE = "cuda_graph_capture"
STAGE_SAMPLER_WARMUP = "sampler_warmup"
STAGE_OF_KIND = {
    INSUFFICIENT_FREE_MEMORY: STAGE_STARTUP_CHECK,
    WEIGHTS_EXCEED_MEMORY: STAGE_WEIGHTS,
    HOST_RAM: STAGE_WEIGHTS,  # the host runs out while the weights are read and loaded
    CUDA_OOM_PROFILE_RUN: STAGE_PROFILE_RUN,
    NO_KV_CACHE_MEMORY: STAGE_KV_CACHE_ALLOCATION,
    MAX_MODEL_LEN_EXCEEDS_KV_CACHE: STAGE_KV_CACHE_ALLOCATION,
    CUDA_OOM_CUDA_GRAPH_CAPTURE: STAGE_CUDA_GRAPH_CAPTURE,
    CUDA_OOM_SAMPLER_WARMUP: STAGE_SAMPLER_WARMUP,
}


@dataclass(frozen=True)
class PlanError:
    kind: str
    message: str  # in vLLM's own words where vLLM raises it
    stage: str = ""  # the start-up stage that fails; "" takes the kind's (STAGE_OF_KIND)

    def __post_init__(self) -> None:
        if not self.stage:
            object.__setattr__(self, "stage", STAGE_OF_KIND[self.kind])


@dataclass(frozen=True)
class Plan:
    model: ModelSpec
    gpu: GpuSpec
    num_gpus: int
    vllm_version: str
    engine: str  # "V0" or "V1"
    flags: ResolvedFlags
    memory: MemoryBreakdown
    kv: KvCapacity
    error: PlanError | None
    host_ram_bytes: int
    warnings: tuple[str, ...]
    setup_not_modelled: tuple[str, ...] = ()  # parts of this set-up (not the model) not sized
    verdict_not_modelled: str | None = None  # "not modelled: …" where start/fail is not known
    vllm_use_v1: bool | None = None  # VLLM_USE_V1 as the user set it (None: unset)
    flashinfer_sampler: bool | None = None  # the V1 sampler as the user stated it (None: default)

    @property
    def starts(self) -> bool:
        """vLLM starts, as far as kvwise can tell (False where the verdict is not modelled)."""
        return self.error is None and self.verdict_not_modelled is None

    @property
    def not_modelled(self) -> tuple[str, ...]:
        """Parts of vLLM's memory for this plan that kvwise does not model, each named exactly;
        the figures above stand without them (a part that would dominate is refused instead)."""
        return self.model.not_modelled + self.setup_not_modelled

    def to_json(self) -> dict[str, Any]:
        """The brief's JSON contract (GiB at the edge, rounded to 3 decimals)."""
        mem = self.memory

        def gib(value: int) -> float:
            return round(value / GIB, 3)

        return {
            "model": self.model.model_id,
            "gpu": {
                "name": self.gpu.name,
                "memory_gib": gib(self.gpu.memory_bytes),
                "count": self.num_gpus,
            },
            "vllm_version": self.vllm_version,
            "engine": self.engine,
            "flags": asdict(self.flags),
            "memory_gib": {
                "total": gib(mem.total_bytes),
                "budget": gib(mem.budget_bytes),
                "weights": gib(mem.weights_bytes),
                "activation_peak": gib(mem.activation_peak_bytes),
                "non_torch": gib(mem.non_torch_bytes),
                "cuda_graph": gib(mem.cuda_graph_bytes),
                "kv_cache": gib(mem.kv_cache_bytes),
                "cuda_graph_in_budget": mem.cuda_graph_in_budget,
                "peak_device": gib(mem.peak_device_bytes),
            },
            "kv": {
                "bytes_per_token": self.kv.bytes_per_token,
                "block_size": self.kv.block_size,
                "num_gpu_blocks": self.kv.num_gpu_blocks,
                "tokens": self.kv.tokens,
                "max_concurrency": round(self.kv.max_concurrency, 2),
            },
            "starts": self.starts,
            "verdict_not_modelled": self.verdict_not_modelled,
            "error": None if self.error is None else asdict(self.error),
            "host_ram_gib": gib(self.host_ram_bytes),
            "warnings": list(self.warnings),
            "not_modelled": list(self.not_modelled),
        }
