"""Fitting step-time coefficients from measured latencies and throughput.

Every step's time is linear in the coefficients (`steptime.py`), so every request-level figure
of a simulated run is too, once the run's schedule is fixed: a request's TTFT is the API
overhead and its wait for the API server's CPU (`kvwise.sim.frontend`), plus the remainder of
the step in progress when it arrived, plus every step until its first token; its TPOT is the
mean of the steps that produced its other tokens; the run's duration is the sum of its steps
plus idle time. `targets` turns a run (with its step log) and
the measured figures into rows `row . coefficients + offset ~ measured`; `fit_coefficients`
solves the rows for non-negative coefficients, by relative error, with a ridge towards a prior
(so that terms the data cannot tell apart stay at physically sensible values). The schedule
itself depends on the coefficients, so callers alternate simulating and fitting a few times.

`kvwise calibrate` uses the same functions with a user's own measurements.
"""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass

from kvwise.bench.lsq import bounded_lsq
from kvwise.sim.request import Request
from kvwise.sim.runner import SimResult
from kvwise.sim.steptime import (
    BASIS_NAMES,
    StepTimeCoefficients,
    basis,
    gemm_excess_s,
    weight_read_step_s,
)

FRONT_END_NAMES = ("api_overhead_s", "frontend_request_s")
COEFFICIENT_NAMES = (*BASIS_NAMES, *FRONT_END_NAMES)


def values_of(coefficients: StepTimeCoefficients) -> tuple[float, ...]:
    """Every coefficient, in COEFFICIENT_NAMES order."""
    return tuple(getattr(coefficients, name) for name in COEFFICIENT_NAMES)


def from_values(values: list[float] | tuple[float, ...]) -> StepTimeCoefficients:
    return StepTimeCoefficients(**dict(zip(COEFFICIENT_NAMES, values, strict=True)))


@dataclass(frozen=True)
class Target:
    """row . coefficients + offset is the model's value of a measured figure."""

    name: str
    row: tuple[float, ...]  # one entry per COEFFICIENT_NAMES
    offset: float
    measured: float
    weight: float = 1.0

    def predicted(self, coefficients: StepTimeCoefficients) -> float:
        return (
            sum(r * c for r, c in zip(self.row, values_of(coefficients), strict=True)) + self.offset
        )


class _Windows:
    """Basis sums over ranges of steps, from prefix sums of the step log."""

    def __init__(self, result: SimResult) -> None:
        self.queued = result.frontend.queued  # by request id: ids are numbered in send order
        log = result.engine.step_log
        assert log is not None, "simulate(..., record_steps=True) keeps the step log"
        self.cost = cost = result.config.cost
        self.sums = [_prefix(a) for a in (log.tokens, log.pairs_x2, log.context, log.reqs)]
        self.excess = _prefix([gemm_excess_s(cost, tokens) for tokens in log.tokens])
        # an MoE step's weight read depends on its own token count: summed step by step
        self.weights = (
            _prefix([weight_read_step_s(cost, tokens) for tokens in log.tokens])
            if cost.expert_read_s
            else None
        )
        self.start_s = log.start_s
        self.end_s = result.engine.step_end_s

    def basis(self, first: int, stop: int) -> list[float]:
        """Basis terms summed over steps first .. stop - 1 (front-end columns last, 0)."""
        tokens, pairs_x2, context, reqs = (int(s[stop] - s[first]) for s in self.sums)
        row = list(basis(self.cost, tokens, pairs_x2, context, reqs, num_steps=stop - first))
        row[BASIS_NAMES.index("gemm_compute")] = self.excess[stop] - self.excess[first]
        if self.weights is not None:
            row[BASIS_NAMES.index("weight_read")] = self.weights[stop] - self.weights[first]
        return [*row, 0.0, 0.0]

    def ttft_row(self, request: Request) -> tuple[list[float], float]:
        """API server (latency, and k requests' CPU time from the start of its busy period) +
        the rest of the step running at arrival + steps to the first token; and the offset
        (the busy period's start less the send time)."""
        row = self.basis(request.arrival_step, request.first_token_step + 1)
        step = request.arrival_step
        wait_s = self.start_s[step] - request.arrival_s if step < len(self.start_s) else 0.0
        if step > 0 and wait_s > 0:
            previous_s = self.end_s[step - 1] - self.start_s[step - 1]
            fraction = min(wait_s / previous_s, 1.0) if previous_s > 0 else 0.0
            row = [a + fraction * b for a, b in zip(row, self.basis(step - 1, step), strict=False)]
        num_served, offset_s = self.queued[request.request_id]
        row[-2], row[-1] = 1.0, float(num_served)
        return row, offset_s

    def decode_row(self, request: Request) -> list[float]:
        return self.basis(request.first_token_step + 1, request.last_step + 1)


def _prefix(values: array | list[float]) -> list[float]:
    sums = [0.0]
    for value in values:
        sums.append(sums[-1] + value)
    return sums


def _mean(rows: list[list[float]]) -> tuple[float, ...]:
    return tuple(sum(column) / len(rows) for column in zip(*rows, strict=False))


