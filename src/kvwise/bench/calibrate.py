"""Fit the simulator's step-time coefficients to measured requests.

The estimator: replay the measured requests in the simulator (`measured.py`), read off which
engine steps each request spent its time in, and regress the measured times on the step-time
basis terms of those steps. In the simulator a request's times are sums of step times, and a
step time is linear in the coefficients (`kvwise.sim.steptime`):

    TTFT     = api_overhead_s + (rest of the step running when it arrived)
               + sum over steps from its arrival to its first token of  sum_k c_k basis_k(step)
    decode   = sum over steps after its first token up to its last of   sum_k c_k basis_k(step)

so each measured request gives two linear equations in the coefficients: one row of basis sums
per TTFT and per decode time. The rows are divided by the measured value (relative error, so
short TTFTs weigh as much as long decodes) and solved by non-negative least squares. Which
steps a request shares with which others depends on the step times themselves (slower steps,
more overlap, bigger batches), so the replay is redone with the fitted coefficients and the
fit repeated until the coefficients settle (a fixed point; a few rounds). The round whose
replay matches the measurements best is kept.

What one (GPU, model) can tell apart, and so what is fitted:
  step constant      seconds per step, whatever the batch: weight_read, layer_overhead_s and
                     step_overhead_s are the same column on one GPU and model. The physical
                     terms keep their prior values as far as the constant covers them (so a
                     quantised or TP variant still scales); the rest is step_overhead_s.
  prefill_compute    prefill tokens and their attention pairs
  decode_compute     decode tokens and their attention over the context
  kv_read            KV bytes read by decode tokens
  api_overhead_s     TTFT rows only: HTTP, tokenisation, the hop to the engine
Held at their prior values: allreduce and allreduce_call_s (zero without tensor parallelism)
and request_overhead_s (per request in the step: on a single decode batch it is the same
column as decode tokens).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from itertools import accumulate

from kvwise.bench.lsq import nnls
from kvwise.bench.measured import MeasuredRun
from kvwise.bench.overlap import aggregate_basis, decode_window, in_progress, phase_of, prefill_step
from kvwise.sim.request import Request
from kvwise.sim.runner import SimConfig, SimResult, simulate
from kvwise.sim.steptime import BASIS_NAMES, StepCost, StepTimeCoefficients, apply, basis

COLUMNS = ("step_constant_s", "prefill_compute", "decode_compute", "kv_read", "api_overhead_s")
HELD = ("allreduce", "allreduce_call_s", "request_overhead_s")
_INDEX = {name: i for i, name in enumerate(BASIS_NAMES)}
MAX_ROUNDS = 12
SETTLED = 0.005  # relative change of every fitted value below which the fixed point is reached


@dataclass(frozen=True)
class CalibrationRun:
    """One measured run and the simulated deployment it ran on (coefficients: the prior)."""

    measured: MeasuredRun
    config: SimConfig


@dataclass(frozen=True)
class FitResult:
    coefficients: StepTimeCoefficients
    error_before: dict[str, float]  # median relative error per figure, prior coefficients
    error_after: dict[str, float]
    num_requests: int
    num_rounds: int


class _StepSums:
    """Prefix sums of each basis term over a replay's steps, and each step's start and length."""

    def __init__(self, result: SimResult, cost: StepCost, coefficients: StepTimeCoefficients):
        log = result.engine.step_log
        assert log is not None, "replays run with record_steps=True"
        terms = [
            basis(cost, p, a, d, c, r)
            for p, a, d, c, r in zip(
                log.prefill, log.pairs_x2, log.decode, log.context, log.reqs, strict=True
            )
        ]
        self.terms = terms
        self.start_s = list(log.start_s)
        self.duration_s = [apply(coefficients, t) for t in terms]
        self.prefix = [
            [0.0, *accumulate(t[k] for t in terms)] for k in range(len(BASIS_NAMES))
        ]  # [term][step + 1]

    def window(self, first: int, last: int) -> list[float]:
        """Each basis term summed over steps first..last (inclusive)."""
        return [p[last + 1] - p[first] for p in self.prefix]

    def wait_fraction(self, request: Request) -> float:
        """The part of the step in progress when the request reached the engine that it waited
        out (0 when the engine was idle: the step starts on arrival)."""
        step = request.arrival_step
        if step == 0 or step >= len(self.start_s):
            return 0.0
        waited_s = self.start_s[step] - request.arrival_s
        duration_s = self.duration_s[step - 1]
        return min(1.0, waited_s / duration_s) if waited_s > 0 and duration_s > 0 else 0.0


def _row(sums: list[float], api: float, prior: StepTimeCoefficients) -> tuple[list[float], float]:
    """Regression row (COLUMNS order) and the held terms' seconds to take off the target."""
    held_s = sum(getattr(prior, name) * sums[_INDEX[name]] for name in HELD)
    columns = [
        sums[_INDEX["step_overhead_s"]],  # 1 per step: the number of steps
        sums[_INDEX["prefill_compute"]],
        sums[_INDEX["decode_compute"]],
        sums[_INDEX["kv_read"]],
        api,
    ]
    return columns, held_s


