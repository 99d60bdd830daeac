"""`diagnose`: from a log's bytes to a root cause, its evidence and the fix, as one `Report`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kvwise.doctor import explain, kinds
from kvwise.doctor.classify import Diagnosis, classify, oom_others
from kvwise.doctor.combine import beyond_the_knobs, combined_options
from kvwise.doctor.command import serve_command
from kvwise.doctor.figures import GIB
from kvwise.doctor.fix import FixContext, PlanFn, Prescription, choose
from kvwise.doctor.options import PRESCRIBERS, options_for
from kvwise.doctor.parse import ParsedLog, parse_log
from kvwise.doctor.resolve import Resolved, resolve
from kvwise.doctor.runtime_options import REMEDIES
from kvwise.doctor.text import read_log
from kvwise.planner import Plan, plan
from kvwise.planner.memory import CUDA_CONTEXT_BYTES


@dataclass(frozen=True)
class Report:
    diagnosis: Diagnosis
    parsed: ParsedLog
    resolved: Resolved
    prescription: Prescription | None

    def to_json(self) -> dict[str, Any]:
        prescription = self.prescription
        return {
            "kind": self.diagnosis.kind,
            "summary": self.diagnosis.summary,
            "evidence": [line.quote() for line in self.diagnosis.evidence],
            "parsed": parsed_json(self),
            "fix": None if prescription is None else fix_json(prescription),
        }


def diagnose(
    data: bytes,
    *,
    nvidia_smi: str | None = None,
    planner: PlanFn | None = plan,
    model_hint: str | None = None,
    gpu_hint: str | None = None,
    version_hint: str | None = None,
) -> Report:
    """Read a vLLM log (any bytes) and name what went wrong; never raises on the log's content."""
    parsed = parse_log(read_log(data), nvidia_smi, version_hint)
    diagnosis = classify(parsed)
    anchor = diagnosis.anchor
    # only vLLM's and PyTorch's totals: nvidia-smi's includes memory CUDA does not hand out
    total = parsed.figure("total_bytes", anchor)
    resolved = resolve(
        parsed.model(anchor),
        parsed.gpu_names,
        total,
        free_bytes=_free_bytes(parsed, anchor),
        model_hint=model_hint,
        gpu_hint=gpu_hint,
    )
    return Report(diagnosis, parsed, resolved, prescribe(diagnosis, parsed, resolved, planner))


def _free_bytes(parsed: ParsedLog, anchor: int | None) -> float | None:
    """Memory free for vLLM at start-up when the log or an nvidia-smi dump shows it."""
    free = parsed.figure("free_at_startup_bytes", anchor)
    if free is not None:
        # vLLM printed it after creating its CUDA context; the planner's free figure is the
        # card's before vLLM runs (as NVML reads it), and takes the context off itself
        return free + CUDA_CONTEXT_BYTES
    total = parsed.figure("total_bytes", anchor)
    if total is None:
        return None
    if parsed.smi.gpus and parsed.smi.gpus[0].used_bytes >= GIB:
        return total - parsed.smi.gpus[0].used_bytes
    others = oom_others(parsed)  # "Process 2291 has 1.62 GiB memory in use"
    return None if others is None else total - others.held_bytes


def prescribe(
    diagnosis: Diagnosis, parsed: ParsedLog, resolved: Resolved, planner: PlanFn | None
) -> Prescription | None:
    prescriber = PRESCRIBERS.get(diagnosis.kind)
    if prescriber is None:
        return None
    flags = parsed.flags(diagnosis.anchor)
    ctx = FixContext(diagnosis, parsed, flags, resolved.model, resolved.gpu, planner)
    options = choose(ctx, prescriber(ctx), options_for)
    # while serving, vLLM had started: a planner that says it cannot is not the one to search
    is_startup = diagnosis.kind not in kinds.RUNTIME_KINDS
    if not options and is_startup:
        options = combined_options(ctx)
    before = ctx.plan()
    notes = list(resolved.notes) if planner is not None else ["no planner available"]
    notes += _planner_disagrees(diagnosis.kind, before)
    best = options[0] if options else None
    command = None
    if best is not None and resolved.model_name:
        flags = _command_flags(parsed, diagnosis.anchor) | best.changes
        command = serve_command(resolved.model_name, flags)
    advice = best.reason if best else explain.ADVICE.get(diagnosis.kind, "")
    if best is None and is_startup and ctx.can_plan and ctx.reproduces:
        advice = beyond_the_knobs(ctx)
    return Prescription(
        options=tuple(options),
        before=before,
        command=command,
        advice=advice,
        notes=tuple(dict.fromkeys(notes + ctx.notes)),
        remedies=tuple(remedy(parsed) for remedy in _remedies(diagnosis.kind)),
    )


