"""The smallest change that makes the logged configuration start (or stop preempting).

Each root cause has candidate changes (`options.py`). A candidate's value comes from the log's
own figures where vLLM printed them (its estimated maximum model length, the free memory it saw)
and from the planner otherwise; the planner then re-plans the configuration with the change for
the before/after numbers. The planner is a dependency passed in (`kvwise.planner.plan`), so the
reading of logs does not depend on it. Among the candidates that work, the smallest relative
change wins; the others are listed as alternatives.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from kvwise.core.flags import VllmFlags
from kvwise.core.gpus import GpuSpec
from kvwise.core.models import ModelSpec
from kvwise.doctor.classify import Diagnosis
from kvwise.doctor.parse import ParsedLog
from kvwise.errors import KvwiseError
from kvwise.planner.result import Plan

PlanFn = Callable[..., Plan]  # kvwise.planner.plan(model, gpu, flags, *, vllm_version, num_gpus)

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
    def can_plan(self) -> bool:
        return self.planner is not None and self.model is not None and self.gpu is not None

    def plan(self, changes: dict[str, Any] | None = None) -> Plan | None:
        """The planner's verdict for the logged flags with `changes`; None when it cannot say."""
        if not self.can_plan:
            return None
        assert self.planner is not None
        values = {k: v for k, v in (self.flags | (changes or {})).items() if k in _FLAG_NAMES}
        try:
            flags = VllmFlags(**values).validate()
            return self.planner(
                self.model,
                self.gpu,
                flags,
                vllm_version=self.parsed.version,
                num_gpus=_num_gpus(values),
            )
        except (KvwiseError, ValueError, ArithmeticError) as exc:
            self.notes.append(f"the planner could not evaluate {changes or 'the logged flags'}: {exc}")
            return None

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
    return int(flags.get("tensor_parallel_size") or 1) * int(flags.get("pipeline_parallel_size") or 1)


@dataclass(frozen=True)
class Prescription:
    options: tuple[Option, ...]  # best first
    before: Plan | None
    command: str
    advice: str  # what to do, in words (the best option's reason, or advice no flag can carry)
    notes: tuple[str, ...]

    @property
    def best(self) -> Option | None:
        return self.options[0] if self.options else None


def choose(ctx: FixContext, candidates: list[Option]) -> list[Option]:
    """Re-plan each candidate; drop those the planner refutes (unless vLLM's own figures gave
    the value), smallest change first."""
    kept = []
    for option in candidates:
        plan = ctx.plan(option.changes)
        if plan is not None and not plan.starts:
            if not option.from_log:
                continue
            ctx.notes.append(
                f"the planner still predicts {plan.error.kind if plan.error else 'a failure'} "
                f"with {option.changes}; vLLM's own figures say it fits"
            )
        kept.append(replace(option, plan=plan))
    return sorted(kept, key=lambda option: option.cost)


def serve_command(model: str | None, flags: dict[str, Any]) -> str:
    """`vllm serve MODEL --flag value ...` with vLLM's spelling of each flag."""
    parts = ["vllm", "serve", model or "<MODEL>"]
    for name, value in flags.items():
        flag = "--" + name.replace("_", "-")
        if isinstance(value, bool):
            if value:
                parts.append(flag)
            elif name in ("enable_prefix_caching", "enable_chunked_prefill"):
                parts.append("--no-" + flag[2:])
        elif name == "kv_cache_memory_bytes":
            parts += [flag, _size_text(int(value))]
        elif name == "max_model_len" and value == -1:
            parts += [flag, "auto"]
        else:
            parts += [flag, f"{value:g}" if isinstance(value, float) else str(value)]
    return " ".join(part if part == "<MODEL>" else shlex.quote(part) for part in parts)


def _size_text(value: int) -> str:
    for unit, size in (("G", 2**30), ("M", 2**20)):
        if value % size == 0:
            return f"{value // size}{unit}"
    return str(value)
