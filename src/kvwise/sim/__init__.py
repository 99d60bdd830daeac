"""`kvwise simulate`: a discrete-event model of vLLM's engine on a given GPU.

Layers (entities, scheduler, cost model and workload kept apart):

    request.py          a request and the content identity of its tokens (segments, block hashes)
    block_pool.py       the paged KV pool: null block, LRU free queue, prefix-cache map
    kv_cache_manager.py per-request blocks: prefix hits, all-or-nothing allocation
    scheduler.py        vLLM V1's schedule() step by step (and V0's prefill-first)
    sglang_scheduler.py SGLang's step as a variant of it (radix hits, retraction), for
                        `plan --engine vllm,sglang` (sglang_deploy.py: through SGLang's planner)
    cohort.py, engine.py the event loop; decoding requests kept implicit for speed
    pure_decode.py      decode-only steps in a tight loop (also admits prompts that fit whole)
    frontend.py         the API server: a latency, and one CPU that requests queue for
    arrivals.py         requests on their way to the engine, by arrival time
    steptime.py         step time as a linear combination of roofline basis terms
    coefficients.py     the fitted step-time coefficients (benchmarks/fit_steptime.py)
    workloads.py        workloads shared with `kvwise bench` (random, sharegpt, agent, ...)
    runner.py           the clients, and `simulate()`
    deploy.py           model + GPU + vLLM flags -> a simulated replica, through the planner

Public API, for the CLI and for callers such as a flag recommender:

    dep = deployment(model, gpu, flags, vllm_version=...)      # raises if vLLM would not start
    result = simulate(dep.config, WorkloadSpec("agent", sessions=10), seed=0)
    result.metrics["median_ttft_ms"], result.metrics["num_preemptions"], ...
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import os
import sys
from collections.abc import Sequence
from importlib.machinery import EXTENSION_SUFFIXES, ModuleSpec
from pathlib import Path
from types import ModuleType
from typing import Any

# The modules an engine step runs through, compiled with mypyc when the package was built with
# a C compiler (setup.py). Compiled or not, they run the same source and give the same results
# (tests/sim/test_compiled.py); compiled, a simulation takes 1.4-4x less CPU (benchmarks/sim_speed.py).
COMPILED_MODULES = (
    "arrivals",
    "block_pool",
    "cohort",
    "engine",
    "frontend",
    "kv_cache_manager",
    "metrics",
    "pure_decode",
    "records",
    "request",
    "runner",
    "scheduler",
    "sglang_scheduler",  # subclasses the compiled Scheduler: compiled with it
    "steptime",
)
_HERE = Path(__file__).parent


def _compiled_build_is_current() -> bool:
    """Whether the compiled modules were built from the sources that sit here now.

    False when there is no build, when KVWISE_PURE_PYTHON is set, and when any source was edited
    after the build: an edited .py must not be shadowed by a stale extension module.
    """
    if os.environ.get("KVWISE_PURE_PYTHON"):
        return False
    try:
        recorded = json.loads((_HERE / "_compiled.json").read_text())
        return all(
            hashlib.sha256((_HERE / f"{name}.py").read_bytes()).hexdigest() == recorded[name]
            and any((_HERE / f"{name}{suffix}").exists() for suffix in EXTENSION_SUFFIXES)
            for name in COMPILED_MODULES
        )
    except (OSError, ValueError, KeyError):
        return False


class _SourceFinder:
    """Loads the engine modules from their .py files, never from an extension module beside them
    (all of them: compiled modules call each other natively and cannot mix with source ones)."""

    names = frozenset(f"{__name__}.{name}" for name in COMPILED_MODULES)

    @classmethod
    def find_spec(
        cls, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname not in cls.names:
            return None
        return importlib.util.spec_from_file_location(
            fullname, _HERE / f"{fullname.rsplit('.', 1)[1]}.py"
        )


IS_COMPILED = _compiled_build_is_current()
if not IS_COMPILED:
    sys.meta_path.insert(0, _SourceFinder())

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
