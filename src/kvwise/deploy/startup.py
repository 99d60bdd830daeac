"""How long a vLLM replica may take to start: the startup probe's budget.

A replica's first start downloads the checkpoint into the model cache, then every start reads
it into GPU memory, compiles and captures CUDA graphs. The budget is the checkpoint's bytes at a
stated rate plus a fixed allowance for the engine's own initialisation; both are options of
`kvwise deploy` because neither is measured by kvwise (docs/scale-out.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvwise.core.weights import runtime_dtype_bytes, weight_bytes_per_rank
from kvwise.planner import Plan

# Default rate the checkpoint arrives at: 50 MB/s = a 400 Mbit/s link to the Hugging Face hub
# (an assumption, not a measurement: --load-rate-mb-s sets yours). Later starts read the cache
# from disk, which is faster, so the first start sizes the probe.
LOAD_RATE_MB_S = 50.0
# Allowance for what follows the weights: process start and imports, torch.compile and CUDA
# graph capture (vLLM V1 logs both, "torch.compile takes ... s" and "Graph capturing finished
# in ... secs"). An allowance, not a fit: --engine-init-s sets it.
ENGINE_INIT_S = 300.0
PROBE_PERIOD_S = 10  # how often the startup probe asks /health


@dataclass(frozen=True)
class StartupBudget:
    weight_bytes: int  # the whole checkpoint, what one replica downloads and reads
    load_rate_mb_s: float
    engine_init_s: float

    @property
    def total_s(self) -> float:
        return self.weight_bytes / (self.load_rate_mb_s * 1e6) + self.engine_init_s

    @property
    def failure_threshold(self) -> int:
        """Startup probe failures allowed: the budget in probe periods, rounded up."""
        return math.ceil(self.total_s / PROBE_PERIOD_S)


def checkpoint_bytes(plan: Plan) -> int:
    """The checkpoint's size when known (safetensors metadata), else the modelled whole model."""
    model = plan.model
    if model.checkpoint_weight_bytes:
        return model.checkpoint_weight_bytes
    dtype_bytes = runtime_dtype_bytes(model, plan.flags.dtype)
    return weight_bytes_per_rank(model, dtype_bytes=dtype_bytes)


def startup_budget(plan: Plan, load_rate_mb_s: float, engine_init_s: float) -> StartupBudget:
    return StartupBudget(checkpoint_bytes(plan), load_rate_mb_s, engine_init_s)
