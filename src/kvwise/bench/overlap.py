"""What the engine's steps held while a request ran, from the measured timeline alone.

vLLM gives every running request one token per engine step (decodes are scheduled first in
V1), so the steps of a request's decode phase are the gaps between its tokens, and whatever
else ran in those steps can be read off the other requests' timelines:

* decode tokens: each other request's tokens that fell inside the window, its token count
  interpolated linearly between its first and its last token (streams may merge tokens into
  one chunk, so per-chunk times are not per-token times);
* context: each of those tokens reads its request's prompt plus the tokens generated so far;
* prefills: requests whose first token (the end of their prefill step) fell inside the window,
  with their uncached prompt tokens.

A decode window of n tokens is n - 1 steps; its time is the sum of their step times, which is
linear in the step-time coefficients, with the window's token totals in place of one step's
(`aggregate_basis`). TTFT is one prefill step (or ceil(prompt / free budget) chunks), with the
requests decoding at that moment, plus, when the engine was busy on arrival, on average half a
step in progress (the residual of the step it arrived in).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvwise.bench.fitrows import Row, add, relative_row
from kvwise.bench.records import RequestRecord
from kvwise.bench.replayfit import CalibrationRun
from kvwise.sim.steptime import (
    BASIS_NAMES,
    StepCost,
    StepTimeCoefficients,
    basis,
    gemm_excess_s,
)

# basis terms paid once per step whatever its tokens: scaled by the number of steps
PER_STEP_TERMS = frozenset(
    BASIS_NAMES.index(name)
    for name in ("weight_read", "allreduce_call_s", "step_overhead_s", "layer_overhead_s")
)
GEMM = BASIS_NAMES.index("gemm_compute")


@dataclass(frozen=True)
class Phase:
    """One request's measured timeline (seconds on the run's clock) and its token counts."""

    sent_s: float
    first_s: float  # first token: the end of its prefill step
    last_s: float  # last token
    finish_s: float
    num_prompt_tokens: int
    num_output_tokens: int
    num_uncached_tokens: int  # prompt tokens the prefill computed (the rest hit the cache)

    def decoded_by(self, t_s: float) -> float:
        """Decode tokens produced by time t (linear between its first and last token)."""
        num_decode = self.num_output_tokens - 1
        if t_s <= self.first_s or num_decode <= 0:
            return 0.0
        if t_s >= self.last_s:
            return float(num_decode)
        return num_decode * (t_s - self.first_s) / (self.last_s - self.first_s)


def phase_of(
    record: RequestRecord, num_cached_tokens: int, is_timed: bool, typical_gap_s: float | None
) -> Phase:
    """The request's phases; for one streamed in a burst, its decode is placed at the end of
    the request, a typical step per token (or spread over the request without a typical step)."""
    assert record.first_token_s is not None and record.last_token_s is not None
    prompt = record.input_tokens
    num_output = record.output_tokens or 1
    first_s, last_s = record.first_token_s, record.last_token_s
    if not is_timed:
        last_s = record.finish_s
        decode_s = (
            (num_output - 1) * typical_gap_s
            if typical_gap_s
            else record.e2el_s * (1 - 1 / num_output)
        )
        first_s = max(record.sent_s, last_s - decode_s)
    return Phase(
        sent_s=record.sent_s,
        first_s=first_s,
        last_s=last_s,
        finish_s=record.finish_s,
        num_prompt_tokens=prompt,
        num_output_tokens=num_output,
        num_uncached_tokens=max(1, prompt - num_cached_tokens),
    )


@dataclass
class StepTotals:
    """Token totals over some steps (the arguments of `steptime.basis`, summed), and the size of
    each prefill among them (the GEMM time of a step is not linear in its tokens)."""

    num_steps: float = 0.0
    prefill: float = 0.0
    pairs_x2: float = 0.0
    decode: float = 0.0
    context: float = 0.0
    reqs: float = 0.0
    prefill_sizes: tuple[int, ...] = ()

    def add_prefill(self, phase: Phase) -> None:
        computed = phase.num_uncached_tokens
        cached = phase.num_prompt_tokens - computed
        self.prefill += computed
        self.prefill_sizes += (computed,)
        # causal query-key pairs of the chunk, twice (the simulator's prefill_attention_x2)
        self.pairs_x2 += computed * (2 * cached + computed + 1)
        self.reqs += 1

    def add_decode(self, phase: Phase, start_s: float, end_s: float) -> None:
        before, after = phase.decoded_by(start_s), phase.decoded_by(end_s)
        if after <= before:
            return
        self.decode += after - before
        # each token reads the prompt and the tokens before it: the mean over the window
        self.context += (after - before) * (phase.num_prompt_tokens + (before + after) / 2)
        self.reqs += after - before

    def _counts(self) -> tuple[float, ...]:
        return (self.num_steps, self.prefill, self.pairs_x2, self.decode, self.context, self.reqs)

    @classmethod
    def _of(cls, counts: list[float], prefill_sizes: tuple[int, ...] = ()) -> StepTotals:
        steps, prefill, pairs_x2, decode, context, reqs = counts
        return cls(steps, prefill, pairs_x2, decode, context, reqs, prefill_sizes)

    def scaled(self, factor: float) -> StepTotals:
        """The same steps `factor` times (prefills are not repeated: callers add them after)."""
        assert not self.prefill_sizes, "scale decode-only totals"
        return StepTotals._of([factor * v for v in self._counts()])

    def plus(self, other: StepTotals) -> StepTotals:
        counts = [a + b for a, b in zip(self._counts(), other._counts(), strict=True)]
        return StepTotals._of(counts, self.prefill_sizes + other.prefill_sizes)


def aggregate_basis(cost: StepCost, totals: StepTotals) -> list[float]:
    """The basis terms summed over the steps: per-step terms times the number of steps, the
    terms linear in token counts from the totals. The GEMM excess is not linear (zero below
    the roofline ridge): every step has the mean decode batch, and each prefill adds its
    tokens to one of them."""
    tokens = totals.prefill + totals.decode
    counts = (round(tokens), round(totals.pairs_x2), round(totals.context), round(totals.reqs))
    terms = list(basis(cost, *counts))
    terms = [t * totals.num_steps if i in PER_STEP_TERMS else t for i, t in enumerate(terms)]
    if totals.num_steps:
        batch = totals.decode / totals.num_steps
        base_s = gemm_excess_s(cost, round(batch))
        extra_s = sum(
            gemm_excess_s(cost, round(batch + size)) - base_s for size in totals.prefill_sizes
        )
        terms[GEMM] = totals.num_steps * base_s + extra_s
    return terms


def decode_window(phase: Phase, others: list[Phase]) -> StepTotals:
    """The steps between a request's first and last token."""
    totals = StepTotals(num_steps=phase.num_output_tokens - 1)
    for other in others:
        totals.add_decode(other, phase.first_s, phase.last_s)
        if other is not phase and phase.first_s < other.first_s <= phase.last_s:
            totals.add_prefill(other)
    return totals


