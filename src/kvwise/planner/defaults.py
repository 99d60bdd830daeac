"""vLLM's defaults and rules for a given release: the flag values vLLM would fill in.

The rules are data (`core/data/vllm_versions.json`): each rule set applies from its `since`
release on, later sets only list what changed. `resolve_flags` turns the user's flags into the
full set vLLM would run with on this GPU, and rejects combinations vLLM itself rejects.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from typing import Any

from kvwise.core.data_files import read_json
from kvwise.core.flags import VllmFlags
from kvwise.core.gpus import GIB, GpuSpec
from kvwise.core.models import SLIDING, ModelSpec
from kvwise.core.quant import QUANTIZATION_FLAGS
from kvwise.errors import InvalidFlagError, UnsupportedHardwareError
from kvwise.planner.result import ResolvedFlags

DEFAULT_BLOCK_SIZE = 16  # CacheConfig.DEFAULT_BLOCK_SIZE on CUDA
V0_CHUNKED_PREFILL_ABOVE = 32768  # V0 turns chunked prefill on for max_model_len > 32K


@dataclass(frozen=True)
class BatchTier:
    """A row of vLLM's default batch sizes: the first row whose conditions hold applies."""

    mnbt: int
    mns: int
    min_gib: float = 0.0
    names: tuple[str, ...] = ()  # GPU name must contain one of these (empty: any)
    exclude: tuple[str, ...] = ()  # GPU names that never match the row

    def matches(self, gpu: GpuSpec) -> bool:
        name = gpu.name.upper()
        if self.names and not any(n.upper() in name for n in self.names):
            return False
        if any(n.upper() in name for n in self.exclude):
            return False
        return gpu.memory_bytes / GIB >= self.min_gib


@dataclass(frozen=True)
class VersionRules:
    version: str
    engine: str  # "V0" or "V1"
    default_gpu_memory_utilization: float
    accounting: str  # "per_instance" or "global" (util caps all memory on the device)
    startup_free_check: bool  # V1 >= 0.9.1: free memory must cover total x util
    cuda_graph_in_budget: bool  # V1 runner: the graph estimate is deducted from the budget (0.20+)
    graph_estimate_in_v2_runner: bool  # Model Runner V2 estimates its graphs (0.29+; 0 before)
    batch_tiers: tuple[BatchTier, ...]
    v0_chunked_mnbt: int  # V0 max_num_batched_tokens default with chunked prefill on
    v0_auto_chunked_prefill: bool  # V0 turns chunked prefill on above 32K context
    v0_auto_chunked_prefill_off_for: tuple[str, ...]  # set-ups that keep it off (see below)
    v0_multimodal_min_mnbt: int  # _MULTIMODAL_MODEL_MAX_NUM_BATCHED_TOKENS (V0 profile batch)
    v0_interleaved_window_caps_len: bool  # gemma-2 style models capped to the window (<= 0.6.4)
    tokens_formula: str  # how "GPU KV cache size" is computed
    max_len_wording: str  # wording of the max_model_len error
    null_block_in_check: bool  # fit checks use available - 1 block (0.29+)
    default_swap_space_gib: float
    chunked_prefill: str  # "v0" (optional) or "always"
    default_prefix_caching: bool
    cuda_graph_sizes: str  # "v0", "v1_step8_512", "v1_step8", "v1_step16"
    cudagraph_mode: str  # "piecewise" or "full_and_piecewise"
    gpt_oss_max_capture_size: int  # GptOssForCausalLMConfig's largest capture size (0: none)
    sampler_bytes_per_logit: float  # the dummy sampler pass, per (request x vocab)
    v1_flashinfer_sampler: bool  # V1 runner samples top-k/top-p with FlashInfer (0.10.2+)
    v2_runner: str  # which models get Model Runner V2 by default (see memory.uses_v2_runner)
    v2_runner_archs: tuple[str, ...]  # DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES of the release
    v2_profile_sampler_tensors: tuple[str, ...]  # [rows, vocab] tensors at V2's profile sampler
    v2_warmup_sampler_tensors: tuple[str, ...]  # and at its warmup_kernels sampler step
    hybrid_kv_groups: bool  # sliding and full layers in separate KV-cache groups (V1 0.9.1+)
    distributed_init_before_snapshot: bool  # NCCL and custom all-reduce set up before it (0.11+)
    lora_extra_vocab_size: int  # extra LoRA vocabulary rows per adapter (0 from 0.12)
    lora_max_ranks: tuple[int, ...]  # LoRAConfig's allowed --max-lora-rank values
    has_kv_cache_memory_bytes: bool
    kv_cache_dtypes: tuple[str, ...]  # --kv-cache-dtype choices of the release
    has_auto_max_model_len: bool
    auto_dtype_avoids_bf16: bool  # dtype "auto" falls back to fp16 where bf16 is unsupported
    hybrid_default_prefix_caching: bool  # prefix caching on by default for mamba hybrids (0.26+)
    mamba_prefix_cache_mode: str  # mamba_cache_mode prefix caching sets (see kv_mamba.py)