def targets(
    result: SimResult, measured: dict[str, float], coefficients: StepTimeCoefficients
) -> list[Target]:
    """Rows for the measured figures present: mean_tpot_ms, median_ttft_ms, mean_ttft_ms,
    mean_e2el_ms, output_throughput (through the run's duration)."""
    windows = _Windows(result)
    done = [r for r in result.engine.finished if r.first_token_s is not None]
    ttft_offset = {r.request_id: windows.ttft_row(r) for r in done}
    ttft = {i: row for i, (row, _) in ttft_offset.items()}
    offset = {i: offset_s for i, (_, offset_s) in ttft_offset.items()}
    decode = {r.request_id: windows.decode_row(r) for r in done}
    found: list[Target] = []
    if "mean_tpot_ms" in measured:
        rows = [
            [v / (r.num_output_tokens - 1) for v in decode[r.request_id]]
            for r in done
            if r.num_output_tokens > 1
        ]
        found.append(Target("mean_tpot_ms", _mean(rows), 0.0, measured["mean_tpot_ms"] / 1000))
    if "median_ttft_ms" in measured:
        values = values_of(coefficients)
        ranked = sorted(
            done,
            key=lambda r: (
                sum(a * b for a, b in zip(ttft[r.request_id], values, strict=True))
                + offset[r.request_id]
            ),
        )
        middle = [r.request_id for r in ranked[(len(ranked) - 1) // 2 : len(ranked) // 2 + 1]]
        found.append(
            Target(
                "median_ttft_ms",
                _mean([ttft[i] for i in middle]),
                sum(offset[i] for i in middle) / len(middle),
                measured["median_ttft_ms"] / 1000,
            )
        )
    mean_offset_s = sum(offset.values()) / max(len(offset), 1)
    if "mean_ttft_ms" in measured:
        found.append(
            Target(
                "mean_ttft_ms",
                _mean(list(ttft.values())),
                mean_offset_s,
                measured["mean_ttft_ms"] / 1000,
            )
        )
    if "mean_e2el_ms" in measured:
        rows = [[a + b for a, b in zip(ttft[i], decode[i], strict=True)] for i in ttft]
        found.append(
            Target("mean_e2el_ms", _mean(rows), mean_offset_s, measured["mean_e2el_ms"] / 1000)
        )
    if "output_throughput" in measured and measured["output_throughput"] > 0 and done:
        # the run ends when its last request does: that request's send time (fixed by the
        # arrivals) plus its E2E (linear in the coefficients)
        last = max(done, key=lambda r: (r.finish_s, r.request_id))
        start_s = min(r.sent_s for r in done)
        row = tuple(
            a + b for a, b in zip(ttft[last.request_id], decode[last.request_id], strict=True)
        )
        measured_s = result.metrics["total_output_tokens"] / measured["output_throughput"]
        found.append(
            Target("duration_s", row, last.sent_s - start_s + offset[last.request_id], measured_s)
        )
    return found


def blend(
    old: StepTimeCoefficients, new: StepTimeCoefficients, step: float = 0.5
) -> StepTimeCoefficients:
    """Move part of the way from `old` to `new`. The rows linearise around the schedule of the
    last simulation, but a slower step also means larger batches (and a faster one smaller):
    full steps overshoot and oscillate, damped ones converge."""
    pairs = zip(values_of(old), values_of(new), strict=True)
    return from_values([a + step * (b - a) for a, b in pairs])


# Nothing moves bytes faster than the bandwidth or computes faster than the peak: the
# efficiency factors of roofline terms are at least 1. Overheads are at least 0.
LOWER_BOUNDS = {
    "weight_read": 1.0,
    "kv_read": 1.0,
    "gemm_compute": 1.0,
    "attention_compute": 1.0,
    "allreduce": 1.0,
}


def fit_coefficients(
    rows: list[Target],
    prior: StepTimeCoefficients,
    *,
    ridge: float = 0.2,
    robust_rounds: int = 8,
) -> StepTimeCoefficients:
    """Coefficients minimising the rows' relative errors, robustly, with a ridge towards `prior`.

    The loss is close to the sum of absolute relative errors (iteratively reweighted least
    squares: each round weights a row by 1 / max(|error|, 5 %)), so the fit follows the bulk of
    the measurements rather than a few points the model cannot explain. Each round solves a
    bounded least-squares problem (`_solve`).
    """
    fitted = prior
    weights = [t.weight for t in rows]
    for _ in range(robust_rounds):
        fitted = _solve(rows, weights, prior, ridge)
        errors = [abs(t.predicted(fitted) - t.measured) / t.measured for t in rows]
        weights = [t.weight / max(e, ROBUST_FLOOR) for t, e in zip(rows, errors, strict=False)]
    return fitted


ROBUST_FLOOR = 0.05


UNIT_S = 1e-5  # the scale of an overhead whose prior is 0 (seconds)


def _solve(
    rows: list[Target],
    weights: list[float],
    prior: StepTimeCoefficients,
    ridge: float,
) -> StepTimeCoefficients:
    """min sum(w * rel_err^2) + ridge * sum((x - x_prior)^2) within LOWER_BOUNDS, on
    x = c / scale: one bounded least-squares problem (`kvwise.bench.lsq`), a row per target
    and a ridge row per coefficient. The scale is the prior itself, or UNIT_S for overheads
    the prior sets to 0."""
    prior_values = values_of(prior)
    scale = [v if v > 0 else UNIT_S for v in prior_values]
    anchor = [v / s for v, s in zip(prior_values, scale, strict=True)]  # 1, or 0
    lower = [
        LOWER_BOUNDS.get(name, 0.0) / s for name, s in zip(COEFFICIENT_NAMES, scale, strict=True)
    ]
    matrix: list[list[float]] = []
    rhs: list[float] = []
    for target, weight in zip(rows, weights, strict=True):
        w = math.sqrt(weight) / target.measured  # relative errors
        matrix.append([w * r * s for r, s in zip(target.row, scale, strict=True)])
        rhs.append(w * (target.measured - target.offset))
    root = math.sqrt(ridge)
    for i, value in enumerate(anchor):  # pulls x towards the prior
        matrix.append([root if j == i else 0.0 for j in range(len(scale))])
        rhs.append(root * value)
    x = bounded_lsq(matrix, rhs, lower)
    return from_values([xi * si for xi, si in zip(x, scale, strict=True)])
