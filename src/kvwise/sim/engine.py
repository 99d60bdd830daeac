"""The discrete-event loop: arrivals, engine steps, and what each step leaves behind.

Time advances by whole engine steps while there is work, and jumps to the next arrival when
there is none. Requests that arrive during a step are seen at the next step boundary (vLLM's
engine core polls its input queue between steps).

Three ways to run a step, all with the same outcome bit for bit (tests/sim/test_engine.py runs
workloads both ways and compares the JSON):
* reference: `Scheduler.schedule` over explicit counters (always used with `fast=False`, and
  whenever the fast path's conditions do not hold);
* fast: decoding requests stay implicit in a `DecodeCohort`; only requests with an event this
  step (a new block, the last token) and partial prefills are touched;
* pure decode (`pure_decode.py`): consecutive steps in which nothing but decoding can happen
  run in a tight loop, which also admits arrivals whose whole prompts fit a step.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from kvwise.sim import pure_decode
from kvwise.sim.arrivals import ArrivalQueue
from kvwise.sim.cohort import DecodeCohort
from kvwise.sim.kv_cache_manager import KVCacheManager
from kvwise.sim.records import ItlBin, StepLog
from kvwise.sim.request import Request, Status
from kvwise.sim.scheduler import Scheduler, SchedulerConfig, StepPlan
from kvwise.sim.steptime import StepWeights

# `BlockSpaceManager(watermark=0.01)` (0.9.1 `vllm/core/block_manager.py`, the default since
# `block_manager_v1.py` in 0.2-0.6): blocks V0 keeps free when it admits a prompt
V0_WATERMARK: Final = 0.01
MAX_SAMPLES: Final = 2000  # time-series points kept (older ones are thinned by halves)


@dataclass(frozen=True)
class EngineConfig:
    """One vLLM replica as the scheduler sees it (numbers from the planner, or given)."""

    num_gpu_blocks: int  # as vLLM logs it, including the null block
    block_size: int
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    enable_prefix_caching: bool = True
    enable_chunked_prefill: bool = True
    reserve_full_isl: bool = True
    is_v0: bool = False
    num_scheduler_steps: int = 1  # V0 only (`--num-scheduler-steps`)
    # V0's block manager admits whole sequences above a watermark (scheduler.py), with or
    # without chunked prefill (`is_v0` is V0 without it)
    v0_block_manager: bool = False
    # "sglang": SGLang's scheduler (sglang_scheduler.py) over the same pool, with one-token blocks
    scheduler: str = "vllm"
    schedule_policy: str = "fcfs"  # SGLang's --schedule-policy (lpm or fcfs)

    def __post_init__(self) -> None:
        # vLLM refuses to start unless one request of max_model_len fits the pool (less the
        # null block); without that a lone request could wait forever (SGLang starts and caps
        # the prompt at the pool instead)
        usable_tokens = (self.num_gpu_blocks - 1) * self.block_size
        if usable_tokens < self.max_model_len and self.scheduler == "vllm":
            raise ValueError(
                f"a KV pool of {usable_tokens} tokens cannot hold one max_model_len "
                f"({self.max_model_len}) request; vLLM would not start"
            )

    def scheduler_config(self) -> SchedulerConfig:
        return SchedulerConfig(
            max_num_seqs=self.max_num_seqs,
            max_num_batched_tokens=self.max_num_batched_tokens,
            max_model_len=self.max_model_len,
            enable_chunked_prefill=self.enable_chunked_prefill and not self.is_v0,
            reserve_full_isl=self.reserve_full_isl,
            is_v0=self.is_v0,
            num_scheduler_steps=self.num_scheduler_steps,
            v0_watermark_blocks=(
                int(V0_WATERMARK * self.num_gpu_blocks) if self.v0_block_manager else -1
            ),
        )


def _make_scheduler(config: EngineConfig, kv_cache: KVCacheManager) -> Scheduler:
    if config.scheduler == "sglang":
        from kvwise.sim.sglang_scheduler import SglangScheduler

        return SglangScheduler(config.scheduler_config(), kv_cache, config.schedule_policy)
    return Scheduler(config.scheduler_config(), kv_cache)


class Engine:
    def __init__(
        self,
        config: EngineConfig,
        weights: StepWeights,
        *,
        on_done: Callable[[Request], None],
        fast: bool = True,
        record_steps: bool = False,
    ) -> None:
        self.config = config
        self.weights = weights
        self.on_done = on_done  # called once per request: finished or rejected
        # the fast paths replay vLLM's running loop: SGLang's step takes the reference path
        self.fast = fast and not config.is_v0 and config.scheduler == "vllm"
        self.kv_cache = KVCacheManager(
            config.num_gpu_blocks,
            config.block_size,
            enable_prefix_caching=config.enable_prefix_caching,
            max_model_len=config.max_model_len,
        )
        self.scheduler = _make_scheduler(config, self.kv_cache)
        self.step_end_s = array("d")
        self.cohort = DecodeCohort(self.kv_cache, self.step_end_s)
        self.scheduler.before_preempt = self._before_preempt
        self.scheduler.on_ignored = self._reject
        self.step_log = StepLog() if record_steps else None
        self.now = 0.0
        self.step_index = 0
        self.arrivals = ArrivalQueue()
        self.finished: list[Request] = []
        self.rejected: list[Request] = []
        # accumulated over steps
        self.busy_s = 0.0
        self.kv_block_s = 0.0  # used blocks x seconds
        self.max_used_blocks = 0
        self.itl_hist: dict[int, int] = {}
        # the bins of the last ITLs, kept to skip the logarithm: decode-only steps and others
        self.decode_itl_bin, self.step_itl_bin = ItlBin(), ItlBin()
        self.samples: list[tuple[float, float, int, int]] = []  # (time, KV usage, running, waiting)
        self.sample_interval_s = 0.05
        self.next_sample_s = 0.0
        self.on_progress: Callable[[int], None] | None = None  # requests done, now and then
        # The API server's CPU per streamed output token (frontend.py): 0 streams every token
        # at its step's end. Otherwise each step's tokens queue for that CPU, which works
        # beside the GPU, and are seen once it has caught up with the steps before.
        self.token_s = 0.0
        self.stream_seen_s = 0.0  # when the last step's tokens were seen
        self.stream_tokens = 0  # the last step's tokens, queued from then on
        self.late_steps: dict[int, float] = {}  # steps seen after their end -> when

    # -- input -----------------------------------------------------------------------------

    def submit(self, request: Request) -> None:
        """Queue a request that reaches the engine at `request.arrival_s`."""
        self.arrivals.push(request)

    def admit_arrivals(self) -> None:
        arrivals, now, max_model_len = self.arrivals, self.now, self.config.max_model_len
        while arrivals.next_s <= now:
            request = arrivals.pop()
            if request.num_prompt_tokens + request.max_tokens > max_model_len:
                # vLLM's API server answers 400: prompt + max_tokens exceed max_model_len
                self._reject(request)
                continue
            request.arrival_step = self.step_index
            self.scheduler.add_request(request)

    def _reject(self, request: Request) -> None:
        request.status = Status.REJECTED
        request.finish_s = self.now
        self.rejected.append(request)
        self.on_done(request)

    # -- the loop --------------------------------------------------------------------------

    def run(self) -> None:
        scheduler, arrivals, waiting = self.scheduler, self.arrivals, self.scheduler.waiting
        while True:
            was_waiting = bool(waiting)
            if arrivals.next_s <= self.now:
                self.admit_arrivals()
            if not scheduler.running and not waiting:
                if not arrivals:
                    return
                if scheduler.block_finished:  # V0 multi-step: the block ends before idling
                    self._step()
                    continue
                self.now = max(self.now, arrivals.next_s)  # idle until the next arrival
                continue
            # a request that just reached an empty queue is usually admitted at once: go
            # straight to a scheduling step (both ways of running a step give the same result)
            if self.fast and (was_waiting or not waiting) and pure_decode.ready(self):
                pure_decode.run(self)
            else:
                self._step()

    def _step(self) -> None:
        step, start = self.step_index, self.now
        cohort = self.cohort
        if self.fast and self._fast_eligible():
            plan, num_lazy = self._schedule_fast(step), len(cohort)
        else:
            cohort.materialize_all(step)
            plan, num_lazy = self.scheduler.schedule(), 0
        assert plan.num_scheduled_reqs or len(cohort) or self.scheduler.running, "engine stalled"
        for request in plan.scheduled:
            if request.first_scheduled_s is None:
                request.first_scheduled_s = start
        num_tokens = plan.num_prefill_tokens + plan.num_decode_tokens
        step_s = self.weights.step_s(
            num_tokens, plan.prefill_attention_x2, plan.decode_context, plan.num_scheduled_reqs
        )
        if self.step_log is not None:
            self.step_log.add(
                start,
                num_tokens,
                plan.prefill_attention_x2,
                plan.decode_context,
                plan.num_scheduled_reqs,
            )
        self.end_step(step_s, num_lazy)
        self.apply_outputs(plan, step, step_s)

    def apply_outputs(self, plan: StepPlan, step: int, step_s: float) -> None:
        now, cohort, scheduler = self.now, self.cohort, self.scheduler
        done = self.finish_decoders(step) if step in cohort.finish_events else []
        produced, finished = scheduler.update_after_step(plan)
        for request in produced:
            if request.first_token_s is None:
                request.first_token_s = now
                request.first_token_step = step
            else:
                gap_s = step_s if request.last_step == step - 1 else now - request.last_token_s
                self._add_itl(gap_s, 1)
            request.last_token_s = now
            request.last_step = step
            if self.fast and request.status is Status.RUNNING:
                cohort.join(request, step + 1)
        if self.token_s and produced:
            self.stream(len(produced))
        if done or finished:
            self.complete((*done, *finished))

    def stream(self, num_tokens: int) -> None:
        """`num_tokens` more tokens of the step just ended queue for the API server's CPU."""
        self.stream_tokens += num_tokens

    def finish_decoders(self, step: int) -> list[Request]:
        """Implicit decoders whose last token came out of `step` leave the running list."""
        cohort, scheduler = self.cohort, self.scheduler
        done = cohort.take_finishes(step)
        for request in done:
            cohort.leave(request, step + 1)
            scheduler.finish(request)
        return done

    def complete(self, requests: tuple[Request, ...] | list[Request]) -> None:
        # the client sees the end once the API server has caught up with the earlier steps
        now = self.stream_seen_s if self.token_s else self.now
        for request in requests:
            request.finish_s = now
            self.finished.append(request)
            self.on_done(request)

    def end_step(self, step_s: float, num_lazy_decodes: int) -> None:
        self.now += step_s
        self.step_end_s.append(self.now)
        self.step_index += 1
        if self.token_s:  # when the API server's CPU is through the steps before
            free_s = self.stream_seen_s + self.token_s * self.stream_tokens
            if free_s > self.now:
                self.stream_seen_s = self.late_steps[self.step_index - 1] = free_s
            else:
                self.stream_seen_s = self.now
            self.stream_tokens = num_lazy_decodes
        self.busy_s += step_s
        used = self.config.num_gpu_blocks - 1 - self.kv_cache.pool.num_free_blocks
        self.kv_block_s += used * step_s
        if used > self.max_used_blocks:
            self.max_used_blocks = used
        if num_lazy_decodes:
            self._add_itl(step_s, num_lazy_decodes)
        if self.now >= self.next_sample_s:
            self.sample()

    def _add_itl(self, gap_s: float, count: int) -> None:
        itl = self.step_itl_bin
        if not itl.lo <= gap_s < itl.hi:
            itl.start(gap_s)
        self.itl_hist[itl.key] = self.itl_hist.get(itl.key, 0) + count

    def sample(self) -> None:
        if self.on_progress is not None:
            self.on_progress(len(self.finished) + len(self.rejected))
        scheduler = self.scheduler
        self.samples.append(
            (self.now, self.kv_cache.pool.usage, len(scheduler.running), len(scheduler.waiting))
        )
        self.next_sample_s = self.now + self.sample_interval_s
        if len(self.samples) > MAX_SAMPLES:  # keep every other point, sample half as often
            self.samples = self.samples[::2]
            self.sample_interval_s *= 2

    # -- fast paths ------------------------------------------------------------------------

    def _before_preempt(self, request: Request) -> None:
        if request.request_id in self.cohort.members:
            self.cohort.leave(request, self.step_index)

    def _fast_eligible(self) -> bool:
        """Every implicit decoder gets its token this step, ahead of any explicit request."""
        running, members = self.scheduler.running, self.cohort.members
        if len(members) > self.config.max_num_batched_tokens:
            return False
        num_explicit = len(running) - len(members)
        if num_explicit:
            for count, request in enumerate(reversed(running.values())):
                if count == num_explicit:
                    break
                if request.request_id in members:
                    return False
        return True

    def _explicit_tail(self) -> list[Request]:
        running, members = self.scheduler.running, self.cohort.members
        num_explicit = len(running) - len(members)
        tail: list[Request] = []
        for request in reversed(running.values()):
            if len(tail) == num_explicit:
                break
            tail.append(request)
        tail.reverse()
        return tail

    def _schedule_fast(self, step: int) -> StepPlan:
        scheduler, cohort = self.scheduler, self.cohort
        plan = StepPlan()
        stopped = not self._grant_blocks(step, plan)
        num_lazy = len(cohort)
        budget = self.config.max_num_batched_tokens - num_lazy
        if not stopped and len(scheduler.running) > num_lazy:  # explicit requests, after
            budget = scheduler.schedule_running(plan, self._explicit_tail(), budget)
        if not plan.num_preempted:
            scheduler.admit_waiting(plan, budget)
        elif scheduler.config.v0_watermark_blocks >= 0:
            scheduler.admit_after_preemption(plan, budget)
        scheduler.advance_computed(plan)
        plan.num_decode_tokens += num_lazy
        plan.decode_context += cohort.decode_context(step)
        plan.num_scheduled_reqs += num_lazy
        return plan

    def _grant_blocks(self, step: int, plan: StepPlan) -> bool:
        """New blocks for the decoders that need one at this step, in running order; on a
        shortage the reference allocation preempts the newest. False if a decoder preempted
        itself (vLLM's running loop stops there)."""
        cohort, kv_cache = self.cohort, self.kv_cache
        group = cohort.needing_blocks(step)
        if not group:
            return True
        if len(group) <= kv_cache.pool.num_free_blocks:
            kv_cache.pool.grant_blocks(group)
            return True
        for request in list(group):
            if request.request_id not in cohort.members or kv_cache.append_block(request):
                continue  # preempted earlier in this step, or served
            cohort.sync(request, step)
            if kv_cache.enable_prefix_caching and request.is_shareable:  # as the reference path
                kv_cache.cache_full_blocks(request, request.num_computed_tokens)
            if not self.scheduler.allocate_or_preempt(request, 1, plan):
                return False
        return True