def parse_version(text: str) -> tuple[int, int, int]:
    match = re.match(r"^\s*v?(\d+)\.(\d+)(?:\.(\d+))?", text)
    if not match:
        raise InvalidFlagError(f"--vllm-version {text!r} is not a version like 0.19.0")
    major, minor, patch = match.groups()
    return int(major), int(minor), int(patch or 0)


@cache
def _rules_data() -> dict[str, Any]:
    data: dict[str, Any] = read_json("vllm_versions.json")
    return data


def latest_version() -> str:
    return str(_rules_data()["latest"])


def _merged(version: str) -> dict[str, Any]:
    wanted = parse_version(version)
    merged: dict[str, Any] = {}
    for rule in _rules_data()["rules"]:
        if parse_version(rule["since"]) <= wanted:
            merged |= rule
    if not merged:
        first = _rules_data()["rules"][0]["since"]
        raise InvalidFlagError(f"vLLM {version} predates the releases kvwise models (>= {first})")
    return merged


def _tier(raw: dict[str, Any]) -> BatchTier:
    return BatchTier(
        mnbt=int(raw["mnbt"]),
        mns=int(raw["mns"]),
        min_gib=float(raw.get("min_gib", 0.0)),
        names=tuple(raw.get("names", ())),
        exclude=tuple(raw.get("exclude", ())),
    )


def _to_rules(version: str, merged: dict[str, Any]) -> VersionRules:
    fields = {k: v for k, v in merged.items() if k not in ("since", "evidence")}
    fields["batch_tiers"] = tuple(_tier(tier) for tier in fields["batch_tiers"])
    fields["v2_runner_archs"] = tuple(fields["v2_runner_archs"])
    for name in ("v2_profile_sampler_tensors", "v2_warmup_sampler_tensors"):
        fields[name] = tuple(fields[name])
    fields["kv_cache_dtypes"] = tuple(fields["kv_cache_dtypes"])
    fields["v0_auto_chunked_prefill_off_for"] = tuple(fields["v0_auto_chunked_prefill_off_for"])
    fields["lora_max_ranks"] = tuple(fields["lora_max_ranks"])
    return VersionRules(version=version, **fields)


def rules_for(version: str | None) -> VersionRules:
    """The accounting rules of a vLLM release (the latest known one when None)."""
    version = version or latest_version()
    return _to_rules(version, _merged(version))


# Rules decided by vllm/config.py and the argument parser, whichever engine runs
_CONFIG_LEVEL_RULES = (
    "default_gpu_memory_utilization",
    "kv_cache_dtypes",
    "lora_max_ranks",
    "lora_extra_vocab_size",
    "auto_dtype_avoids_bf16",
    "has_kv_cache_memory_bytes",
    "has_auto_max_model_len",
)


