"""Fitting a benchmark's workload to the endpoint's context before a request is sent.

vLLM lists its `max_model_len` in `/v1/models`. A workload whose longest request (final prompt plus
max_tokens) is longer would see vLLM answer 400 to every late turn, and the run would measure
errors. With the default sizes, bench scales them down to fit and says so; sizes the user chose
are kept (a gateway in front may trim histories), with a warning naming what to shrink.
"""

from __future__ import annotations

import random
from dataclasses import replace

from kvwise.errors import UsageError
from kvwise.sim.workloads import WorkloadSpec, build_workload, required_max_model_len

# the token-size fields of a workload, as the user spells them
SIZE_FLAGS = {
    "system_prompt_tokens": "--system-prompt",
    "user_tokens": "--user-tokens",
    "tool_output_tokens": "--tool-output",
    "input_len": "--input-len",
    "output_len": "--output-len",
    "max_tokens": "--max-tokens",
    "turns": "--turns",
}
HEADROOM = 0.9  # the chat template and tokenizer differences add tokens the workload does not count
MIN_TOKENS = 8
MIN_TURNS = 4  # an agent session still grows its history over a few turns


def longest_request_tokens(spec: WorkloadSpec) -> int:
    return required_max_model_len(build_workload(spec, random.Random(0)))


def _scaled(spec: WorkloadSpec, factor: float) -> WorkloadSpec:
    def smaller(tokens: int) -> int:
        return max(MIN_TOKENS, int(tokens * factor))

    return replace(
        spec,
        system_prompt_tokens=smaller(spec.system_prompt_tokens),
        user_tokens=smaller(spec.user_tokens),
        tool_output_tokens=smaller(spec.tool_output_tokens),
        input_len=smaller(spec.input_len),
        output_len=smaller(spec.output_len),
        max_tokens=None if spec.max_tokens is None else smaller(spec.max_tokens),
    )


def _fewer_turns(spec: WorkloadSpec, max_model_len: int) -> WorkloadSpec:
    """Shorter sessions first (down to MIN_TURNS), so each turn keeps a realistic size."""
    fitted = spec
    while fitted.turns > MIN_TURNS and longest_request_tokens(fitted) > max_model_len * HEADROOM:
        fitted = replace(fitted, turns=fitted.turns - 1)
    return fitted


def fit_to_context(
    spec: WorkloadSpec, max_model_len: int | None, stated: set[str]
) -> tuple[WorkloadSpec, str | None]:
    """The spec to run and, when it was changed, a note saying how."""
    if max_model_len is None or spec.kind in ("replay", "sharegpt"):
        return spec, None
    longest = longest_request_tokens(spec)
    if longest <= max_model_len * HEADROOM:
        return spec, None
    chosen = sorted(SIZE_FLAGS[name] for name in stated if name in SIZE_FLAGS)
    if chosen:
        return spec, (
            f"warning: the {spec.kind} workload's longest request is {longest:,} tokens (prompt "
            f"+ max_tokens) but the endpoint serves max_model_len {max_model_len:,}: requests "
            f"past it will fail unless a gateway trims them; lower {', '.join(chosen)} to fit"
        )
    fitted = _fewer_turns(spec, max_model_len)
    while longest_request_tokens(fitted) > max_model_len * HEADROOM:
        factor = HEADROOM * max_model_len / longest_request_tokens(fitted)
        smaller = _scaled(fitted, min(factor, 0.9))
        if smaller == fitted:  # every size is at its floor: fewer turns instead
            if fitted.turns == 1:
                raise UsageError(f"no {spec.kind} workload fits max_model_len {max_model_len:,}")
            smaller = replace(fitted, turns=fitted.turns - 1)
        fitted = smaller
    note = (
        f"the endpoint serves max_model_len {max_model_len:,}; the default {spec.kind} workload "
        f"(longest request {longest:,} tokens) is scaled to fit: {_sizes(fitted)} "
        "(give the sizes to choose them yourself)"
    )
    return fitted, note


def _sizes(spec: WorkloadSpec) -> str:
    if spec.kind == "agent":
        return (
            f"{spec.turns} turns, system prompt {spec.system_prompt_tokens}, user "
            f"{spec.user_tokens}, tool output {spec.tool_output_tokens}, output {spec.output_len}"
        )
    return f"input {spec.input_len}, output {spec.output_len}"
