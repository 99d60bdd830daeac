"""The smallest SGLang flag change that fixes what the log shows, re-planned with `plan_sglang`.

Each candidate is a change to SGLang's own flags; the planner (planner/sglang) is run with the
log's flags and with the change, and a candidate is kept only when the re-plan starts and clears
the failure: a KV pool for `no_kv_cache_memory`, a pool that holds the rejected prompt for
`context_length_exceeded`, the release default's room outside the pool for out-of-memory errors.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from kvwise.core.flags import VllmFlags
from kvwise.core.gpus import GIB, GpuSpec
from kvwise.core.models import ModelSpec
from kvwise.doctor import kinds
from kvwise.doctor.sglang_diagnose import SglangDiagnosis
from kvwise.doctor.sglang_log import SglangLog
from kvwise.errors import KvwiseError
from kvwise.planner.memory import CUDA_CONTEXT_BYTES
from kvwise.planner.sglang import SglangFlags, SglangPlan, plan_sglang, sglang_command
from kvwise.planner.sglang.pool import tp_buffers_bytes

FRACTION_STEP = 0.01
MAX_FRACTION = 0.95  # SGLang's docs tune the fraction up in 0.01 steps; past 0.95 nothing is left
MAX_TP = 8  # GPUs in one node
PlanWith = Callable[..., SglangPlan]


@dataclass(frozen=True)
class SglangFix:
    change: str  # the flags to change, in SGLang's words
    before: SglangPlan
    after: SglangPlan
    command: str = ""  # the launch command with the change


def log_flags(log: SglangLog, version: str | None) -> tuple[VllmFlags, SglangFlags]:
    flags = VllmFlags(
        tensor_parallel_size=log.arg_int("tp_size"),
        max_model_len=log.arg_int("context_length"),
        kv_cache_dtype=_kv_dtype(log.args.get("kv_cache_dtype")),
    )
    sglang = SglangFlags(
        version=version or log.version,
        mem_fraction_static=log.arg_float("mem_fraction_static"),
        chunked_prefill_size=log.arg_int("chunked_prefill_size"),
        cuda_graph_max_bs=log.arg_int("cuda_graph_max_bs"),
        max_running_requests=log.arg_int("max_running_requests"),
    )
    return flags, sglang


def _kv_dtype(value: str | None) -> str | None:
    return "fp8" if value and value.startswith("fp8") else None


def gpu_as_logged(gpu: GpuSpec, log: SglangLog, tp: int) -> GpuSpec:
    """The card with the free memory SGLang logged before loading, when it did."""
    free_gib = log.figures.get("free_before_load_gib")
    if free_gib is None:
        return gpu
    free = int(free_gib * GIB) + CUDA_CONTEXT_BYTES + tp_buffers_bytes(gpu, tp)
    return replace(gpu, free_bytes=min(free, gpu.memory_bytes))


def _fraction_fix(base: SglangPlan, plan_with: PlanWith, need_tokens: int) -> SglangFix | None:
    fraction = round(base.mem_fraction_static + FRACTION_STEP, 2)
    while fraction <= MAX_FRACTION:
        after = plan_with(mem_fraction_static=fraction)
        if after.starts and after.max_total_num_tokens >= need_tokens:
            return SglangFix(f"--mem-fraction-static {fraction:.2f}", base, after)
        fraction = round(fraction + FRACTION_STEP, 2)
    return None


def _tp_fix(base: SglangPlan, plan_tp: PlanWith) -> SglangFix | None:
    """More GPUs when no fraction leaves room: the smallest --tp (2, 4, 8) that starts."""
    tp = base.tp * 2
    while tp <= MAX_TP:
        after = plan_tp(tp)
        if after.starts:
            return SglangFix(f"--tp {tp} ({tp} GPUs like this one)", base, after)
        tp *= 2
    return None


def _headroom_fix(base: SglangPlan, plan_with: PlanWith, default: SglangPlan) -> SglangFix | None:
    planned = base.fix  # the plan predicts the OOM: the largest fraction that leaves start-up room
    if planned is not None and planned.mem_fraction_static is not None:
        fraction = planned.mem_fraction_static
        after = plan_with(mem_fraction_static=fraction)
        if after.starts:
            return SglangFix(f"--mem-fraction-static {fraction:.2f}", base, after)
    if base.mem_fraction_static > default.mem_fraction_static + 1e-6:
        change = f"--mem-fraction-static {default.mem_fraction_static:.3f}"
        return SglangFix(change + " (this release's default)", base, default)
    smaller_bs = max(1, base.cuda_graph_max_bs // 2)
    if smaller_bs < base.cuda_graph_max_bs:
        after = plan_with(cuda_graph_max_bs=smaller_bs)
        return SglangFix(f"--cuda-graph-max-bs {smaller_bs}", base, after)
    return None


def prescribe_sglang(
    diagnosis: SglangDiagnosis,
    model: ModelSpec,
    gpu: GpuSpec,
    flags: VllmFlags,
    sglang: SglangFlags,
) -> SglangFix | None:
    def plan_with(**changes: Any) -> SglangPlan:
        return plan_sglang(model, gpu, flags, replace(sglang, **changes))

    def plan_tp(tp: int) -> SglangPlan:
        # a logged fraction equal to the release's default is the default: it moves with TP
        at_tp = replace(flags, tensor_parallel_size=tp)
        base, default = plan_with(), plan_with(mem_fraction_static=None)
        if abs(base.mem_fraction_static - default.mem_fraction_static) < 1e-3:
            return plan_sglang(model, gpu, at_tp, replace(sglang, mem_fraction_static=None))
        return plan_sglang(model, gpu, at_tp, sglang)

    try:
        fix = _prescribe(diagnosis, plan_with)
        if fix is None and diagnosis.kind == kinds.NO_KV_CACHE_MEMORY:
            fix = _tp_fix(plan_with(), plan_tp)
    except KvwiseError:
        return None
    if fix is None:
        return None
    changed = replace(sglang, mem_fraction_static=fix.after.mem_fraction_static)
    if fix.after.cuda_graph_max_bs != fix.before.cuda_graph_max_bs:
        changed = replace(changed, cuda_graph_max_bs=fix.after.cuda_graph_max_bs)
    after_flags = replace(flags, tensor_parallel_size=fix.after.tp)
    return replace(fix, command=sglang_command(fix.after, after_flags, changed))


def _prescribe(diagnosis: SglangDiagnosis, plan_with: PlanWith) -> SglangFix | None:
    base = plan_with()
    if diagnosis.kind == kinds.NO_KV_CACHE_MEMORY:
        # a pool for one full-length request, else any pool at all
        full = _fraction_fix(base, plan_with, base.context_length)
        return full or _fraction_fix(base, plan_with, 1)
    if diagnosis.kind in (kinds.CONTEXT_LENGTH, kinds.PREEMPTION):
        # the pool must hold the prompt plus the 6 tokens SGLang keeps back (tp_worker.py)
        prompt = diagnosis.prompt_tokens or base.max_total_num_tokens + 1
        return _fraction_fix(base, plan_with, prompt + 6)
    if diagnosis.kind in (kinds.CUDA_OOM_CUDA_GRAPH_CAPTURE, kinds.CUDA_OOM):
        return _headroom_fix(base, plan_with, plan_with(mem_fraction_static=None))
    return None