def _remedies(kind: str) -> list[Callable[[ParsedLog], str]]:
    remedy = REMEDIES.get(kind)
    return [] if remedy is None else [remedy]


def _planner_disagrees(kind: str, before: Plan | None) -> list[str]:
    """A note when the planner's verdict on the logged configuration is not what vLLM logged."""
    if before is None or kind not in _STARTUP_FAILURES:
        return []
    if before.error is None:
        return [
            f"the planner predicts the logged configuration starts (KV cache "
            f"{before.memory.kv_cache_bytes / GIB:.2f} GiB); vLLM's log says it did not, "
            "so the fix follows vLLM's figures"
        ]
    if before.error.kind != kind and kind in kinds.PLANNER_KINDS:
        return [
            f"for the logged configuration the planner predicts {before.error.kind} where "
            f"vLLM logged {kind}; the fix is checked against the planner"
        ]
    return []


# kinds where vLLM failed to start: a planner that predicts a start disagrees with the log
_STARTUP_FAILURES = (
    frozenset(kinds.ALL_KINDS)
    - kinds.RUNTIME_KINDS
    - {kinds.CUDA_OOM, kinds.HOST_RAM, kinds.UNKNOWN}
)


def _command_flags(parsed: ParsedLog, anchor: int | None) -> dict[str, Any]:
    """The flags the user set, plus the parallel layout vLLM resolved (needed to reproduce)."""
    flags = parsed.explicit_flags(anchor)
    resolved = parsed.flags(anchor)
    for name in ("tensor_parallel_size", "pipeline_parallel_size"):
        if resolved.get(name, 1) > 1:
            flags.setdefault(name, resolved[name])
    if not flags:  # nothing explicit: reproduce what vLLM printed that matters for memory
        for name in ("max_model_len", "gpu_memory_utilization", "max_num_seqs"):
            if name in resolved:
                flags[name] = resolved[name]
    return flags


def parsed_json(report: Report) -> dict[str, Any]:
    parsed, anchor, resolved = report.parsed, report.diagnosis.anchor, report.resolved
    figures = {}
    for name in parsed.figures:
        value = parsed.figure(name, anchor)
        if value is None or name in parsed.flags(anchor):
            continue
        key = name.replace("_bytes", "_gib")
        figures[key] = round(value / GIB, 3) if name.endswith("_bytes") else value
    return {
        "vllm_version": parsed.version,
        "engine": parsed.engine,
        "model": resolved.model_name,
        "gpu": resolved.gpu.name if resolved.gpu else (parsed.gpu_names or [None])[0],
        "gpu_memory_gib": round(resolved.gpu.memory_bytes / GIB, 2) if resolved.gpu else None,
        "flags": parsed.flags(anchor),
        "figures": figures,
        "stage": report.diagnosis.stage,
        "notes": list(resolved.notes),
    }


def fix_json(prescription: Prescription) -> dict[str, Any]:
    best = prescription.best
    return {
        "flags": dict(best.changes) if best else {},
        "command": prescription.command,
        "reason": prescription.advice,
        "plan": best.plan.to_json() if best and best.plan else None,
        "before": prescription.before.to_json() if prescription.before else None,
        "alternatives": [
            {
                "flags": dict(o.changes),
                "reason": o.reason,
                "starts": None if o.plan is None else o.plan.starts,
            }
            for o in prescription.options[1:]
        ],
        "remedies": list(prescription.remedies),
        "notes": list(prescription.notes),
    }