def engine_rules(
    rules: VersionRules, gpu: GpuSpec, flags: VllmFlags, use_v1: bool | None = None
) -> VersionRules:
    """vLLM 0.8-0.10 silently fall back to the V0 engine for some set-ups.

    `use_v1`: the user's VLLM_USE_V1 (None: unset). 0.8.0-0.10.1
    `engine/arg_utils.py:EngineArgs.create_engine_config`: 0 runs V0; unset falls back to V0
    where `_is_v1_supported_oracle` says no; 1 makes that fallback an error (`_raise_or_fallback`).
    """
    wanted = parse_version(rules.version)
    if use_v1 is not None and not ((0, 8) <= wanted < (0, 10, 2)):
        raise InvalidFlagError(
            f"VLLM_USE_V1 chooses the engine on vLLM 0.8.0-0.10.1 only; {rules.version} runs "
            f"{rules.engine} alone (kvwise models V1 from 0.8.0, V0 until 0.10.1)"
        )
    if rules.engine != "V1" or wanted >= (0, 10, 2):
        return rules
    old_gpu = not gpu.supports_bf16  # compute capability < 8.0 (V100, T4): V0 until 0.10.1
    unsupported = (
        "Compute Capability < 8.0"
        if old_gpu
        else None
        if _v1_takes_kv_cache_dtype(flags, gpu, wanted)
        else "--kv-cache-dtype"
    )
    if use_v1 and unsupported:
        raise InvalidFlagError(
            f"NotImplementedError: VLLM_USE_V1=1 is not supported with {unsupported}."
        )
    if use_v1 is False or unsupported:
        v0 = _merged(_rules_data()["last_v0_default"])
        release = _merged(rules.version)
        # the engine's accounting is V0's; what vllm/config.py and the argument parser decide
        # (dtype, flag choices, defaults) is still this release's
        return _to_rules(rules.version, v0 | {k: release[k] for k in _CONFIG_LEVEL_RULES})
    return rules


def _v1_takes_kv_cache_dtype(flags: VllmFlags, gpu: GpuSpec, wanted: tuple[int, ...]) -> bool:
    """Whether V1 0.8.0-0.10.1 runs this --kv-cache-dtype rather than falling back to V0.

    `engine/arg_utils.py:EngineArgs._is_v1_supported_oracle` ("No Fp8 KV cache so far"): any
    dtype but auto falls back unless FlashAttention 3 takes fp8 (`fa_utils.flash_attn_supports_fp8`:
    FA version 3 on compute capability 9.x, Hopper) or, from 0.10.0, the card is compute
    capability 10.0 (`platforms/cuda.py:is_kv_cache_dtype_supported`, absent at 0.9.2). Read at
    0.8.5, 0.9.0.1, 0.9.2, 0.10.0, 0.10.1 and 0.10.1.1. ROCm takes every dtype from 0.9.0
    (`current_platform.is_rocm()` there; 0.10.1 `platforms/rocm.py:is_kv_cache_dtype_supported`).
    """
    if (flags.kv_cache_dtype or "auto") == "auto":
        return True
    if gpu.is_rocm:
        return wanted >= (0, 9, 0)
    if gpu.compute_capability.startswith("9."):
        return True
    return wanted >= (0, 10, 0) and gpu.compute_capability == "10.0"