def _relative(
    sums: list[float], api: float, measured_s: float, prior: StepTimeCoefficients
) -> tuple[list[float], float]:
    columns, held_s = _row(sums, api, prior)
    return [c / measured_s for c in columns], (measured_s - held_s) / measured_s


def direct_rows(
    run: CalibrationRun, cached: dict[int, int], prior: StepTimeCoefficients
) -> tuple[list[list[float]], list[float]]:
    """Rows from the measured timeline alone (`overlap.py`): one per TTFT, one per decode."""
    records = run.measured.records
    phases = [phase_of(r, cached.get(i, 0)) for i, r in enumerate(records)]
    gaps = sorted(g for r in records for g in r.itl_s)
    same_step_s = gaps[len(gaps) // 2] / 2 if gaps else 0.0
    budget = run.config.engine.max_num_batched_tokens
    cost = run.config.cost
    rows, targets = [], []
    for record, phase, is_timed in zip(records, phases, run.measured.is_timed, strict=True):
        if not is_timed:
            continue
        assert record.ttft_s is not None
        totals = prefill_step(phase, phases, same_step_s, budget).plus(in_progress(phase, phases))
        row, target = _relative(aggregate_basis(cost, totals), 1.0, record.ttft_s, prior)
        rows.append(row)
        targets.append(target)
        decode_s = phase.last_s - phase.first_s
        if phase.num_output_tokens > 1 and decode_s > 0:
            sums = aggregate_basis(cost, decode_window(phase, phases))
            row, target = _relative(sums, 0.0, decode_s, prior)
            rows.append(row)
            targets.append(target)
    return rows, targets


def _request_rows(
    request: Request, ttft_s: float, decode_s: float, steps: _StepSums, prior: StepTimeCoefficients
) -> list[tuple[list[float], float]]:
    """(row, target) pairs, both divided by the measured value."""
    assert request.first_token_s is not None
    sums = steps.window(request.arrival_step, request.first_token_step)
    wait = steps.wait_fraction(request)
    if wait:
        sums = [
            s + wait * t for s, t in zip(sums, steps.terms[request.arrival_step - 1], strict=True)
        ]
    rows = []
    columns, held_s = _row(sums, 1.0, prior)
    rows.append(([c / ttft_s for c in columns], (ttft_s - held_s) / ttft_s))
    if request.last_step > request.first_token_step and decode_s > 0:
        columns, held_s = _row(
            steps.window(request.first_token_step + 1, request.last_step), 0.0, prior
        )
        rows.append(([c / decode_s for c in columns], (decode_s - held_s) / decode_s))
    return rows


def replay(run: CalibrationRun, coefficients: StepTimeCoefficients) -> SimResult:
    config = replace(run.config, coefficients=coefficients)
    return simulate(config, run.measured.workload, fast=True, record_steps=True)


def _by_id(result: SimResult) -> dict[int, Request]:
    return {r.request_id: r for r in result.engine.finished}


@dataclass(frozen=True)
class _Replayed:
    """Every run replayed with one set of coefficients."""

    rows: list[list[float]]
    targets: list[float]
    error: dict[str, float]  # median relative error of the replay, per figure
    cached: list[dict[int, int]]  # per run: request index -> prefix-cache hit tokens


def _replay_all(runs: list[CalibrationRun], coefficients: StepTimeCoefficients) -> _Replayed:
    rows: list[list[float]] = []
    targets: list[float] = []
    errors: dict[str, list[float]] = {"ttft": [], "tpot": [], "e2el": []}
    cached: list[dict[int, int]] = []
    for run in runs:
        result = replay(run, coefficients)
        steps = _StepSums(result, run.config.cost, coefficients)
        simulated = _by_id(result)
        cached.append({i: r.num_cached_tokens for i, r in simulated.items()})
        for request_id, record in enumerate(run.measured.records):
            request = simulated.get(request_id)
            if request is None or request.first_token_s is None or record.ttft_s is None:
                continue
            if not run.measured.is_timed[request_id]:
                continue
            decode_s = sum(record.itl_s)
            for row, target in _request_rows(request, record.ttft_s, decode_s, steps, coefficients):
                rows.append(row)
                targets.append(target)
            _add_errors(errors, request, record.ttft_s, record.e2el_s, record.tpot_s)
    return _Replayed(rows, targets, {k: _median(v) for k, v in errors.items()}, cached)


def _add_errors(
    errors: dict[str, list[float]],
    request: Request,
    ttft_s: float,
    e2el_s: float,
    tpot_s: float | None,
) -> None:
    assert request.first_token_s is not None
    sim_ttft = request.first_token_s - request.sent_s
    errors["ttft"].append(abs(sim_ttft - ttft_s) / ttft_s)
    errors["e2el"].append(abs(request.finish_s - request.sent_s - e2el_s) / e2el_s)
    if tpot_s and request.num_output_tokens > 1:
        sim_tpot = (request.finish_s - request.first_token_s) / (request.num_output_tokens - 1)
        errors["tpot"].append(abs(sim_tpot - tpot_s) / tpot_s)


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    if not ordered:
        return 0.0
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def objective(error: dict[str, float]) -> float:
    """One number to rank candidates by: the mean of the median relative errors."""
    return sum(error.values()) / len(error)


def assemble(
    theta: list[float], prior: StepTimeCoefficients, cost: StepCost
) -> StepTimeCoefficients:
    """Coefficients from the fitted values (COLUMNS order). The step constant keeps the weight
    read, then the per-layer overhead, at their prior values as far as it covers them; the rest
    is step_overhead_s."""
    constant_s, prefill, decode, kv, api_s = theta
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
        prefill_compute=prefill,
        decode_compute=decode,
        kv_read=kv,
        api_overhead_s=api_s,
    )


