"""vLLM's start-up errors, in vLLM's own words (per version), as `PlanError`s."""

from __future__ import annotations

from kvwise.core.gpus import GIB, GpuSpec
from kvwise.planner.defaults import VersionRules
from kvwise.planner.result import (
    CUDA_OOM_CUDA_GRAPH_CAPTURE,
    CUDA_OOM_PROFILE_RUN,
    CUDA_OOM_SAMPLER_WARMUP,
    HOST_RAM,
    INSUFFICIENT_FREE_MEMORY,
    MAX_MODEL_LEN_EXCEEDS_KV_CACHE,
    NO_KV_CACHE_MEMORY,
    STAGE_KV_CACHE_ALLOCATION,
    WEIGHTS_EXCEED_MEMORY,
    KvCapacity,
    PlanError,
    ResolvedFlags,
)


def _gib(value: float) -> str:
    return f"{value / GIB:.2f}"


def insufficient_free(gpu: GpuSpec, free: int, budget: int, resolved: ResolvedFlags) -> PlanError:
    return PlanError(
        INSUFFICIENT_FREE_MEMORY,
        f"ValueError: Free memory on device cuda:0 ({_gib(free)}/{_gib(gpu.memory_bytes)} GiB) on "
        f"startup is less than desired GPU memory utilization ({resolved.gpu_memory_utilization}, "
        f"{_gib(budget)} GiB). Decrease GPU memory utilization or reduce GPU memory used by "
        "other processes.",
    )


def weights_exceed(weights: int, free: int, resolved: ResolvedFlags) -> PlanError:
    ranks = resolved.tensor_parallel_size * resolved.pipeline_parallel_size
    return PlanError(
        WEIGHTS_EXCEED_MEMORY,
        f"torch.OutOfMemoryError: CUDA out of memory while loading the model: the weights take "
        f"{_gib(weights)} GiB per GPU ({ranks} GPU(s)) but only {_gib(free)} GiB are free.",
    )


def profile_run_oom(weights: int, activation: int, free: int) -> PlanError:
    return PlanError(
        CUDA_OOM_PROFILE_RUN,
        f"torch.OutOfMemoryError: CUDA out of memory during the memory profiling run: the weights "
        f"({_gib(weights)} GiB) and the profile's forward/sampler peak ({_gib(activation)} GiB) "
        f"exceed the {_gib(free)} GiB free (lower --max-num-batched-tokens, --max-num-seqs or "
        "--max-model-len).",
    )


# max_len_wording values in release order (core/data/vllm_versions.json)
WORDINGS = ("v0", "v1_gb", "v1_gib", "v1_estimate", "v1_docs", "v1_model_s")
DOCS = " See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."


def _at_least(rules: VersionRules, wording: str) -> bool:
    return WORDINGS.index(rules.max_len_wording) >= WORDINGS.index(wording)


def no_kv_cache(rules: VersionRules) -> PlanError:
    util = "`gpu_memory_utilization`"
    if _at_least(rules, "v1_model_s"):
        util += (
            " (this flag also controls CPU memory reservation on the CPU backend, despite its name)"
        )
    text = f"ValueError: No available memory for the cache blocks. Try increasing {util} when initializing the engine."
    return PlanError(NO_KV_CACHE_MEMORY, text + (DOCS if _at_least(rules, "v1_docs") else ""))


def _v1_max_len_text(
    rules: VersionRules, length: int, needed: int, available: int, estimate: int
) -> str:
    unit = "GB" if rules.max_len_wording == "v1_gb" else "GiB"
    owner = "model's" if _at_least(rules, "v1_model_s") else "models's"  # the typo is vLLM's own
    text = (
        f"ValueError: To serve at least one request with the {owner} max seq len ({length}), "
        f"({_gib(needed)} {unit} KV cache is needed, which is larger than the available KV cache "
        f"memory ({_gib(available)} {unit})."
    )
    if _at_least(rules, "v1_estimate") and estimate > 0:
        text += f" Based on the available memory, the estimated maximum model length is {estimate}."
    cpu = (
        " (which also controls CPU memory on the CPU backend)"
        if _at_least(rules, "v1_model_s")
        else ""
    )
    text += f" Try increasing `gpu_memory_utilization`{cpu} or decreasing `max_model_len` when initializing the engine."
    return text + (DOCS if _at_least(rules, "v1_docs") else "")


def max_len_exceeds(
    rules: VersionRules,
    resolved: ResolvedFlags,
    needed: int,
    available: int,
    kv: KvCapacity,
    estimate: int,
) -> PlanError:
    length = resolved.max_model_len
    if rules.max_len_wording == "v0":
        text = (
            f"ValueError: The model's max seq len ({length}) is larger than the maximum number of "
            f"tokens that can be stored in KV cache ({kv.num_gpu_blocks * kv.block_size}). Try "
            "increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing "
            "the engine."
        )
    else:
        text = _v1_max_len_text(rules, length, needed, available, estimate)
    return PlanError(MAX_MODEL_LEN_EXCEEDS_KV_CACHE, text)


def kv_allocation_oom(budget: int, free: int) -> PlanError:
    # the kind is the free-memory shortfall; the stage that fails is the pool's allocation
    return PlanError(
        INSUFFICIENT_FREE_MEMORY,
        f"torch.OutOfMemoryError: CUDA out of memory allocating the KV cache: the budget "
        f"(total x gpu_memory_utilization, {_gib(budget)} GiB) exceeds the {_gib(free)} GiB free "
        "at start-up (this vLLM release does not check free memory first).",
        STAGE_KV_CACHE_ALLOCATION,
    )


def graph_capture_oom(graphs: int, room: int) -> PlanError:
    return PlanError(
        CUDA_OOM_CUDA_GRAPH_CAPTURE,
        f"torch.OutOfMemoryError: CUDA out of memory during CUDA graph capture: the graphs need "
        f"about {_gib(graphs)} GiB beyond the budget, and only {_gib(max(room, 0))} GiB are left "
        "outside it (lower --gpu-memory-utilization, or use --enforce-eager).",
    )


def sampler_warmup_oom(resolved: ResolvedFlags) -> PlanError:
    rows = min(resolved.max_num_seqs, resolved.max_num_batched_tokens)
    return PlanError(
        CUDA_OOM_SAMPLER_WARMUP,
        f"RuntimeError: CUDA out of memory occurred when warming up sampler with {rows} dummy "
        "requests. Please try lowering `max_num_seqs` or `gpu_memory_utilization` when "
        "initializing the engine.",
    )


def host_ram(needed: int, available: int) -> PlanError:
    return PlanError(
        HOST_RAM,
        f"Killed: vLLM needs about {_gib(needed)} GiB of host RAM (processes, weight loading, "
        f"pinned swap space, CPU offload) and the machine has {_gib(available)} GiB.",
    )
