"""vLLM's scheduler, one engine step at a time (the reference algorithm).

V1 (`vllm/v1/core/sched/scheduler.py: Scheduler.schedule`):
1. RUNNING requests first, in admission order. Each gets min(tokens it still needs, budget left)
   tokens of the step's `max_num_batched_tokens` budget (chunked prefill and decode alike). When
   the pool cannot hold them, the newest running request is preempted (recompute: its blocks are
   freed, `num_computed_tokens = 0`, and it goes back to the HEAD of the waiting queue), and the
   allocation is retried, until it fits or the request preempted itself.
2. WAITING requests, only if nothing was preempted in this step, while there is budget and fewer
   than `max_num_seqs` are running: prefix-cache lookup, then admission of the whole sequence
   (`scheduler_reserve_full_isl`) or of the first chunk (older versions). The first request that
   does not fit stops admission (head-of-line, FCFS).

V0 (`vllm/core/scheduler.py`, chunked prefill off): a step either admits waiting prompts whole
(prefill-first) or decodes every running request; preemption by recompute as above.

The engine applies the step's outcome (`Scheduler.update_after_step`) once its time is known.
`StepPlan` carries the step's token counts, which is all the step-time model reads.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from kvwise.sim.kv_cache_manager import KVCacheManager
from kvwise.sim.request import Request, Status


@dataclass(frozen=True)
class SchedulerConfig:
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    enable_chunked_prefill: bool = True
    reserve_full_isl: bool = True  # vLLM >= 0.18 (PR #37307); earlier: only the chunk must fit
    is_v0: bool = False  # V0 engine: prefill-first steps, whole prompts
    num_scheduler_steps: int = 1  # V0 multi-step: a decode batch runs this many steps


class StepPlan:
    """What one step computes: (request, tokens) pairs and the token counts of the step.

    num_prefill_tokens / prefill_attention: tokens of multi-token (prefill or recompute) chunks
    and their causal query-key pairs, sum of q * (context + (q + 1) / 2), times two to stay
    integral. num_decode_tokens / decode_context: single-token steps and the KV tokens they read.
    """

    __slots__ = (
        "decode_context",
        "num_decode_tokens",
        "num_preempted",
        "num_prefill_tokens",
        "num_scheduled_reqs",
        "prefill_attention_x2",
        "scheduled",
        "scheduled_tokens",
    )

    def __init__(self) -> None:
        self.scheduled: list[Request] = []
        self.scheduled_tokens: list[int] = []
        self.num_prefill_tokens = 0
        self.prefill_attention_x2 = 0
        self.num_decode_tokens = 0
        self.decode_context = 0
        self.num_scheduled_reqs = 0
        self.num_preempted = 0

    def add(self, request: Request, num_new_tokens: int) -> None:
        """Record a scheduled chunk; `request.num_computed_tokens` is still the pre-step value."""
        self.scheduled.append(request)
        self.scheduled_tokens.append(num_new_tokens)
        self.num_scheduled_reqs += 1
        context = request.num_computed_tokens
        if num_new_tokens == 1 and request.num_tokens - context == 1:
            self.num_decode_tokens += 1
            self.decode_context += context + 1  # attends to every earlier token and itself
        else:
            self.num_prefill_tokens += num_new_tokens
            self.prefill_attention_x2 += num_new_tokens * (2 * context + num_new_tokens + 1)


class Scheduler:
    def __init__(self, config: SchedulerConfig, kv_cache: KVCacheManager) -> None:
        self.config = config
        self.kv_cache = kv_cache
        self.waiting: deque[Request] = deque()
        # admission order; insertion-ordered dict so that finished requests leave in O(1)
        self.running: dict[int, Request] = {}
        self.num_preemptions = 0
        self.prefix_queried_tokens = 0  # tokens looked up in the prefix cache at admission
        self.prefix_hit_tokens = 0
        self.next_running_seq = 0
        self.multi_step_left = 0  # V0 multi-step: decode steps left before the next admission
        # called before a running request is preempted (the engine syncs implicit decoders)
        self.before_preempt: Callable[[Request], None] | None = None

    def add_request(self, request: Request) -> None:
        request.status = Status.WAITING
        self.waiting.append(request)

    # -- one step -------------------------------------------------------------------------

    def schedule(self) -> StepPlan:
        plan = StepPlan()
        if self.config.is_v0:
            self._schedule_v0(plan)
        else:
            budget = self.schedule_running(
                plan, list(self.running.values()), self.config.max_num_batched_tokens
            )
            if not plan.num_preempted:
                self.admit_waiting(plan, budget)
        self.advance_computed(plan)
        return plan

    def schedule_running(self, plan: StepPlan, candidates: list[Request], budget: int) -> int:
        """V1's running loop over `candidates` (running requests in order); returns the budget left."""
        for request in candidates:
            if budget <= 0:
                break
            if request.status is not Status.RUNNING:
                continue  # preempted earlier in this step
            num_new = min(request.num_tokens - request.num_computed_tokens, budget)
            if not self.allocate_or_preempt(request, num_new, plan):
                break
            plan.add(request, num_new)
            budget -= num_new
        return budget

    def allocate_or_preempt(self, request: Request, num_new_tokens: int, plan: StepPlan) -> bool:
        """Blocks for a running request, preempting the newest running ones until they fit."""
        while not self.kv_cache.allocate_slots(request, num_new_tokens):
            victim = self.running.popitem()[1]
            self.preempt(victim)
            plan.num_preempted += 1
            if victim is request:
                return False
        return True

    def preempt(self, request: Request) -> None:
        """Recompute preemption: free the blocks, forget the progress, back to the queue head."""
        if self.before_preempt is not None:
            self.before_preempt(request)
        if self.kv_cache.enable_prefix_caching:  # its recompute will look its own blocks up
            self.kv_cache.cache_full_blocks(request, request.num_computed_tokens)
        self.kv_cache.free(request)
        request.status = Status.PREEMPTED
        request.num_computed_tokens = 0
        request.num_preemptions += 1
        self.num_preemptions += 1
        self.waiting.appendleft(request)

    def admit_waiting(self, plan: StepPlan, budget: int) -> None:
        config, kv_cache, waiting = self.config, self.kv_cache, self.waiting
        while waiting and budget > 0 and len(self.running) < config.max_num_seqs:
            request = waiting[0]
            hits = kv_cache.get_computed_blocks(request)
            num_computed = len(hits) * kv_cache.block_size
            num_new = request.num_tokens - num_computed
            if not config.enable_chunked_prefill and num_new > budget:
                break
            num_new = min(num_new, budget)
            if not kv_cache.allocate_slots(
                request, num_new, hits, full_sequence_must_fit=config.reserve_full_isl
            ):
                break
            waiting.popleft()
            self.start_running(request, num_computed)
            plan.add(request, num_new)
            budget -= num_new

    def can_admit_head(self, budget: int) -> bool:
        """Whether `admit_waiting` would admit the head of the queue now (no state changes)."""
        config, kv_cache, waiting = self.config, self.kv_cache, self.waiting
        if not waiting or budget <= 0 or len(self.running) >= config.max_num_seqs:
            return False
        request = waiting[0]
        hits = kv_cache.get_computed_blocks(request)
        num_new = request.num_tokens - len(hits) * kv_cache.block_size
        if not config.enable_chunked_prefill and num_new > budget:
            return False
        needed = kv_cache.blocks_needed(
            request, min(num_new, budget), hits, config.reserve_full_isl
        )
        return needed <= kv_cache.pool.num_free_blocks

    def start_running(self, request: Request, num_computed: int) -> None:
        if request.status is Status.WAITING:  # first admission (not a return after preemption)
            request.num_cached_tokens = num_computed
        self.prefix_queried_tokens += request.num_tokens
        self.prefix_hit_tokens += num_computed
        request.status = Status.RUNNING
        request.num_computed_tokens = num_computed
        request.running_seq = self.next_running_seq
        self.next_running_seq += 1
        self.running[request.request_id] = request

    def _schedule_v0(self, plan: StepPlan) -> None:
        """V0 without chunked prefill: whole prompts first; decode only when none is admitted.

        With `--num-scheduler-steps N` (multi-step), a decode batch runs N steps before the
        scheduler looks at the queue again, so arrivals wait for the block to end.
        """
        config = self.config
        if self.multi_step_left > 0:
            self.multi_step_left -= 1
        else:
            self.admit_waiting(plan, config.max_num_batched_tokens)
            if plan.num_scheduled_reqs:
                return
            self.multi_step_left = config.num_scheduler_steps - 1
        self.schedule_running(plan, list(self.running.values()), config.max_num_batched_tokens)

    @staticmethod
    def advance_computed(plan: StepPlan) -> None:
        scheduled_tokens = plan.scheduled_tokens
        for index, request in enumerate(plan.scheduled):
            request.num_computed_tokens += scheduled_tokens[index]

    # -- after the step ------------------------------------------------------------------

    def update_after_step(self, plan: StepPlan) -> tuple[list[Request], list[Request]]:
        """Sample one token for every request whose sequence is now fully computed.

        Returns (requests that produced a token, requests that finished), in schedule order.
        """
        produced: list[Request] = []
        finished: list[Request] = []
        for request in plan.scheduled:
            if (
                request.status is not Status.RUNNING
                or request.num_computed_tokens != request.num_tokens
            ):
                continue  # a prefill chunk that does not end the prompt
            request.num_output_tokens += 1
            produced.append(request)
            if request.num_output_tokens >= request.output_len:
                self.finish(request)
                finished.append(request)
        return produced, finished

    def finish(self, request: Request) -> None:
        request.status = Status.FINISHED
        del self.running[request.request_id]
        if self.kv_cache.enable_prefix_caching and request.is_shareable:
            self.kv_cache.cache_full_blocks(request, request.num_computed_tokens)
        self.kv_cache.free(request)