def _batch_defaults(rules: VersionRules, gpu: GpuSpec) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) defaults of `vllm serve` before clamping."""
    for tier in rules.batch_tiers:
        if tier.matches(gpu):
            return tier.mnbt, tier.mns
    raise AssertionError("the last batch tier has no conditions")


def _runtime_dtype(model: ModelSpec, flags: VllmFlags, gpu: GpuSpec, rules: VersionRules) -> str:
    requested = {"half": "float16", "float": "float32"}.get(flags.dtype or "", flags.dtype)
    if requested in (None, "auto") and rules.auto_dtype_avoids_bf16:
        # 0.9.1+ config.py:_resolve_auto_dtype: the checkpoint's dtype where the platform
        # supports it, else the platform's first choice (fp16 before compute capability 8.0)
        if model.dtype == "float32" or (model.dtype == "bfloat16" and not gpu.supports_bf16):
            return "bfloat16" if gpu.supports_bf16 else "float16"
        return model.dtype
    if requested in (None, "auto"):
        # <= 0.9.0 config.py:_get_and_verify_dtype: fp32 checkpoints become fp16, others keep
        # their dtype, and the worker's _check_if_gpu_supports_dtype refuses bf16 below 8.0
        requested = "float16" if model.dtype == "float32" else model.dtype
    if requested == "bfloat16" and not gpu.supports_bf16:
        raise InvalidFlagError(
            f"Bfloat16 is only supported on GPUs with compute capability of at least 8.0. "
            f"Your {gpu.name} GPU has compute capability {gpu.compute_capability}. "
            "Use --dtype float16 instead."
        )
    assert requested is not None
    return requested


def _check_parallel(model: ModelSpec, tp: int) -> None:
    if model.num_attention_heads % tp:
        raise InvalidFlagError(
            f"Total number of attention heads ({model.num_attention_heads}) must be divisible "
            f"by tensor parallel size ({tp})."
        )
    kv = model.num_kv_heads
    if (kv >= tp and kv % tp) or (kv < tp and tp % kv):
        raise InvalidFlagError(
            f"--tensor-parallel-size {tp} does not divide the {kv} KV heads of {model.model_id} "
            "(and is not a multiple of them)"
        )


def _check_quantization(
    model: ModelSpec, flags: VllmFlags, gpu: GpuSpec, version: str
) -> str | None:
    method = flags.quantization
    if model.quant is not None:
        method = method or model.quant.method
    elif method not in (None, "fp8", "bitsandbytes"):
        # only fp8 and bitsandbytes quantize a 16-bit checkpoint while loading
        raise InvalidFlagError(
            f"--quantization {method} needs a checkpoint quantized with {method}; "
            f"{model.model_id} is not (use a quantized variant, or --quantization fp8)"
        )
    _check_quant_capability(method, gpu, version)
    return method


@cache
def _quant_capability_rules() -> list[dict[str, Any]]:
    return list(read_json("quant_capability.json")["rules"])


def min_capability(method: str, version: str) -> int | None:
    """The compute capability (x10) vLLM `version` needs for `method`; None: not checked."""
    wanted = parse_version(version)
    found: int | None = None
    for rule in _quant_capability_rules():
        if parse_version(rule["since"]) <= wanted and method in rule["min_capability"]:
            found = int(rule["min_capability"][method])
    return found


def _check_quant_capability(method: str | None, gpu: GpuSpec, version: str) -> None:
    """vLLM's start-up check of the card against the quantization kernels (in its words)."""
    if method is None or gpu.is_rocm:
        return
    needed = min_capability(method, version)
    have = round(float(gpu.compute_capability) * 10)
    if needed is not None and have < needed:
        raise UnsupportedHardwareError(
            f"The quantization method {method} is not supported for the current GPU. Minimum "
            f"capability: {needed}. Current capability: {have}. ({gpu.name}; vLLM {version})"
        )


def _derived_max_len(model: ModelSpec, rules: VersionRules) -> tuple[str, int]:
    """vLLM's derived max_model_len and the config key it came from (_get_and_verify_max_len)."""
    derived = ("max_position_embeddings", model.max_position_embeddings)
    if rules.v0_interleaved_window_caps_len and model.is_hybrid and model.sliding_window:
        # ModelConfig (V0 <= 0.6.4): interleaved sliding window unsupported, so the window is
        # disabled and the length capped to it ("capping the max length to the sliding window")
        return min(derived, ("sliding_window", model.sliding_window), key=lambda kv: kv[1])
    return derived


