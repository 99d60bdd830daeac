"""`kvwise plan --engine sglang`: will SGLang start, and how many KV tokens does its pool hold."""

from __future__ import annotations

from dataclasses import dataclass

from kvwise.core.flags import VllmFlags
from kvwise.core.gpus import GIB, GpuSpec
from kvwise.core.models import ModelSpec
from kvwise.planner import memory
from kvwise.planner.defaults import resolve_flags, rules_for
from kvwise.planner.kv import kv_dtype_bytes
from kvwise.planner.result import ResolvedFlags
from kvwise.planner.sglang.fraction import FractionInputs, default_fraction, defaults_for
from kvwise.planner.sglang.outside import (
    OutsideFix,
    OutsideNeed,
    largest_fraction,
    largest_graph_bs,
    outside_need,
    shorter_context,
)
from kvwise.planner.sglang.pool import (
    cell_bytes,
    derived_context_len,
    max_running_requests,
    pre_load_free_bytes,
)
from kvwise.planner.sglang.releases import (
    MIB,
    MultimodalRule,
    SglangRelease,
    applies_vlm_factor,
    input_reserved_tokens,
    multimodal_rule,
    release_for,
)

INPUT_RESERVED_TOKENS = input_reserved_tokens()


@dataclass(frozen=True)
class SglangFlags:
    """SGLang's own flags that vLLM's set does not carry (None: SGLang's default)."""

    version: str | None = None
    mem_fraction_static: float | None = None
    chunked_prefill_size: int | None = None
    cuda_graph_max_bs: int | None = None
    max_running_requests: int | None = None


@dataclass(frozen=True)
class SglangPlan:
    model: ModelSpec
    gpu: GpuSpec
    tp: int
    family: str
    mem_fraction_static: float
    fraction_is_default: bool
    chunked_prefill_size: int
    cuda_graph_max_bs: int
    context_length: int
    weights_bytes: int
    pre_load_free_bytes: int
    static_bytes: int  # mem_fraction_static x multimodal_scale x free memory before loading
    kv_bytes: int
    max_total_num_tokens: int
    max_running_requests: int
    error: str | None
    warnings: tuple[str, ...]
    not_modelled: tuple[str, ...]
    # what start-up allocates after the pool (request table, attention buffers, CUDA graphs)
    outside: OutsideNeed | None = None
    fix: OutsideFix | None = None  # flag changes that make a start-up OOM fit
    # what SGLang multiplies mem_fraction_static by for a multimodal model, the flag's value
    # included (model_runner.py up to 0.4.8); 1.0 otherwise
    multimodal_scale: float = 1.0

    @property
    def starts(self) -> bool:
        return self.error is None


# weights are sized as vLLM loads them (core/weights.py): one public SGLang log shows the gap
WEIGHTS_NOTE = (
    "SGLang's own weight loading: weights are sized as vLLM loads them (QwQ-32B at TP 4: "
    "SGLang logged 15.54 GiB per GPU, kvwise plans 15.27)"
)


def _not_modelled(model: ModelSpec, adjusted_for_vision: bool) -> tuple[str, ...]:
    # the model's notes about vLLM's own passes (encoder profiling, MoE backends) do not
    # apply to SGLang; what remains for SGLang is how its loader sizes the weights
    notes = [note for note in model.not_modelled if "vLLM" not in note]
    if len(notes) < len(model.not_modelled):
        notes.append(WEIGHTS_NOTE)
    if model.mamba is not None:
        notes.append(
            "SGLang's mamba state pool (handle_max_mamba_cache) taken from the same budget"
        )
    if model.sliding_window is not None and model.is_hybrid:
        notes.append(
            "SGLang's sliding-window pool (swa_full_tokens_ratio); every layer counted full"
        )
    if adjusted_for_vision:
        notes.append(
            "the vision-size factor (0.8-1.05) of adjust_mem_fraction_for_vlm; only its 0.95 is applied"
        )
    return tuple(notes)


def _multimodal_note(
    release: SglangRelease, rule: MultimodalRule | None, fraction: float
) -> tuple[str, ...]:
    """What a user sees in SGLang's log when it lowers the --mem-fraction-static in use."""
    if rule is None or not rule.given_too:
        return ()
    used = fraction * rule.factor
    return (
        f"SGLang {release.family} sizes the pool with {used:.3f}, not --mem-fraction-static "
        f"{fraction:g}, for a multimodal model (x{rule.factor}: 'Automatically reduce "
        f"--mem-fraction-static to {used:.3f} because this is a multimodal model')",
    )


def max_input_tokens(tokens: int, context: int) -> int:
    """The longest prompt SGLang accepts: TpModelWorker's max_req_input_len."""
    return min(context - 1, tokens - 1) - INPUT_RESERVED_TOKENS


def _error(release: SglangRelease, fraction: float, weights: int, free: int) -> str:
    minimum = weights / free  # SGLang's own: 1 - available after loading / available before
    return release.error_text.format(fraction=round(fraction, 3), minimum=minimum)


def _capture_fix(
    release: SglangRelease,
    inputs: FractionInputs,
    need: OutsideNeed,
    sizes: tuple[int, int, int],
    pool: tuple[int, int, int | None],
    scale: float,
) -> OutsideFix:
    """Each change that alone leaves start-up its room: the largest fraction (two decimals) that
    still leaves a KV pool, the largest --cuda-graph-max-bs, the longest --context-length. The
    fraction is the flag's value: SGLang multiplies it by `scale` (multimodal, up to 0.4.8)."""
    free, static, weights = sizes
    room = free - static
    fraction: float | None = largest_fraction(free, need.at_start, scale)
    if fraction is not None and fraction * scale * free <= weights:
        fraction = None  # no fraction leaves both a KV pool and this room
    bs: int | None = largest_graph_bs(room, need)
    if not need.graphs or bs is None or not 1 <= bs < inputs.cuda_graph_max_bs:
        bs = None
    return OutsideFix(fraction, bs, shorter_context(release, inputs, pool, room))


