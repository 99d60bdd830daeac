"""Fit the simulator's step-time coefficients to measured requests.

Every measured time of a request (TTFT, decode time, or E2E when its stream came in one burst)
is a sum of engine step times, and a step time is linear in the coefficients
(`kvwise.sim.steptime`). What is not measured is which steps, holding what, each request spent
its time in. Two reconstructions give it, each turning every measured time into one linear
equation in the coefficients (`fitrows.py`: relative rows, non-negative least squares):

1. direct (`overlap.py`): from the measured timelines alone. The steps of a decode phase are
   the gaps between its tokens; what else ran in them is read off the other requests'
   timelines (their tokens in the window, their contexts, prefills that finished in it). One
   least-squares solve, no simulation: robust, but approximate around prefills and queues.
2. replay (`replayfit.py`): the measured requests are replayed in the simulator at their own
   send times, and each request's time is the sum of the simulated steps it spent. Exact where
   the simulator's scheduling is, but the steps depend on the coefficients themselves (slower
   steps, more overlap, bigger batches): the replay is redone with each new fit, and the rows
   of every replay so far are solved together (the batches a replay reconstructs jump with
   small changes of step time; the stack averages the jumps out), until the fit settles.

The direct fit starts the replays; the candidate whose replay matches the measurements best
(mean of the median relative errors of TTFT, TPOT and E2E) is the result, and the prior itself
is a candidate, so calibrating never makes the simulator worse on the data it was given.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from kvwise.bench.fitrows import Row
from kvwise.bench.lsq import nnls
from kvwise.bench.overlap import direct_rows
from kvwise.bench.replayfit import CalibrationRun, replay_all
from kvwise.sim.steptime import StepCost, StepTimeCoefficients

MAX_ROUNDS = 12
SETTLED = 0.005  # relative change of every coefficient below which the fit has settled


@dataclass(frozen=True)
class FitResult:
    coefficients: StepTimeCoefficients
    error_before: dict[str, float]  # median relative error per figure, with the prior
    error_after: dict[str, float]
    num_requests: int
    num_rounds: int


def objective(error: dict[str, float]) -> float:
    """One number to rank candidates by: the mean of the median relative errors."""
    return sum(error.values()) / len(error)


def solve(rows: list[Row]) -> list[float]:
    return nnls([columns for columns, _ in rows], [target for _, target in rows])


def assemble(
    theta: list[float], prior: StepTimeCoefficients, cost: StepCost
) -> StepTimeCoefficients:
    """Coefficients from the fitted values (`fitrows.COLUMNS` order). The step constant keeps
    the weight read, then the per-layer overhead, at their prior values as far as it covers them
    (so a quantised or tensor-parallel variant still scales); the rest is step_overhead_s."""
    constant_s, gemm, attention, kv, request_s, api_s = theta
    weight_read = prior.weight_read
    if cost.weight_read_s > 0:
        weight_read = min(prior.weight_read, constant_s / cost.weight_read_s)
    left_s = constant_s - weight_read * cost.weight_read_s
    layer_s = min(prior.layer_overhead_s, left_s / cost.num_layers) if cost.num_layers else 0.0
    left_s -= layer_s * cost.num_layers
    return replace(
        prior,
        weight_read=weight_read,
        layer_overhead_s=layer_s,
        step_overhead_s=max(left_s, 0.0),
        gemm_compute=gemm,
        attention_compute=attention,
        kv_read=kv,
        request_overhead_s=request_s,
        api_overhead_s=api_s,
    )


def _settled(old: StepTimeCoefficients, new: StepTimeCoefficients) -> bool:
    pairs = zip(old.to_json().values(), new.to_json().values(), strict=True)
    return all(abs(n - o) <= SETTLED * max(abs(o), abs(n), 1e-15) for o, n in pairs)


def fit(runs: list[CalibrationRun], prior: StepTimeCoefficients) -> FitResult:
    """Coefficients for the measured runs, from the prior (module docstring)."""
    cost = runs[0].config.cost
    before = replay_all(runs, prior)
    rows = [
        row
        for run, cached in zip(runs, before.cached, strict=True)
        for row in direct_rows(run, cached, prior)
    ]
    if not rows:
        raise ValueError("no successful request with a first token to fit on")
    candidate = assemble(solve(rows), prior, cost)
    best, best_error = prior, before.error
    stacked: list[Row] = []
    num_rounds = 0
    while num_rounds < MAX_ROUNDS:
        num_rounds += 1
        replayed = replay_all(runs, candidate)
        if objective(replayed.error) < objective(best_error):
            best, best_error = candidate, replayed.error
        stacked += replayed.rows
        refined = assemble(solve(stacked), prior, cost)
        if _settled(candidate, refined):
            break
        candidate = refined
    num_requests = sum(len(run.measured.records) for run in runs)
    return FitResult(best, before.error, best_error, num_requests, num_rounds)
