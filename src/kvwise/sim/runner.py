"""`simulate(config, workload, seed)`: the public entry point, and the clients that drive it.

The driver plays the benchmark clients: it starts sessions (open loop at their start times, or
closed loop as slots free up), sends each turn after the previous answer plus the think time,
and builds each prompt from the session's history. A request reaches the engine after the API
server has passed it on (`frontend.py`: a latency, and a queue for its CPU); TTFT and E2E count
from the send.
"""

from __future__ import annotations

import gc
import random
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, Final

from kvwise.core.trimming import stable_cut
from kvwise.sim.engine import Engine, EngineConfig
from kvwise.sim.frontend import FrontEndQueue, streamed_first_tokens
from kvwise.sim.metrics import summarize, time_series
from kvwise.sim.request import Request, Segment, Status
from kvwise.sim.steptime import StepCost, StepTimeCoefficients, step_weights
from kvwise.sim.workloads import Session, Workload, WorkloadSpec, build_workload

OUTPUT_SEG_BASE: Final = 2**56  # generated answers get segment ids above every prompt segment id


@dataclass(frozen=True)
class SimConfig:
    """Everything that defines one simulated deployment."""

    engine: EngineConfig
    cost: StepCost
    coefficients: StepTimeCoefficients
    label: str = ""
    # A gateway that keeps session history (kvwise serve --session-history) trims a prompt to
    # this many tokens including max_tokens: the first segment (system prompt) and the newest
    # ones stay. None: prompts are sent whole, and vLLM rejects those beyond max_model_len.
    history_budget_tokens: int | None = None


@dataclass(frozen=True)
class SimResult:
    config: SimConfig
    workload: Workload
    metrics: dict[str, Any]
    series: dict[str, list[float]]
    engine: Engine  # raw records (per-request state, step log when recorded)
    frontend: FrontEndQueue  # the API server's queue, per request in the order sent


def trim_history(prompt: list[Segment], budget_tokens: int) -> tuple[list[Segment], bool]:
    """The gateway's cut (`kvwise.core.trimming`): the first segment (system prompt) stays, the
    oldest of the rest go once the prompt passes the budget, down to the low-water mark. The
    newest segment always stays, so a too-long turn still reaches vLLM (and is rejected)."""
    if len(prompt) <= 2:
        return prompt, False
    head, rest = prompt[0], prompt[1:]
    cut = stable_cut([n for _, n in rest], budget_tokens - head[1])
    return ([head, *rest[cut:]], True) if cut else (prompt, False)


class _SessionState:
    __slots__ = ("history", "index", "previous", "session", "turn")

    def __init__(self, index: int, session: Session) -> None:
        self.index = index
        self.session = session
        self.turn = 0
        self.history: list[Segment] = []
        self.previous: Request | None = None  # the last turn, whose block hashes carry over


class _Driver:
    def __init__(
        self,
        workload: Workload,
        engine: Engine,
        frontend: FrontEndQueue,
        history_budget_tokens: int | None = None,
    ) -> None:
        self.workload = workload
        self.engine = engine
        self.frontend = frontend
        self.history_budget_tokens = history_budget_tokens
        self.next_request_id = 0
        self.in_flight = 0
        starts = workload.start_times_s or (0.0,) * len(workload.sessions)
        self.pending = deque(zip(range(len(workload.sessions)), starts, strict=False))

    def start(self) -> None:
        self._fill_slots(0.0)

    def _fill_slots(self, now_s: float) -> None:
        limit = self.workload.max_concurrency
        while self.pending and (limit is None or self.in_flight < limit):
            index, start_s = self.pending.popleft()
            self.in_flight += 1
            state = _SessionState(index, self.workload.sessions[index])
            self._send(state, max(start_s, now_s))

    def _send(self, state: _SessionState, sent_s: float) -> None:
        turn = state.session.turns[state.turn]
        prompt = (
            state.history + list(turn.new_segments)
            if state.session.keeps_history
            else list(turn.new_segments)
        )
        trimmed = False
        if self.history_budget_tokens is not None and state.session.keeps_history:
            prompt, trimmed = trim_history(prompt, self.history_budget_tokens - turn.max_tokens)
        request_id = self.next_request_id
        self.next_request_id += 1
        request = Request(
            request_id,
            prompt,
            turn.max_tokens,
            output_len=turn.output_len,
            output_seg_id=OUTPUT_SEG_BASE + request_id,
            sent_s=sent_s,
            arrival_s=self.frontend.arrival_s(sent_s),
            owner=state,
            is_shareable=self.workload.has_shared_segments or len(state.session.turns) > 1,
        )
        if state.previous is not None and not trimmed:
            request.inherit_block_hashes(state.previous)
        self.engine.submit(request)

    def on_done(self, request: Request) -> None:
        state = request.owner
        assert isinstance(state, _SessionState)
        state.turn += 1
        if request.status is Status.FINISHED and state.turn < len(state.session.turns):
            state.history = [*request.prompt, (request.output_seg_id, request.num_output_tokens)]
            state.previous = request
            think_s = state.session.turns[state.turn].think_time_s
            self._send(state, request.finish_s + think_s)
            return
        # the session is over (last turn, or a rejected request ends it, as a 400 would)
        self.in_flight -= 1
        self._fill_slots(request.finish_s)


