"""`kvwise plan --explain`: each common knob's effect on this deployment, computed.

The folk tips users trade in vLLM threads contradict each other; here each
is re-planned on the user's own model, GPU and flags, and the difference is shown in numbers.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kvwise.core.catalog import load_model
from kvwise.core.flags import VllmFlags
from kvwise.core.gpus import GIB
from kvwise.errors import KvwiseError
from kvwise.planner.plan import plan
from kvwise.planner.result import Plan


@dataclass(frozen=True)
class Knob:
    name: str
    folk_tip: str
    change: Callable[[Plan, VllmFlags], VllmFlags | None]  # None: not applicable here
    model_id: Callable[[Plan], str | None] | None = None  # a different checkpoint (AWQ)


@dataclass(frozen=True)
class Effect:
    knob: Knob
    flags: dict[str, Any]
    after: Plan | None  # None when the variant cannot even be planned (reason in `note`)
    note: str


def _lower_util(p: Plan, f: VllmFlags) -> VllmFlags:
    return f.merged(gpu_memory_utilization=round(p.flags.gpu_memory_utilization - 0.1, 2))


def _fewer_seqs(p: Plan, f: VllmFlags) -> VllmFlags | None:
    return f.merged(max_num_seqs=32) if p.flags.max_num_seqs > 32 else None


def _shorter_len(p: Plan, f: VllmFlags) -> VllmFlags | None:
    return f.merged(max_model_len=8192) if p.flags.max_model_len > 8192 else None


def _smaller_mnbt(p: Plan, f: VllmFlags) -> VllmFlags | None:
    half = p.flags.max_num_batched_tokens // 2
    return f.merged(max_num_batched_tokens=half) if half >= p.flags.max_num_seqs else None


def _awq_id(p: Plan) -> str | None:
    if p.model.quant is not None:
        return None
    candidate = f"{p.model.model_id}-AWQ"
    try:
        load_model(candidate)
    except KvwiseError:
        return None
    return candidate


KNOBS: tuple[Knob, ...] = (
    Knob(
        "--kv-cache-dtype fp8",
        "fp8 KV saves a lot",
        lambda p, f: None if p.flags.kv_cache_dtype != "auto" else f.merged(kv_cache_dtype="fp8"),
    ),
    Knob(
        "--enforce-eager",
        "eager saves memory / causes fragmentation",
        lambda p, f: None if p.flags.enforce_eager else f.merged(enforce_eager=True),
    ),
    Knob("--gpu-memory-utilization -0.1", "lower utilization to avoid OOM", _lower_util),
    Knob("--max-num-seqs 32", "max_num_seqs reserves memory per sequence", _fewer_seqs),
    Knob("--max-model-len 8192", "vLLM pre-allocates max_model_len per sequence", _shorter_len),
    Knob("--max-num-batched-tokens /2", "chunked prefill smooths the peak", _smaller_mnbt),
    Knob("--block-size 8", "a smaller block size avoids OOM", lambda p, f: f.merged(block_size=8)),
    Knob(
        "--no-enable-prefix-caching",
        "prefix caching costs memory",
        lambda p, f: (
            None if not p.flags.enable_prefix_caching else f.merged(enable_prefix_caching=False)
        ),
    ),
    Knob(
        "AWQ 4-bit checkpoint",
        "AWQ halves memory so concurrency doubles",
        lambda p, f: f.merged(quantization=None),
        model_id=_awq_id,
    ),
)


def _variant(base: Plan, flags: VllmFlags, knob: Knob) -> Effect | None:
    changed = knob.change(base, flags)
    model_id = knob.model_id(base) if knob.model_id else base.model.model_id
    if changed is None or model_id is None:
        return None
    model = base.model if model_id == base.model.model_id else load_model(model_id)
    delta = {k: v for k, v in changed.set_values().items() if flags.set_values().get(k) != v}
    try:
        after = plan(
            model,
            base.gpu,
            changed,
            vllm_version=base.vllm_version,
            vllm_use_v1=base.vllm_use_v1,
            flashinfer_sampler=base.flashinfer_sampler,
        )
    except KvwiseError as exc:
        return Effect(knob, delta, None, str(exc))
    return Effect(knob, delta, after, _note(base, after))


def _note(before: Plan, after: Plan) -> str:
    b, a = before.memory, after.memory
    parts = []
    for label, x, y in (
        ("weights", b.weights_bytes, a.weights_bytes),
        ("activation", b.activation_peak_bytes, a.activation_peak_bytes),
        ("CUDA graphs", b.cuda_graph_bytes, a.cuda_graph_bytes),
        ("KV", b.kv_cache_bytes, a.kv_cache_bytes),
    ):
        if abs(y - x) >= 0.01 * GIB:
            parts.append(f"{label} {(y - x) / GIB:+.2f} GiB")
    tokens = f"KV tokens {before.kv.tokens:,} → {after.kv.tokens:,}"
    conc = f"max concurrency {before.kv.max_concurrency:.2f}x → {after.kv.max_concurrency:.2f}x"
    if after.error is not None:
        status = f"; vLLM would refuse: {after.error.kind}"
    elif after.verdict_not_modelled is not None:
        status = f"; start/fail verdict {after.verdict_not_modelled}"
    else:
        status = ""
    return ", ".join([*parts, tokens, conc]) + status


def explain(base: Plan, flags: VllmFlags) -> list[Effect]:
    effects = [_variant(base, flags, knob) for knob in KNOBS]
    return [e for e in effects if e is not None]


def _effect_json(effect: Effect) -> dict[str, Any]:
    after = effect.after
    return {
        "knob": effect.knob.name,
        "folk_tip": effect.knob.folk_tip,
        "flags": effect.flags,
        "effect": effect.note,
        "starts": None if after is None else after.starts,
        "kv_tokens": None if after is None else after.kv.tokens,
        "kv_cache_gib": None if after is None else round(after.memory.kv_cache_bytes / GIB, 3),
        "max_concurrency": None if after is None else round(after.kv.max_concurrency, 2),
    }


def run_explain(base: Plan, flags: VllmFlags, *, as_json: bool) -> int:
    effects = explain(base, flags)
    if as_json:
        print(
            json.dumps(
                {"plan": base.to_json(), "knobs": [_effect_json(e) for e in effects]}, indent=2
            )
        )
        return 0 if base.starts else 1
    from rich.console import Console
    from rich.table import Table

    from kvwise.planner.report import render

    console = Console()
    render(base, console)
    table = Table(title="What each knob changes on this deployment", title_justify="left")
    # the knob is a flag to copy: its column is as wide as its longest flag, which is never cut
    longest_flag = max((len(w) for e in effects for w in e.knob.name.split()), default=4)
    table.add_column("knob", overflow="fold", width=longest_flag)
    table.add_column("folk tip")
    table.add_column("effect (computed)")
    for effect in effects:
        table.add_row(effect.knob.name, effect.knob.folk_tip, effect.note)
    console.print(table)
    return 0 if base.starts else 1
