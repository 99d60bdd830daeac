"""Warnings that go with a plan: things that will start but hurt, or that users misread."""

from __future__ import annotations

from kvwise.core.gpus import GIB, OFFICIAL_VLLM_MIN_CAPABILITY, GpuSpec
from kvwise.planner.defaults import VersionRules
from kvwise.planner.memory import NVLINK_MIN_BYTES_S
from kvwise.planner.result import Plan


def _kv_warnings(plan: Plan) -> list[str]:
    out = []
    flags, kv = plan.flags, plan.kv
    if plan.starts and kv.max_concurrency < 2:
        out.append(
            f"only {kv.max_concurrency:.2f} requests of the full max_model_len ({flags.max_model_len}) "
            "fit the KV pool at once; long requests will queue or be preempted"
        )
    if flags.kv_cache_memory_bytes is not None:
        out.append(
            "--kv-cache-memory-bytes sets the KV pool directly; gpu_memory_utilization only gates start-up"
        )
    if flags.kv_cache_dtype.startswith("fp8") and not plan.gpu.has_fp8:
        out.append(
            f"{plan.gpu.name} has no FP8 tensor cores: an fp8 KV cache halves memory but is dequantized to compute"
        )
    return out


def unofficial_build_warning(gpu: GpuSpec) -> str | None:
    """The one line for a card vLLM's official builds have no kernels for (Pascal, 6.x)."""
    if gpu.has_official_vllm_build:
        return None
    return (
        f"vLLM's official builds do not run on {gpu.name} (compute capability "
        f"{gpu.compute_capability}; no release has shipped kernels below "
        f"{OFFICIAL_VLLM_MIN_CAPABILITY:.1f}): "
        "it needs a community build or one from source patched for it, whose differences are not "
        "modelled"
    )


def _device_warnings(plan: Plan, rules: VersionRules) -> list[str]:
    out = []
    flags, mem = plan.flags, plan.memory
    unofficial = unofficial_build_warning(plan.gpu)
    if unofficial is not None:
        out.append(unofficial)
    if flags.tensor_parallel_size > 1 and plan.gpu.interconnect_bytes_s < NVLINK_MIN_BYTES_S:
        out.append(
            f"tensor parallelism over {plan.gpu.name} without NVLink: every layer's all-reduce crosses "
            "PCIe, which slows decoding; replicas per GPU may serve more"
        )
    headroom = mem.total_bytes - mem.peak_device_bytes
    if plan.starts and headroom < 0.5 * GIB:
        hint = (
            ""
            if plan.gpu.free_bytes is not None
            else ": give --gpu-free-gib with the free memory nvidia-smi shows (a Windows/WSL2 "
            "desktop holds part of the card) to have it checked"
        )
        out.append(
            f"only {headroom / GIB:.2f} GiB of the device stay outside vLLM's footprint; anything else "
            f"on the card (desktop, another process) will make start-up fail{hint}"
        )
    if not mem.cuda_graph_in_budget and not flags.enforce_eager:
        # 0.20-0.28 deduct the estimate, but Model Runner V2 estimates 0 before 0.29
        why = " (Model Runner V2 estimates none)" if rules.cuda_graph_in_budget else ""
        out.append(
            f"vLLM {rules.version} captures CUDA graphs ({mem.cuda_graph_bytes / GIB:.2f} GiB) outside "
            f"gpu_memory_utilization{why}: leave that much free beyond the budget"
        )
    return out


# packed-integer checkpoints that run on vLLM's AWQ/GPTQ Marlin kernels (and compressed-tensors
# WNA16, scheme "W4A16 ..."); FP8, FP4 and ModelOpt checkpoints run on their own kernels
MARLIN_INT_METHODS = ("awq", "gptq", "auto-round")


def _model_warnings(plan: Plan) -> list[str]:
    out = []
    quant = plan.model.quant
    is_marlin_int = quant is not None and (
        quant.method in MARLIN_INT_METHODS
        or (quant.method == "compressed-tensors" and quant.scheme.startswith("W"))
    )
    if is_marlin_int and plan.flags.dtype == "bfloat16":
        out.append("quantized kernels (AWQ/GPTQ Marlin) are tuned for float16 activations")
    if plan.model.is_hybrid:
        out.append(
            "hybrid sliding-window model: KV tokens follow vLLM's KV-cache groups, not blocks x 16"
        )
    return out


def collect_warnings(plan: Plan, rules: VersionRules) -> tuple[str, ...]:
    vision: list[str] = []
    if plan.model.vision is not None:  # its lines are vision_profile's, imported for such models
        from kvwise.planner.vision_profile import encoder_lines

        vision = encoder_lines(plan, rules)
    return tuple(
        _kv_warnings(plan) + _device_warnings(plan, rules) + _model_warnings(plan) + vision
    )
