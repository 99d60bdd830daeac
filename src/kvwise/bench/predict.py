"""What `kvwise simulate` predicts for a bench run, and how far the measurement is from it.

The prediction simulates the very workload bench sent (same spec, same seed, same concurrency
cap) on the replica the planner gives for the model, GPU and vLLM flags, except that the
server's own KV pool (`vllm:cache_config_info`: blocks and block size) replaces the planner's
when the server reports it: the measurement is of that pool. The step-time coefficients are the
user's calibration for this GPU and model when there is one (`kvwise calibrate`), else the
defaults shipped for the GPU; the prediction says which.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from typing import Any

from kvwise.bench.results import ServerInfo
from kvwise.bench.summary import COMPARED_KEYS
from kvwise.core.flags import VllmFlags
from kvwise.core.gpus import GpuSpec
from kvwise.core.models import ModelSpec
from kvwise.sim.deploy import deployment
from kvwise.sim.runner import SimConfig, simulate
from kvwise.sim.steptime import StepTimeCoefficients
from kvwise.sim.workloads import WorkloadSpec, build_workload


@dataclass(frozen=True)
class Deployed:
    """The simulated replica of the server under test, and where its step times come from."""

    config: SimConfig
    coefficients_source: str  # the user's calibration, or the shipped set (sim.deploy says which)


def server_flags(flags: VllmFlags, server: ServerInfo) -> VllmFlags:
    """The stated flags, with the block size the server reports (CPU engines use 128)."""
    block_size = server.block_size()
    return flags.merged(block_size=block_size) if block_size else flags


def deployed(
    model: ModelSpec,
    gpu: GpuSpec,
    flags: VllmFlags,
    server: ServerInfo,
    *,
    vllm_version: str | None = None,
    coefficients: StepTimeCoefficients | None = None,
) -> Deployed:
    """The replica as simulated; `coefficients` overrides the calibration lookup (calibrate's
    prior is the uncalibrated set)."""
    result = deployment(
        model,
        gpu,
        server_flags(flags, server),
        vllm_version=vllm_version,
        coefficients=coefficients,
        num_gpu_blocks=server.num_gpu_blocks(),
    )
    return Deployed(result.config, result.coefficients_note)


def predict(
    replica: Deployed, spec: WorkloadSpec, max_concurrency: int | None, seed: int
) -> dict[str, Any]:
    """simulate's metrics for the run bench made at this concurrency cap."""
    workload = build_workload(replace(spec, max_concurrency=max_concurrency), random.Random(seed))
    result = simulate(replica.config, workload, seed)
    return dict(result.metrics) | {"coefficients": replica.coefficients_source}


def relative_errors(measured: dict[str, Any], predicted: dict[str, Any]) -> dict[str, float]:
    """(predicted - measured) / measured for each compared figure measured above zero."""
    return {
        key: (predicted[key] - measured[key]) / measured[key]
        for key in COMPARED_KEYS
        if key in predicted and measured.get(key)
    }
