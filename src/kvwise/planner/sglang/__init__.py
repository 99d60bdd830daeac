"""SGLang's memory plan per release: defaults (releases, fraction), pool sizing (pool, plan)."""

from kvwise.planner.sglang.plan import SglangFlags, SglangPlan, plan_sglang
from kvwise.planner.sglang.render import launch_args, run_sglang, sglang_command, to_json

__all__ = [
    "SglangFlags",
    "SglangPlan",
    "launch_args",
    "plan_sglang",
    "run_sglang",
    "sglang_command",
    "to_json",
]