def _max_model_len(model: ModelSpec, flags: VllmFlags, rules: VersionRules) -> int:
    key, derived = _derived_max_len(model, rules)
    wanted = flags.max_model_len
    if wanted is None:
        return derived
    if wanted != -1 and wanted > derived:
        raise InvalidFlagError(
            f"User-specified max_model_len ({wanted}) is greater than the derived max_model_len "
            f"({key}={derived} in model's config.json). Set "
            "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 in vLLM to override (at your own risk)."
        )
    return wanted  # -1 ("auto") is resolved by the planner once the KV pool is known


def _check_version_flags(flags: VllmFlags, rules: VersionRules) -> None:
    kv_dtype = flags.kv_cache_dtype or "auto"
    if kv_dtype not in rules.kv_cache_dtypes:
        raise InvalidFlagError(
            f"--kv-cache-dtype {kv_dtype} does not exist in vLLM {rules.version} "
            f"(choices: {', '.join(rules.kv_cache_dtypes)})"
        )
    if flags.kv_cache_memory_bytes is not None and not rules.has_kv_cache_memory_bytes:
        raise InvalidFlagError(
            f"--kv-cache-memory-bytes does not exist in vLLM {rules.version} (added in 0.10.2)"
        )
    if flags.max_model_len == -1 and not rules.has_auto_max_model_len:
        raise InvalidFlagError(
            f"--max-model-len auto does not exist in vLLM {rules.version} (added in 0.14.0)"
        )


# EngineArgs.create_engine_config (V0, 0.5.3+): the set-ups that keep chunked prefill off even
# above 32K context, each as `model, flags -> bool`
_CHUNKED_PREFILL_BLOCKERS = {
    "sliding_window": lambda model, flags: SLIDING in model.attention_layer_types,
    "lora": lambda model, flags: bool(flags.enable_lora),
    "prefix_caching": lambda model, flags: bool(flags.enable_prefix_caching),
    "multimodal": lambda model, flags: model.vision is not None,
}


def _v0_auto_chunked_prefill(
    model: ModelSpec, flags: VllmFlags, rules: VersionRules, length: int
) -> bool:
    if not rules.v0_auto_chunked_prefill or length <= V0_CHUNKED_PREFILL_ABOVE:
        return False
    blockers = rules.v0_auto_chunked_prefill_off_for
    return not any(_CHUNKED_PREFILL_BLOCKERS[name](model, flags) for name in blockers)


@dataclass(frozen=True)
class _SchedulerLimits:
    enable_chunked_prefill: bool
    max_num_seqs: int
    max_num_batched_tokens: int


def _scheduler_limits(
    model: ModelSpec, gpu: GpuSpec, flags: VllmFlags, rules: VersionRules, length: int
) -> _SchedulerLimits:
    """SchedulerConfig's chunked prefill, max_num_seqs and max_num_batched_tokens."""
    if rules.chunked_prefill == "always":
        chunked = True
    elif flags.enable_chunked_prefill is not None:
        chunked = flags.enable_chunked_prefill
    else:
        chunked = _v0_auto_chunked_prefill(model, flags, rules, length)
    mnbt, mns = _batch_defaults(rules, gpu)
    if rules.engine == "V0" and model.vision is not None:
        mnbt = max(mnbt, rules.v0_multimodal_min_mnbt)  # room for one item's multimodal tokens
    max_num_seqs = flags.max_num_seqs or mns
    batched = flags.max_num_batched_tokens
    if batched is None and rules.engine == "V0":
        # V0: a fixed chunk with chunked prefill, else a whole prompt must fit one step
        batched = rules.v0_chunked_mnbt if chunked else max(length, mnbt)
    elif batched is None:
        batched = min(max_num_seqs * length, mnbt)
    if flags.max_num_seqs is None:
        max_num_seqs = min(max_num_seqs, batched)
    return _SchedulerLimits(chunked, max_num_seqs, batched)


