"""The arguments vLLM gets in every artefact: exactly what `kvwise plan` resolved.

The planned flags come from the planner's own command (`planner.report.vllm_command` without
defaults, so every modelled flag is written out, not left to the image's release), then the
switches the command leaves to vLLM's default when the plan turned them the other way, and last
the flags kvwise does not model, verbatim (`Plan.flags.extra_args`).
"""

from __future__ import annotations

import shlex
from dataclasses import replace

from kvwise.planner import Plan
from kvwise.planner.defaults import default_flags
from kvwise.planner.report import vllm_command

# on/off switches the planner resolves but its command leaves out when they match vLLM's default
_SWITCHES = ("enable_prefix_caching", "enable_chunked_prefill")


def planned_args(plan: Plan) -> list[str]:
    """`--flag value ...` for every modelled flag, as the plan resolved it (no model, no extras)."""
    modelled = replace(plan.flags, extra_args=())
    return shlex.split(vllm_command(plan.model.model_id, modelled, None))[3:]


def _switch_args(plan: Plan) -> list[str]:
    defaults = default_flags(plan.model, plan.gpu, plan.vllm_version)
    args = []
    for name in _SWITCHES:
        value = getattr(plan.flags, name)
        if value != getattr(defaults, name):
            args.append(f"--{'' if value else 'no-'}{name.replace('_', '-')}")
    return args


def engine_args(plan: Plan) -> list[str]:
    """Everything after `vllm serve MODEL`: planned flags (LoRA's too), switches, unmodelled
    extras."""
    return [*planned_args(plan), *_switch_args(plan), *plan.flags.extra_args]


def gateway_plan_args(plan: Plan) -> list[str]:
    """What `kvwise serve` needs to plan the same KV budget: the card, the release, the flags
    (never the unmodelled extras, which the gateway's parser does not take)."""
    gpu = plan.gpu
    card = ["--gpu", gpu.key] if gpu.key else ["--gpu-memory-gib", f"{gpu.memory_gib:.2f}"]
    return [*card, "--vllm-version", plan.vllm_version, *planned_args(plan)]
