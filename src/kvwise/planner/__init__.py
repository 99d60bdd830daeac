"""`kvwise plan`: vLLM's start-up memory accounting, per version.

Public API: `plan(model, gpu, flags, vllm_version=..., num_gpus=...) -> Plan`.
"""

from kvwise.planner.plan import plan
from kvwise.planner.result import Plan, PlanError

__all__ = ["Plan", "PlanError", "plan"]
