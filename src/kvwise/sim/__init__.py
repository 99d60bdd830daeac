"""`kvwise simulate`: a discrete-event model of vLLM's engine on a given GPU.

Layers (entities, scheduler, cost model and workload kept apart):

    request.py          a request and the content identity of its tokens (segments, block hashes)
    block_pool.py       the paged KV pool: null block, LRU free queue, prefix-cache map
    kv_cache_manager.py per-request blocks: prefix hits, all-or-nothing allocation
    scheduler.py        vLLM V1's schedule() step by step (and V0's prefill-first)
    cohort.py, engine.py the event loop; decoding requests kept implicit for speed
    pure_decode.py      decode-only steps in a tight loop (also admits prompts that fit whole)
    arrivals.py         requests on their way to the engine, by arrival time
    steptime.py         step time as a linear combination of roofline basis terms
    coefficients.py     the fitted step-time coefficients (benchmarks/fit_steptime.py)
    fit.py              fitting coefficients from measured latencies (also for `kvwise calibrate`)
    workloads.py        workloads shared with `kvwise bench` (random, sharegpt, agent, ...)
    runner.py           the clients, and `simulate()`
    deploy.py           model + GPU + vLLM flags -> a simulated replica, through the planner
    fidelity*.py        the simulator against real serving measurements

Public API, for the CLI and for callers such as a flag recommender:

    dep = deployment(model, gpu, flags, vllm_version=...)      # raises if vLLM would not start
    result = simulate(dep.config, WorkloadSpec("agent", sessions=10), seed=0)
    result.metrics["median_ttft_ms"], result.metrics["num_preemptions"], ...
"""

from __future__ import annotations

import importlib
from typing import Any

# Names load on first use (PEP 562), so that `kvwise plan` can read the workload flags without
# importing the engine, the planner glue and the calibration store.
_EXPORTS = {
    "Deployment": "kvwise.sim.deploy",
    "deployment": "kvwise.sim.deploy",
    "SimConfig": "kvwise.sim.runner",
    "SimResult": "kvwise.sim.runner",
    "simulate": "kvwise.sim.runner",
    "StepTimeCoefficients": "kvwise.sim.steptime",
    "Workload": "kvwise.sim.workloads",
    "WorkloadSpec": "kvwise.sim.workloads",
    "build_workload": "kvwise.sim.workloads",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'kvwise.sim' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