def _check_scheduler_limits(limits: _SchedulerLimits, length: int) -> None:
    batched, max_num_seqs = limits.max_num_batched_tokens, limits.max_num_seqs
    if batched < max_num_seqs:
        raise InvalidFlagError(
            f"max_num_batched_tokens ({batched}) must be greater than or equal to max_num_seqs ({max_num_seqs})."
        )
    if not limits.enable_chunked_prefill and batched < length:
        raise InvalidFlagError(
            f"max_num_batched_tokens ({batched}) is smaller than max_model_len ({length}). "
            "This effectively limits the maximum sequence length to max_num_batched_tokens and "
            "makes vLLM reject longer sequences. Please increase max_num_batched_tokens or "
            "decrease max_model_len."
        )


def resolve_flags(
    model: ModelSpec, gpu: GpuSpec, flags: VllmFlags, rules: VersionRules
) -> ResolvedFlags:
    flags.validate()
    _check_version_flags(flags, rules)
    tp = flags.tensor_parallel_size or 1
    pp = flags.pipeline_parallel_size or 1
    _check_parallel(model, tp)
    max_model_len = _max_model_len(model, flags, rules)
    length = _derived_max_len(model, rules)[1] if max_model_len == -1 else max_model_len
    limits = _scheduler_limits(model, gpu, flags, rules, length)
    _check_scheduler_limits(limits, length)
    kv_dtype = flags.kv_cache_dtype or "auto"
    return ResolvedFlags(
        gpu_memory_utilization=flags.gpu_memory_utilization or rules.default_gpu_memory_utilization,
        max_model_len=max_model_len,
        max_num_seqs=limits.max_num_seqs,
        max_num_batched_tokens=limits.max_num_batched_tokens,
        kv_cache_dtype=kv_dtype,
        dtype=_runtime_dtype(model, flags, gpu, rules),
        quantization=_check_quantization(model, flags, gpu, rules.version),
        tensor_parallel_size=tp,
        pipeline_parallel_size=pp,
        enforce_eager=bool(flags.enforce_eager),
        block_size=flags.block_size or DEFAULT_BLOCK_SIZE,
        enable_prefix_caching=(
            _default_prefix_caching(model, rules)
            if flags.enable_prefix_caching is None
            else flags.enable_prefix_caching
        ),
        enable_chunked_prefill=limits.enable_chunked_prefill,
        kv_cache_memory_bytes=flags.kv_cache_memory_bytes,
        cpu_offload_gb=flags.cpu_offload_gb or 0.0,
        swap_space=rules.default_swap_space_gib if flags.swap_space is None else flags.swap_space,
        num_gpu_blocks_override=flags.num_gpu_blocks_override,
        enable_lora=bool(flags.enable_lora),
        max_loras=flags.max_loras,
        max_lora_rank=flags.max_lora_rank,
        max_cpu_loras=flags.max_cpu_loras,
        lora_dtype=flags.lora_dtype,
        limit_mm_per_prompt=flags.limit_mm_per_prompt,
        extra_args=flags.extra_args or (),
    )


def _default_prefix_caching(model: ModelSpec, rules: VersionRules) -> bool:
    # config/model.py:ModelConfig.is_prefix_caching_supported: off for mamba / linear-attention
    # hybrids until 0.25, on from 0.26
    if model.mamba is not None:
        return rules.default_prefix_caching and rules.hybrid_default_prefix_caching
    return rules.default_prefix_caching


def quant_for(model: ModelSpec, resolved: ResolvedFlags) -> Any:
    """The weight layout vLLM will hold: the checkpoint's own, or one applied while loading."""
    if model.quant is not None or resolved.quantization is None:
        return model.quant
    return QUANTIZATION_FLAGS[resolved.quantization]


def default_flags(model: ModelSpec, gpu: GpuSpec, version: str | None) -> ResolvedFlags:
    """What vLLM picks when no flag is given: the reference for printing only what changed."""
    rules = engine_rules(rules_for(version), gpu, VllmFlags())
    return resolve_flags(model, gpu, VllmFlags(), rules)
