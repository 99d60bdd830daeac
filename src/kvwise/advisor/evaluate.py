"""Plan, then simulate, each candidate; rank them against the user's latency objectives.

A replica serves its share of the sessions (session affinity spreads them evenly), so one
replica is simulated with `sessions / replicas` sessions and the throughput is multiplied back.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from kvwise.advisor.candidates import Candidate
from kvwise.core.gpus import GpuSpec
from kvwise.errors import KvwiseError
from kvwise.planner import Plan, plan
from kvwise.sim.bands import bands_in, load_regime, predicts_overload
from kvwise.sim.deploy import deployment
from kvwise.sim.interconnect import Topology
from kvwise.sim.runner import simulate
from kvwise.sim.workloads import Workload


@dataclass(frozen=True)
class Objectives:
    ttft_p99_ms: float | None = None  # --slo-ttft-ms: 99th-percentile time to first token
    tpot_mean_ms: float | None = None  # --slo-tpot-ms: mean time per output token

    @property
    def is_set(self) -> bool:
        return self.ttft_p99_ms is not None or self.tpot_mean_ms is not None

    def describe(self) -> str:
        parts = []
        if self.ttft_p99_ms is not None:
            parts.append(f"p99 TTFT <= {self.ttft_p99_ms / 1000:,.2f} s")
        if self.tpot_mean_ms is not None:
            parts.append(f"mean TPOT <= {self.tpot_mean_ms:,.1f} ms")
        return " and ".join(parts)


@dataclass(frozen=True)
class Evaluation:
    candidate: Candidate
    plan: Plan
    metrics: dict[str, Any] | None  # None: vLLM would not start, nothing to simulate
    note: str = ""
    step_time: str = ""  # which step-time coefficients the simulation used (calibrated or shipped)
    # per banded metric, its out-of-sample error band (kvwise.sim.bands, as JSON)
    bands: dict[str, Any] | None = None

    @property
    def starts(self) -> bool:
        return self.plan.starts

    def meets(self, objectives: Objectives) -> bool:
        m = self.metrics
        if m is None or m["rejected"]:
            return False
        if objectives.ttft_p99_ms is not None and m["p99_ttft_ms"] > objectives.ttft_p99_ms:
            return False
        return objectives.tpot_mean_ms is None or m["mean_tpot_ms"] <= objectives.tpot_mean_ms

    def sort_key(self, objectives: Objectives) -> tuple[float, ...]:
        """Smaller is better: meeting the objectives, then no preemption, then throughput."""
        m = self.metrics
        if m is None:
            return (3.0, 0.0, 0.0, 0.0)
        return (
            0.0 if self.meets(objectives) else 1.0 + _violation(m, objectives),
            float(m["num_preemptions"] > 0),
            -m["output_throughput"],
            m["p99_ttft_ms"],
        )


def _violation(metrics: dict[str, Any], objectives: Objectives) -> float:
    """How far past the objectives, as a ratio (0 when met); rejected requests count fully."""
    worst = 0.0
    if objectives.ttft_p99_ms:
        worst = max(worst, metrics["p99_ttft_ms"] / objectives.ttft_p99_ms - 1)
    if objectives.tpot_mean_ms:
        worst = max(worst, metrics["mean_tpot_ms"] / objectives.tpot_mean_ms - 1)
    return worst + float(metrics["rejected"] > 0)


def _replica_share(workload: Workload, replicas: int) -> Workload:
    if replicas == 1:
        return workload
    share = workload.sessions[::replicas]  # every replicas-th session: an even, deterministic split
    starts = workload.start_times_s[::replicas] if workload.start_times_s else None
    limit = -(-workload.max_concurrency // replicas) if workload.max_concurrency else None
    return replace(workload, sessions=share, start_times_s=starts, max_concurrency=limit)


def plan_candidate(candidate: Candidate, gpu: GpuSpec, vllm_version: str | None) -> Plan:
    return plan(candidate.model, gpu, candidate.flags, vllm_version=vllm_version)


def evaluate(
    candidate: Candidate,
    planned: Plan,
    gpu: GpuSpec,
    workload: Workload,
    *,
    vllm_version: str | None,
    seed: int,
    history_budget_tokens: int | None = None,
    topology: Topology | None = None,
) -> Evaluation:
    """Simulate a candidate that starts (`planned` is its plan); `history_budget_tokens` trims
    session history as kvwise's gateway does when the workload outgrows max_model_len."""
    if not planned.starts:
        return Evaluation(candidate, planned, None, planned.error.kind if planned.error else "")
    try:
        deployed = deployment(
            candidate.model, gpu, candidate.flags, vllm_version=vllm_version, topology=topology
        )
    except KvwiseError as exc:  # a deployment the simulator cannot model: reported, not fatal
        return Evaluation(candidate, planned, None, str(exc))
    config = replace(deployed.config, history_budget_tokens=history_budget_tokens)
    sim = simulate(config, _replica_share(workload, candidate.replicas), seed)
    metrics = dict(sim.metrics)
    for key in ("request_throughput", "output_throughput", "total_token_throughput"):
        metrics[key] = metrics[key] * candidate.replicas
    return Evaluation(
        candidate,
        planned,
        metrics,
        step_time=deployed.coefficients_note,
        bands=_bands(gpu, workload, metrics),
    )


def _bands(gpu: GpuSpec, workload: Workload, metrics: dict[str, Any]) -> dict[str, Any]:
    """The bands of the simulation's regime: a session workload is a closed loop (or open-loop
    session starts), so it is low load only one session at a time, overload when it queues or
    preempts, saturation otherwise."""
    regime = load_regime(predicts_overload(metrics), workload.max_concurrency, None, 0, None)
    return {m: b.as_json() for m, b in bands_in(gpu.name, regime).items()}


def rank(evaluations: list[Evaluation], objectives: Objectives) -> list[Evaluation]:
    return sorted(evaluations, key=lambda e: e.sort_key(objectives))
