"""Command-line flags for a `WorkloadSpec`: one flag per field, named after it.

The flags are derived from the dataclass (`--num-prompts` sets `num_prompts`, `--think-time-s`
sets `think_time_s`...), so they cannot drift from the one workload definition in
`kvwise.sim.workloads`; the spec's own `validate` checks the values.
"""

from __future__ import annotations

import argparse
from dataclasses import MISSING, Field, fields
from typing import Any

from kvwise.sim.workloads import ARRIVALS, WORKLOAD_KINDS, WorkloadSpec

# fields with a flag of their own elsewhere (the concurrency ramp) or a different spelling
SPECIAL = {"kind": "--workload", "replay_path": "--replay", "max_concurrency": None}
TYPES: dict[str, type] = {"request_rate": float, "max_tokens": int}  # Optional fields
HELP = {
    "kind": f"one of {', '.join(WORKLOAD_KINDS)}",
    "num_prompts": "requests (random, sharegpt, shared-prefix)",
    "request_rate": "sessions started per second (open loop); default: all at once",
    "burstiness": "gamma shape of inter-arrival times (1 = Poisson)",
    "arrival": f"one of {', '.join(ARRIVALS)}",
    "input_len": "prompt tokens (random; sharegpt: mean)",
    "output_len": "tokens generated per request",
    "max_tokens": "max_tokens as sent (default: the output length)",
    "range_ratio": "lengths uniform in [L(1-r), L(1+r)]",
    "sessions": "agent sessions",
    "turns": "turns per agent session",
    "system_prompt_tokens": "shared system prompt (agent, shared-prefix)",
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


def add_workload_flags(parser: argparse.ArgumentParser, default_kind: str = "agent") -> None:
    group = parser.add_argument_group("workload (the same definitions as kvwise simulate)")
    for spec_field in fields(WorkloadSpec):
        name = spec_field.name
        flag = SPECIAL.get(name, f"--{name.replace('_', '-')}")
        if flag is None:
            continue
        default = default_kind if name == "kind" else None  # None: the spec's own default
        group.add_argument(
            flag, dest=name, type=_flag_type(spec_field), default=default, help=HELP.get(name)
        )


def spec_from_args(args: argparse.Namespace) -> WorkloadSpec:
    """The spec the flags describe (fields not given keep the spec's defaults), validated."""
    values: dict[str, Any] = {}
    for spec_field in fields(WorkloadSpec):
        if SPECIAL.get(spec_field.name, "") is None:
            continue  # set per run by the caller
        value = getattr(args, spec_field.name, None)
        if value is not None:
            values[spec_field.name] = value
    return WorkloadSpec(**values).validate()