def simulate(
    config: SimConfig,
    workload: Workload | WorkloadSpec,
    seed: int = 0,
    *,
    fast: bool = True,
    record_steps: bool = False,
    on_progress: Callable[[int], None] | None = None,
    warm_cache: bool = False,
    earlier_runs: Sequence[Workload | WorkloadSpec] = (),
) -> SimResult:
    """Run one workload on one simulated replica. Same inputs and seed, same result.

    `on_progress(requests done)` is called now and then (for a progress bar). `warm_cache`:
    the prefix cache starts with the workload's prompts in it (`warm.py`), as after an earlier
    run of the same prompts on a server that was not restarted. `earlier_runs`: the prefix
    cache starts as those runs (built with the same seed) left it on the same server, their
    prompts and answers in order, the latest kept when the pool is too small
    (`warm.replay_earlier_runs`).
    """
    if isinstance(workload, WorkloadSpec):
        workload = build_workload(workload, random.Random(seed))
    earlier = [
        build_workload(run, random.Random(seed)) if isinstance(run, WorkloadSpec) else run
        for run in earlier_runs
    ]
    if warm_cache or earlier:  # prompts may be in the cache: every request looks itself up
        workload = replace(workload, has_shared_segments=True)
    weights = step_weights(config.cost, config.coefficients)
    driver: _Driver | None = None

    def on_done(request: Request) -> None:
        assert driver is not None
        driver.on_done(request)

    engine = Engine(config.engine, weights, on_done=on_done, fast=fast, record_steps=record_steps)
    engine.on_progress = on_progress
    if earlier:
        from kvwise.sim.warm import replay_earlier_runs

        replay_earlier_runs(engine.kv_cache, earlier)
    if warm_cache:
        from kvwise.sim.warm import warm_prefix_cache

        warm_prefix_cache(engine.kv_cache, workload)
    coefficients = config.coefficients
    frontend = FrontEndQueue(coefficients.api_overhead_s, coefficients.frontend_request_s)
    engine.token_s = coefficients.frontend_token_s
    driver = _Driver(workload, engine, frontend, config.history_budget_tokens)
    with _no_cyclic_gc():
        driver.start()
        engine.run()
        if engine.token_s:
            streamed_first_tokens(engine)
        return SimResult(config, workload, summarize(engine), time_series(engine), engine, frontend)


@contextmanager
def _no_cyclic_gc() -> Iterator[None]:
    """Pause Python's cyclic garbage collector (reference counting still frees everything).

    A run allocates many objects that live to its end (requests, their block lists) and
    almost no reference cycles, so the collector would only re-scan them, over and over:
    about a tenth of the CPU time of a 10,000-request run.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            # The run's survivors would all be scanned by the next young collection, at once
            # (a tenth of a short run's CPU). Freezing and unfreezing moves every tracked
            # object to the oldest generation instead, in O(1), without a scan: those objects
            # are collected later by a full collection, as long-lived ones are. Not when the
            # process has frozen objects of its own (the gateway does at start-up): unfreezing
            # would thaw them too.
            if gc.get_freeze_count() == 0:
                gc.freeze()
                gc.unfreeze()
            gc.enable()
