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
from kvwise.sim.bands import bands_for
from kvwise.sim.deploy import deployment
from kvwise.sim.runner import SimConfig, simulate
from kvwise.sim.steptime import StepTimeCoefficients
from kvwise.sim.workloads import WorkloadSpec, build_workload


@dataclass(frozen=True)
class Deployed:
    """The simulated replica of the server under test, and where its step times come from."""

    config: SimConfig
    coefficients_source: str  # the user's calibration, or the shipped set (sim.deploy says which)
    gpu_name: str = ""  # the card simulated: its class picks the error bands


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
    return Deployed(result.config, result.coefficients_note, gpu.name)


def predict(
    replica: Deployed, spec: WorkloadSpec, max_concurrency: int | None, seed: int
) -> dict[str, Any]:
    """simulate's metrics for the run bench made at this concurrency cap, with the out-of-sample
    error band of each banded metric (`kvwise.sim.bands`)."""
    capped = replace(spec, max_concurrency=max_concurrency)
    workload = build_workload(capped, random.Random(seed))
    result = simulate(replica.config, workload, seed)
    metrics = dict(result.metrics)
    found = bands_for(replica.gpu_name, capped, metrics)
    return metrics | {
        "coefficients": replica.coefficients_source,
        "bands": {metric: b.as_json() for metric, b in found.items()},
    }


def judge_bands(measured: dict[str, Any], prediction: dict[str, Any]) -> dict[str, Any]:
    """The prediction with, per band, the measurement's error and whether it fell inside
    (`measured_inside`: None where the band has no out-of-sample data or nothing was measured)."""
    errors = relative_errors(measured, prediction)
    judged = {}
    for metric, cell in prediction.get("bands", {}).items():
        error = errors.get(metric)
        low, high = cell["p10_relative_error"], cell["p90_relative_error"]
        inside = None if error is None or low is None else bool(low <= error <= high)
        judged[metric] = cell | {"measured_relative_error": error, "measured_inside": inside}
    return prediction | {"bands": judged}


def relative_errors(measured: dict[str, Any], predicted: dict[str, Any]) -> dict[str, float]:
    """(predicted - measured) / measured for each compared figure measured above zero."""
    return {
        key: (predicted[key] - measured[key]) / measured[key]
        for key in COMPARED_KEYS
        if key in predicted and measured.get(key)
    }
