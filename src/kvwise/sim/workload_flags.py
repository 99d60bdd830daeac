"""Command-line flags for a `WorkloadSpec`, shared by `simulate`, `plan --workload` and `bench`.

One flag per field, derived from the dataclass (`--num-prompts` sets `num_prompts`,
`--think-time-s` sets `think_time_s`...) so they cannot drift from the one workload definition in
`kvwise.sim.workloads`; a few take the shorter names users type (`--system-prompt 2000`,
`--tool-output 800`). The spec's own `validate` checks the values.
"""

from __future__ import annotations

import argparse
from dataclasses import MISSING, Field, fields
from typing import Any

from kvwise.sim.workloads import ARRIVALS, WORKLOAD_KINDS, WorkloadSpec

# fields spelled differently from their name
SPECIAL = {
    "kind": "--workload",
    "replay_path": "--replay",
    "system_prompt_tokens": "--system-prompt",
    "tool_output_tokens": "--tool-output",
    "num_groups": "--groups",
}
AGENT_OUTPUT_LEN = 512  # an agent turn's answer when --output-len is not given (a chat's: 128)
# Optional fields (their default None says nothing of the type)
TYPES: dict[str, type] = {"request_rate": float, "max_concurrency": int, "max_tokens": int}
HELP = {
    "kind": f"one of {', '.join(WORKLOAD_KINDS)}",
    "num_prompts": "requests (random, sharegpt, shared-prefix)",
    "request_rate": "requests (agent: sessions) started per second (open loop); default: all at once",
    "max_concurrency": "at most this many in flight (closed loop)",
    "burstiness": "gamma shape of inter-arrival times (1 = Poisson)",
    "arrival": f"one of {', '.join(ARRIVALS)}",
    "input_len": "prompt tokens (random; sharegpt: mean)",
    "output_len": f"tokens generated per request (agent default: {AGENT_OUTPUT_LEN})",
    "max_tokens": "max_tokens as sent (default: the output length)",
    "range_ratio": "lengths uniform in [L(1-r), L(1+r)]",
    "sessions": "agent sessions",
    "turns": "turns per agent session",
    "system_prompt_tokens": "shared system prompt tokens (agent, shared-prefix)",
    "user_tokens": "new user text per turn (shared-prefix: question length)",
    "tool_output_tokens": "tool output appended before each agent turn after the first",
    "think_time_s": "mean pause between an answer and the next turn",
    "num_groups": "shared-prefix: distinct system prompts",
    "prompts_per_group": "shared-prefix: users per system prompt",
    "replay_path": "replay FILE.jsonl",
}


def _flag_type(spec_field: Field[Any]) -> type:
    if spec_field.name in TYPES:
        return TYPES[spec_field.name]
    if spec_field.default is MISSING or spec_field.default is None:
        return str
    return type(spec_field.default)


def add_workload_flags(
    parser: argparse.ArgumentParser,
    *,
    default_kind: str | None = "agent",
    skip: tuple[str, ...] = (),
) -> None:
    """One flag per WorkloadSpec field except `skip` (e.g. bench's own concurrency ramp);
    `default_kind` None leaves --workload unset (plan answers a workload only when given one)."""
    group = parser.add_argument_group("workload (the same definitions in simulate, plan and bench)")
    for spec_field in fields(WorkloadSpec):
        name = spec_field.name
        if name in skip:
            continue
        flag = SPECIAL.get(name, f"--{name.replace('_', '-')}")
        default = default_kind if name == "kind" else None  # None: the spec's own default
        group.add_argument(
            flag, dest=name, type=_flag_type(spec_field), default=default, help=HELP.get(name)
        )


def spec_from_args(args: argparse.Namespace, *, skip: tuple[str, ...] = ()) -> WorkloadSpec:
    """The spec the flags describe (fields not given keep the spec's defaults), validated."""
    values: dict[str, Any] = {}
    for spec_field in fields(WorkloadSpec):
        if spec_field.name in skip:
            continue  # set per run by the caller
        value = getattr(args, spec_field.name, None)
        if value is not None:
            values[spec_field.name] = value
    if values.get("kind") == "agent" and "output_len" not in values:
        values["output_len"] = AGENT_OUTPUT_LEN
    return WorkloadSpec(**values).validate()


def add_trimming_flag(parser: argparse.ArgumentParser) -> None:
    """`simulate` and `plan --workload` model the history trimming of kvwise's gateway alike."""
    parser.add_argument(
        "--no-history-trimming",
        dest="trim_history",
        action="store_false",
        help="send agent histories whole, as a client without kvwise's gateway does (vLLM then "
        "rejects turns past max_model_len); default: trimmed to max_model_len like `kvwise serve "
        "--session-history`",
    )