def prefill_step(phase: Phase, others: list[Phase], same_step_s: float, budget: int) -> StepTotals:
    """The step(s) that computed a request's prompt: the requests decoding at that moment (one
    token each, in every chunk of a prompt longer than the free budget), the prefills that
    finished with it, and its own."""
    decoding = StepTotals(num_steps=1)
    shared = StepTotals()
    for other in others:
        if other is phase:
            continue
        if abs(other.first_s - phase.first_s) <= same_step_s:
            shared.add_prefill(other)
        elif other.first_s < phase.first_s <= other.last_s + same_step_s:
            decoding.decode += 1
            decoding.context += other.num_prompt_tokens + other.decoded_by(phase.first_s)
            decoding.reqs += 1
    chunks = max(1, math.ceil(phase.num_uncached_tokens / max(1.0, budget - decoding.decode)))
    totals = decoding.scaled(chunks).plus(shared)
    totals.add_prefill(phase)
    return totals


def in_progress(phase: Phase, others: list[Phase]) -> StepTotals:
    """Half the step running when the request was sent (zero when the engine was idle)."""
    step = StepTotals()
    for other in others:
        if other is not phase and other.first_s < phase.sent_s < other.last_s:
            step.decode += 1
            step.context += other.num_prompt_tokens + other.decoded_by(phase.sent_s)
            step.reqs += 1
    if not step.decode:
        return StepTotals()
    step.num_steps = 1
    return step.scaled(0.5)


def direct_rows(
    run: CalibrationRun, cached: dict[int, int], prior: StepTimeCoefficients
) -> list[Row]:
    """Rows from the measured timelines alone: a TTFT and a decode row per timed request, an
    E2E row per request streamed in a burst."""
    measured = run.measured
    phases = [
        phase_of(r, cached.get(i, 0), measured.is_timed[i], measured.typical_gap_s)
        for i, r in enumerate(measured.records)
    ]
    same_step_s = (measured.typical_gap_s or 0.0) / 2
    budget = run.config.engine.max_num_batched_tokens
    cost = run.config.cost
    rows = []
    for record, phase, is_timed in zip(measured.records, phases, measured.is_timed, strict=True):
        assert record.ttft_s is not None
        first = aggregate_basis(
            cost, prefill_step(phase, phases, same_step_s, budget).plus(in_progress(phase, phases))
        )
        decode = aggregate_basis(cost, decode_window(phase, phases))
        if not is_timed:
            rows.append(relative_row(add(first, decode), 1.0, record.e2el_s, prior))
            continue
        rows.append(relative_row(first, 1.0, record.ttft_s, prior))
        if phase.num_output_tokens > 1 and phase.last_s > phase.first_s:
            rows.append(relative_row(decode, 0.0, phase.last_s - phase.first_s, prior))
    return rows