def _settled(old: StepTimeCoefficients, new: StepTimeCoefficients) -> bool:
    pairs = zip(old.to_json().values(), new.to_json().values(), strict=True)
    return all(abs(n - o) <= SETTLED * max(abs(o), abs(n), 1e-15) for o, n in pairs)


def fit(runs: list[CalibrationRun], prior: StepTimeCoefficients) -> FitResult:
    """The direct estimate from the measured timelines, refined by replays (module docstring);
    the candidate whose replay matches the measurements best wins, the prior included."""
    cost = runs[0].config.cost
    before = _replay_all(runs, prior)
    direct = [
        direct_rows(run, cached, prior) for run, cached in zip(runs, before.cached, strict=True)
    ]
    rows = [row for run_rows, _ in direct for row in run_rows]
    if not rows:
        raise ValueError("no successful request with a first token to fit on")
    targets = [t for _, run_targets in direct for t in run_targets]
    candidate = assemble(nnls(rows, targets), prior, cost)
    best, best_error = prior, before.error
    stacked_rows: list[list[float]] = []
    stacked_targets: list[float] = []
    num_rounds = 0
    while num_rounds < MAX_ROUNDS:
        num_rounds += 1
        replayed = _replay_all(runs, candidate)
        if objective(replayed.error) < objective(best_error):
            best, best_error = candidate, replayed.error
        # rows of every replay so far: the batches a replay reconstructs jump with small changes
        # of step time, and the stack averages those jumps out
        stacked_rows += replayed.rows
        stacked_targets += replayed.targets
        refined = assemble(nnls(stacked_rows, stacked_targets), prior, cost)
        if _settled(candidate, refined):
            break
        candidate = refined
    num_requests = sum(len(run.measured.records) for run in runs)
    return FitResult(best, before.error, best_error, num_requests, num_rounds)
