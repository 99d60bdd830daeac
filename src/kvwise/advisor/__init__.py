"""`kvwise plan --workload ...`: the configuration that serves a stated workload best.

Uses the planner (will it start, how big is the KV pool) and the simulator (how the workload
behaves on that pool) through their public functions; the search space is in `candidates.py`.

Public API: `recommend(model, gpu, flags, workload_spec, ...) -> Recommendation`.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from kvwise.advisor.candidates import Candidate, candidates, peak_kv_demand_tokens
from kvwise.advisor.evaluate import Evaluation, Objectives, evaluate, plan_candidate, rank
from kvwise.core.flags import VllmFlags
from kvwise.core.gpus import GpuSpec
from kvwise.core.models import ModelSpec
from kvwise.planner import Plan
from kvwise.sim.interconnect import Topology
from kvwise.sim.workloads import (
    Workload,
    WorkloadSpec,
    build_workload,
    history_budget_tokens,
    required_max_model_len,
)

__all__ = ["Objectives", "Recommendation", "recommend"]


@dataclass(frozen=True)
class Recommendation:
    workload: Workload
    objectives: Objectives
    baseline: Evaluation  # the user's flags with vLLM's defaults for the rest
    ranked: tuple[Evaluation, ...]  # every candidate that starts, best first
    refused: tuple[Evaluation, ...]  # candidates vLLM would not start
    demand_tokens: int  # KV the sessions hold together at their longest
    required_len: int  # the workload's longest request
    # with objectives no candidate meets: the most agent sessions the best candidate serves
    # within them (0: not even one; None: no objectives, they are met, or not an agent workload)
    max_sessions_meeting: int | None = None
    topology: Topology = field(default_factory=Topology)
    topology_text: str = ""  # the nodes and links, as the report names them

    @property
    def best(self) -> Evaluation | None:
        return self.ranked[0] if self.ranked else None


def _shortlist(planned: list[tuple[Candidate, Plan]]) -> list[tuple[Candidate, Plan]]:
    """Per checkpoint, KV dtype and layout: CUDA graphs if that starts, else --enforce-eager
    (graphs cost some KV but decode faster; eager is the fallback when memory is that tight)."""
    chosen: dict[tuple[str, str, int, int, int], tuple[Candidate, Plan]] = {}
    for candidate, result in planned:
        if not result.starts:
            continue
        key = (
            candidate.model.model_id,
            result.flags.kv_cache_dtype,
            candidate.tp,
            candidate.pp,
            candidate.replicas,
        )
        if key not in chosen or (
            chosen[key][1].flags.enforce_eager and not result.flags.enforce_eager
        ):
            chosen[key] = (candidate, result)
    return list(chosen.values())


def recommend(
    model: ModelSpec,
    gpu: GpuSpec,
    flags: VllmFlags,
    spec: WorkloadSpec,
    *,
    num_gpus: int = 1,
    topology: Topology | None = None,
    objectives: Objectives | None = None,
    vllm_version: str | None = None,
    seed: int = 0,
    trim_history: bool = True,
) -> Recommendation:
    """`topology` (nodes, GPUs per node, links) wins over `num_gpus` (that many on one node)."""
    objectives = objectives or Objectives()
    topology = topology or Topology(1, num_gpus)
    workload = build_workload(spec, random.Random(seed))

    def run(candidate: Candidate, result: Plan, load: Workload = workload) -> Evaluation:
        # histories longer than the context are trimmed by the gateway kvwise recommends
        budget = history_budget_tokens(load, result.flags.max_model_len, trim_history=trim_history)
        return evaluate(
            candidate,
            result,
            gpu,
            load,
            vllm_version=vllm_version,
            seed=seed,
            history_budget_tokens=budget,
            topology=topology,
        )

    base = Candidate(model, flags, 1)
    baseline = run(base, plan_candidate(base, gpu, vllm_version))
    planned = [
        (c, plan_candidate(c, gpu, vllm_version))
        for c in candidates(model, flags, workload, topology)
    ]
    evaluations = []
    for candidate, result in _shortlist(planned):
        evaluations.append(run(candidate, result))
    refused = [
        Evaluation(c, p, None, p.error.kind if p.error else "") for c, p in planned if not p.starts
    ]
    ranked = tuple(rank([e for e in evaluations if e.metrics is not None], objectives))
    return Recommendation(
        workload=workload,
        objectives=objectives,
        baseline=baseline,
        ranked=ranked,
        refused=tuple(refused),
        demand_tokens=peak_kv_demand_tokens(workload),
        required_len=required_max_model_len(workload),
        max_sessions_meeting=_sessions_meeting(ranked, spec, objectives, run, seed),
        topology=topology,
        topology_text=topology.describe(gpu),
    )


def _sessions_meeting(
    ranked: tuple[Evaluation, ...],
    spec: WorkloadSpec,
    objectives: Objectives,
    run: Callable[[Candidate, Plan, Workload], Evaluation],
    seed: int,
) -> int | None:
    """When no candidate meets the objectives: the most sessions the best one serves within
    them (bisection over the session count, each point simulated like the candidates)."""
    if not objectives.is_set or not ranked or ranked[0].meets(objectives):
        return None
    if spec.kind != "agent":
        return None
    best = ranked[0]
    low, high = 0, spec.sessions  # low meets (0 trivially), high does not
    while high - low > 1:
        middle = (low + high) // 2
        fewer = build_workload(replace(spec, sessions=middle), random.Random(seed))
        if run(best.candidate, best.plan, fewer).meets(objectives):
            low = middle
        else:
            high = middle
    return low