def _capture_error(release: SglangRelease, need: OutsideNeed, room: int, fix: OutsideFix) -> str:
    """SGLang's own message for an out-of-memory error after the pool, with kvwise's figures."""
    text = release.data.get("capture_error_text", "torch.cuda.OutOfMemoryError: CUDA out of memory")
    flags = fix.flags()
    return (
        f"{text}\n(kvwise: {room / GIB:.2f} GiB is left outside the static pool; start-up needs "
        f"{need.at_start / GIB:.2f} GiB there: request table {need.req_to_token / GIB:.2f}, "
        f"attention buffers {need.attention / GIB:.2f}, CUDA graphs "
        f"{(need.graphs + need.piecewise) / GIB:.2f}; "
        + (f"fix: {flags})" if flags else "no single flag change makes it fit)")
    )


def _warnings(
    tokens: int, context: int, headroom: int, default: tuple[int, float]
) -> tuple[str, ...]:
    reserve, default_fraction_value = default
    notes = []
    if 0 < tokens < context:
        # the scheduler caps the prompt at the pool and starts
        notes.append(
            f"the KV pool holds {tokens:,} tokens, fewer than --context-length {context}: SGLang "
            "starts but rejects longer prompts ('Input length (N tokens) exceeds the maximum "
            f"allowed length ({max_input_tokens(tokens, context)} tokens)')"
        )
    if headroom < reserve:
        notes.append(
            f"{headroom / GIB:.2f} GiB is left outside the static pool for activations and CUDA "
            f"graphs, less than the {reserve / GIB:.2f} GiB this release's default "
            f"(--mem-fraction-static {default_fraction_value:.3f}) leaves: if prefill or graph "
            "capture runs out of memory, lower --mem-fraction-static towards that default"
        )
    return tuple(notes)


def _fraction_inputs(
    model: ModelSpec, gpu: GpuSpec, resolved: ResolvedFlags, sglang: SglangFlags
) -> tuple[SglangRelease, FractionInputs]:
    """The release and what its default fraction depends on (chunk and graph sizes included)."""
    release = release_for(sglang.version)
    tp, pp = resolved.tensor_parallel_size, resolved.pipeline_parallel_size
    gpu_mib = gpu.memory_bytes / MIB
    chunk, graph_bs = defaults_for(
        release, gpu_mib, tp, sglang.chunked_prefill_size, sglang.cuda_graph_max_bs
    )
    rule = _multimodal(model, sglang)
    on_default = rule.factor if rule is not None and not rule.given_too else 1.0
    inputs = FractionInputs(gpu_mib, tp, pp, chunk, graph_bs, model.mla is not None, on_default)
    return release, inputs


def _multimodal(model: ModelSpec, sglang: SglangFlags) -> MultimodalRule | None:
    return multimodal_rule(sglang.version) if model.vision is not None else None


def plan_sglang(
    model: ModelSpec, gpu: GpuSpec, flags: VllmFlags, sglang: SglangFlags | None = None
) -> SglangPlan:
    sglang = sglang or SglangFlags()
    resolved = resolve_flags(model, gpu, flags, rules_for(None))
    release, inputs = _fraction_inputs(model, gpu, resolved, sglang)
    rule = _multimodal(model, sglang)
    # up to 0.4.8 model_runner scales the fraction in use, a given one too, for multimodal models
    scale = rule.factor if rule is not None and rule.given_too else 1.0
    default = default_fraction(release, inputs)
    given = sglang.mem_fraction_static
    fraction = given or default  # the flag's value; SGLang sizes the pool with fraction x scale
    weights = memory.weights_bytes(model, resolved)
    free = pre_load_free_bytes(gpu, inputs.tp, release)
    static = int(fraction * scale * free)
    cell = cell_bytes(model, inputs.tp, kv_dtype_bytes(resolved.kv_cache_dtype, resolved.dtype))
    tokens = max(static - weights, 0) // cell
    given_context = flags.max_model_len is not None and flags.max_model_len > 0
    context = resolved.max_model_len if given_context else derived_context_len(model)
    is_default = sglang.mem_fraction_static is None
    need = outside_need(release, inputs, tokens, context, sglang.max_running_requests)
    error, fix = None, None
    if tokens <= 0:
        error = _error(release, fraction, weights, free)
    elif free - static < need.at_start:
        pool = (tokens, context, sglang.max_running_requests)
        fix = _capture_fix(release, inputs, need, (free, static, weights), pool, scale)
        error = _capture_error(release, need, free - static, fix)
    return SglangPlan(
        model,
        gpu,
        inputs.tp,
        release.family,
        fraction,
        is_default,
        inputs.chunked_prefill_size,
        inputs.cuda_graph_max_bs,
        context,
        weights,
        free,
        static,
        max(static - weights, 0),
        tokens,
        sglang.max_running_requests or max_running_requests(max(tokens, 1), context, release),
        error,
        _warnings(tokens, context, free - static, (free - int(default * scale * free), default))
        + _multimodal_note(release, rule, fraction),
        _not_modelled(
            model, is_default and model.vision is not None and applies_vlm_factor(sglang.version)
        ),
        need,
        fix,
        scale,
    )
