"""Regression rows from a replay: which simulated steps each measured request spent its time in.

In the simulator a request's times are sums of step times, and a step time is linear in the
coefficients (`kvwise.sim.steptime`):

    TTFT    = api_overhead_s + (the part of the step running at arrival that it waited out)
              + the steps from its arrival to its first token
    decode  = the steps after its first token, up to its last

so a replay of the measured requests (`measured.py`) with given coefficients turns each measured
time into one linear equation (`fitrows.relative_row`). A request whose stream came in one
burst gives one equation for its E2E instead. The replay also says how far the simulator is
from the measurements with those coefficients (median relative errors).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from itertools import accumulate

from kvwise.bench.fitrows import Row, add, relative_row
from kvwise.bench.measured import MeasuredRun
from kvwise.bench.records import RequestRecord
from kvwise.sim.request import Request
from kvwise.sim.runner import SimConfig, SimResult, simulate
from kvwise.sim.steptime import BASIS_NAMES, StepTimeCoefficients, apply, basis


@dataclass(frozen=True)
class CalibrationRun:
    """One measured run and the simulated deployment it ran on."""

    measured: MeasuredRun
    config: SimConfig


@dataclass(frozen=True)
class Replayed:
    """Every run replayed with one set of coefficients."""

    rows: list[Row]
    error: dict[str, float]  # median relative error per figure: ttft, tpot, e2el
    cached: list[dict[int, int]]  # per run: request index -> prefix-cache hit tokens


class StepSums:
    """Prefix sums of each basis term over a replay's steps, and each step's start and length."""

    def __init__(self, result: SimResult, coefficients: StepTimeCoefficients) -> None:
        log = result.engine.step_log
        assert log is not None, "replays run with record_steps=True"
        steps = zip(log.tokens, log.pairs_x2, log.context, log.reqs, strict=True)
        self.terms = [basis(result.config.cost, *counts) for counts in steps]
        self.start_s = list(log.start_s)
        self.duration_s = [apply(coefficients, t) for t in self.terms]
        # [term][step + 1]: the sum of the term over the steps before
        self.prefix = [
            [0.0, *accumulate(t[k] for t in self.terms)] for k in range(len(BASIS_NAMES))
        ]

    def window(self, first: int, last: int) -> list[float]:
        """Each basis term summed over steps first..last (inclusive)."""
        return [p[last + 1] - p[first] for p in self.prefix]

    def until_first_token(self, request: Request) -> list[float]:
        """The steps from the request's arrival to its first token, and the part of the step in
        progress at arrival that it waited out (none when the engine was idle)."""
        sums = self.window(request.arrival_step, request.first_token_step)
        step = request.arrival_step
        if 0 < step < len(self.start_s):
            waited_s = self.start_s[step] - request.arrival_s
            duration_s = self.duration_s[step - 1]
            if waited_s > 0 and duration_s > 0:
                sums = add(sums, self.terms[step - 1], min(1.0, waited_s / duration_s))
        return sums

    def decode(self, request: Request) -> list[float]:
        return self.window(request.first_token_step + 1, request.last_step)


def request_rows(
    request: Request,
    record: RequestRecord,
    is_timed: bool,
    steps: StepSums,
    prior: StepTimeCoefficients,
) -> list[Row]:
    assert record.ttft_s is not None
    first = steps.until_first_token(request)
    has_decode = request.last_step > request.first_token_step
    if not is_timed:  # only the end of a burst-streamed request is timed
        total = add(first, steps.decode(request)) if has_decode else first
        return [relative_row(total, 1.0, record.e2el_s, prior)]
    rows = [relative_row(first, 1.0, record.ttft_s, prior)]
    decode_s = sum(record.itl_s)
    if has_decode and decode_s > 0:
        rows.append(relative_row(steps.decode(request), 0.0, decode_s, prior))
    return rows


def replay(run: CalibrationRun, coefficients: StepTimeCoefficients) -> SimResult:
    config = replace(run.config, coefficients=coefficients)
    return simulate(config, run.measured.workload, fast=True, record_steps=True)


def _add_errors(
    errors: dict[str, list[float]], request: Request, record: RequestRecord, is_timed: bool
) -> None:
    assert request.first_token_s is not None and record.ttft_s is not None
    errors["e2el"].append(abs(request.finish_s - request.sent_s - record.e2el_s) / record.e2el_s)
    if not is_timed:
        return
    sim_ttft_s = request.first_token_s - request.sent_s
    errors["ttft"].append(abs(sim_ttft_s - record.ttft_s) / record.ttft_s)
    tpot_s = record.tpot_s
    if tpot_s and request.num_output_tokens > 1:
        sim_tpot_s = (request.finish_s - request.first_token_s) / (request.num_output_tokens - 1)
        errors["tpot"].append(abs(sim_tpot_s - tpot_s) / tpot_s)


def median(values: list[float]) -> float:
    ordered = sorted(values)
    if not ordered:
        return 0.0
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def replay_all(runs: list[CalibrationRun], coefficients: StepTimeCoefficients) -> Replayed:
    rows: list[Row] = []
    errors: dict[str, list[float]] = {"ttft": [], "tpot": [], "e2el": []}
    cached: list[dict[int, int]] = []
    for run in runs:
        result = replay(run, coefficients)
        steps = StepSums(result, coefficients)
        simulated = {r.request_id: r for r in result.engine.finished}
        cached.append({i: r.num_cached_tokens for i, r in simulated.items()})
        for index, record in enumerate(run.measured.records):
            request = simulated.get(index)
            if request is None or request.first_token_s is None:
                continue
            is_timed = run.measured.is_timed[index]
            rows += request_rows(request, record, is_timed, steps, coefficients)
            _add_errors(errors, request, record, is_timed)
    return Replayed(rows, {k: median(v) for k, v in errors.items() if v}, cached)
