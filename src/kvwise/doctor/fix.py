"""The smallest change that makes the logged configuration start (or stop preempting).

Each root cause has candidate changes (`options.py`). A candidate's value comes from the log's
own figures where vLLM printed them (its estimated maximum model length, the free memory it saw)
and from the planner otherwise; the planner then re-plans the configuration with the change for
the before/after numbers. The planner is a dependency passed in (`kvwise.planner.plan`), so the
reading of logs does not depend on it. Among the candidates that work, the smallest relative
change wins; the others are listed as alternatives.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from kvwise.core.flags import VllmFlags
from kvwise.core.gpus import GpuSpec
from kvwise.core.models import ModelSpec
from kvwise.doctor.classify import Diagnosis
from kvwise.doctor.command import flags_text
from kvwise.doctor.parse import ParsedLog
from kvwise.errors import KvwiseError
from kvwise.planner.result import Plan

PlanFn = Callable[..., Plan]  # kvwise.planner.plan(model, gpu, flags, *, vllm_version, num_gpus)

# a release to plan with when the log shows only the engine generation (both fitted on real logs)
ENGINE_VERSIONS = {"V0": "0.6.4", "V1": "0.19.0"}
MAX_SAFE_UTILIZATION = 0.95  # above this, CUDA graphs and allocator slack have no room left
# relative cost of a change that is not a number moving (quality or speed trade-offs)
TOGGLE_COST = {
    "kv_cache_dtype": 0.5,
    "enforce_eager": 0.5,
    "enable_chunked_prefill": 0.3,
    "cpu_offload_gb": 0.8,
    "tensor_parallel_size": 1.0,
}


@dataclass(frozen=True)
class Option:
    changes: dict[str, Any]  # vLLM flag -> new value
    reason: str
    previous: dict[str, Any] = field(default_factory=dict)  # the values the changes replace
    from_log: bool = False  # computed from vLLM's own figures: kept even if the planner disagrees
    plan: Plan | None = None  # the planner's verdict with the change (None: not re-planned)

    @property
    def cost(self) -> float:
        """Relative size of the change: |new - old| / old for numbers, a fixed price for toggles."""
        total = 0.0
        for name, value in self.changes.items():
            old = self.previous.get(name)
            if name in TOGGLE_COST:
                total += TOGGLE_COST[name]
            elif isinstance(value, (int, float)) and isinstance(old, (int, float)) and old:
                total += abs(value - old) / abs(old)
            else:
                total += 0.5
        return total


@dataclass(frozen=True)
class FixContext:
    diagnosis: Diagnosis
    parsed: ParsedLog
    flags: dict[str, Any]  # the configuration in force when it failed
    model: ModelSpec | None
    gpu: GpuSpec | None
    planner: PlanFn | None
    notes: list[str] = field(default_factory=list)

    @property
    def anchor(self) -> int | None:
        return self.diagnosis.anchor

    def figure(self, name: str) -> float | None:
        return self.parsed.figure(name, self.anchor)

    @property
    def vllm_version(self) -> str | None:
        """The logged release, else a release of the engine generation the log shows."""
        if self.parsed.version:
            return self.parsed.version
        return ENGINE_VERSIONS.get(self.parsed.engine or "")

    @property
    def can_plan(self) -> bool:
        return self.planner is not None and self.model is not None and self.gpu is not None

    def plan(self, changes: dict[str, Any] | None = None, *, quiet: bool = False) -> Plan | None:
        """The planner's verdict for the logged flags with `changes`; None when it cannot say.

        Why it cannot say becomes a note, unless `quiet` (a search that tries values the
        model may not take, such as a tensor-parallel size its heads do not divide by).
        """
        if not self.can_plan:
            return None
        assert self.planner is not None
        values = {k: v for k, v in (self.flags | (changes or {})).items() if k in _FLAG_NAMES}
        try:
            flags = VllmFlags(**values).validate()
            sampler = self.parsed.flashinfer_sampler
            return self.planner(
                self.model,
                self.gpu,
                flags,
                vllm_version=self.vllm_version,
                num_gpus=_num_gpus(values),
                # the sampler the log names (the install's, or VLLM_USE_FLASHINFER_SAMPLER)
                **({} if sampler is None else {"flashinfer_sampler": sampler}),
            )
        except (KvwiseError, ValueError, ArithmeticError) as exc:
            if quiet:
                return None
            what = flags_text(changes) if changes else "the logged flags"
            self.notes.append(f"the planner could not evaluate {what}: {exc}")
            return None

    @property
    def reproduces(self) -> bool:
        """True when the planner predicts the logged configuration fails, as the log shows.

        Only then can the planner search for the smallest change; when it predicts a start
        the log contradicts, its searches would return "no change" and are not used.
        """
        before = self.plan()
        return before is not None and not before.starts

    def with_changes(self, changes: dict[str, Any]) -> FixContext:
        return replace(self, flags=self.flags | changes)

    def starts(self, changes: dict[str, Any]) -> bool | None:
        plan = self.plan(changes)
        return None if plan is None else plan.starts

    def resolved(self, name: str, fallback: Any = None) -> Any:
        """A flag as logged, else as the planner resolves its default, else `fallback`."""
        if name in self.flags:
            return self.flags[name]
        before = self.plan()
        return getattr(before.flags, name, fallback) if before is not None else fallback


_FLAG_NAMES = frozenset(VllmFlags.__dataclass_fields__)


def _num_gpus(flags: dict[str, Any]) -> int:
    return int(flags.get("tensor_parallel_size") or 1) * int(
        flags.get("pipeline_parallel_size") or 1
    )


@dataclass(frozen=True)
class Prescription:
    options: tuple[Option, ...]  # best first
    before: Plan | None
    command: str | None  # `vllm serve MODEL ...` with the fix; None without a change or a model
    advice: str  # what to do, in words (the best option's reason, or advice no flag can carry)
    notes: tuple[str, ...]
    remedies: tuple[str, ...] = ()  # what no vLLM flag carries (the gateway in front of vLLM)

    @property
    def best(self) -> Option | None:
        return self.options[0] if self.options else None


Completion = Callable[["FixContext", str], list[Option]]


def choose(ctx: FixContext, candidates: list[Option], complete: Completion) -> list[Option]:
    """Re-plan each candidate, smallest change first; keep only those the planner says start.

    A value taken from vLLM's own figures that the planner says fails with a *different* error
    (the next check vLLM would hit) gets a second change for that failure from `complete`, and
    the pair is kept if it starts. Without a planner (model or GPU unknown) nothing can be
    re-planned: only values from vLLM's own figures are kept, and a note says so.
    """
    kept = []
    for option in candidates:
        if not ctx.can_plan:
            if option.from_log:
                kept.append(option)
            continue
        plan = ctx.plan(option.changes)
        if plan is None:
            continue
        if plan.starts:
            kept.append(replace(option, plan=plan))
            continue
        if option.from_log and plan.error is not None and plan.error.kind != ctx.diagnosis.kind:
            pair = _completed(ctx, option, plan.error.kind, complete)
            if pair is not None:
                kept.append(pair)
    if kept and not ctx.can_plan:
        ctx.notes.append(
            "the change is vLLM's own arithmetic from the log and was not re-planned: the "
            "planner needs the model and the GPU (pass --model and --gpu)"
        )
    return sorted(kept, key=lambda option: option.cost)


def _completed(ctx: FixContext, first: Option, kind: str, complete: Completion) -> Option | None:
    alone = ctx.plan(first.changes)
    for second in sorted(complete(ctx.with_changes(first.changes), kind), key=lambda o: o.cost):
        if set(second.changes) & set(first.changes):
            continue
        changes = _rescaled(ctx, first.changes | second.changes, first, alone)
        plan = ctx.plan(changes)
        if plan is not None and plan.starts:
            reason = (
                f"{_reason_with(first.reason, changes)}; with that alone the planner predicts "
                f"{kind}, so also {second.reason}"
            )
            return Option(changes, reason, first.previous | second.previous, True, plan)
    return None


def _rescaled(
    ctx: FixContext, changes: dict[str, Any], first: Option, alone: Plan | None
) -> dict[str, Any]:
    """A max_model_len read from vLLM's KV capacity, shrunk as the second change shrinks it.

    vLLM's logged capacity is the truth at the logged settings; the planner supplies only the
    ratio by which the second change (usually a lower utilization) shrinks the KV cache.
    """
    length = first.changes.get("max_model_len")
    both = ctx.plan(changes)
    if length is None or alone is None or both is None or not alone.kv.tokens:
        return changes
    ratio = both.kv.tokens / alone.kv.tokens
    if ratio >= 1:
        return changes
    return changes | {"max_model_len": int(length * ratio) // 256 * 256}


def _reason_with(reason: str, changes: dict[str, Any]) -> str:
    length = changes.get("max_model_len")
    if length is None or f"{length:,}" in reason:
        return reason
    return f"lower --max-model-len to {length:,} ({reason.split(': ', 1)[-1]}, less what the next change takes)"
