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
(prefill-first) or decodes every running request; preemption by recompute as above. With
chunked prefill on, V0's step is V1's (running first, then chunks of waiting prompts). Either
way V0 admits through its block manager (`vllm/core/block_manager.py` at 0.9.1,
`SelfAttnBlockSpaceManager.can_allocate`; `block_manager_v1/v2.py` in 0.5-0.6): the WHOLE
sequence's blocks (prompt plus any tokens generated before a preemption) must leave at least
`watermark_blocks` (`watermark=0.01` of the GPU blocks) free, and `allocate` then takes all of
them at once, even when only a chunk is computed this step (`_schedule_prefills`: LATER stops
admission; NEVER ignores the request).

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
    # V0 block manager admission: blocks kept free above a whole sequence (-1: V1 admission)
    v0_watermark_blocks: int = -1


# V0's AllocStatus (`vllm/core/interfaces.py`)
V0_OK, V0_LATER, V0_NEVER = 0, 1, 2


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
        # V0 multi-step: the KV context each sequence that finished inside the current block
        # reads at the block's next step (it stays in the block's batch until the block ends)
        self.block_finished: list[int] = []
        # called before a running request is preempted (the engine syncs implicit decoders)
        self.before_preempt: Callable[[Request], None] | None = None
        # called for a request V0's block manager could never hold (AllocStatus.NEVER)
        self.on_ignored: Callable[[Request], None] | None = None

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
            elif self.config.v0_watermark_blocks >= 0:
                self.admit_after_preemption(plan, budget)
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
            if config.v0_watermark_blocks >= 0:
                status = self._v0_can_allocate(request, num_new, hits)
                if status == V0_LATER:
                    break
                waiting.popleft()
                if status == V0_NEVER:
                    if self.on_ignored is not None:
                        self.on_ignored(request)
                    continue
                kv_cache.allocate_checked(request, num_new, hits)  # the whole sequence
                num_new = min(num_new, budget)
                self.start_running(request, num_computed)
                plan.add(request, num_new)
                budget -= num_new
                continue
            num_new = min(num_new, budget)
            if not kv_cache.allocate_slots(
                request, num_new, hits, full_sequence_must_fit=config.reserve_full_isl
            ):
                break
            waiting.popleft()
            self.start_running(request, num_computed)
            plan.add(request, num_new)
            budget -= num_new

    def admit_after_preemption(self, plan: StepPlan, budget: int) -> None:
        """V0 with chunked prefill admits in a step that preempted, too: 0.9.1
        `core/scheduler.py: Scheduler._schedule_chunked_prefill` gates only `_schedule_swapped`
        on preemption, calls `_schedule_prefills` on the queue as it was, and only then puts the
        step's victims back at its head (`self.waiting.extendleft(running_scheduled.preempted)`)."""
        waiting = self.waiting
        victims = [waiting.popleft() for _ in range(plan.num_preempted)]
        self.admit_waiting(plan, budget)
        victims.reverse()
        waiting.extendleft(victims)

    def _v0_can_allocate(self, request: Request, num_new: int, hits: list[int]) -> int:
        """V0's `BlockSpaceManager.can_allocate` (0.9.1 `core/block_manager.py`): the whole
        sequence's blocks against the free blocks less the watermark."""
        kv_cache, watermark = self.kv_cache, self.config.v0_watermark_blocks
        needed = kv_cache.blocks_needed(request, num_new, hits, True)
        if kv_cache.pool.num_blocks - 1 - needed < watermark:  # (less the null block)
            return V0_NEVER
        if kv_cache.pool.num_free_blocks - needed >= watermark:
            return V0_OK
        return V0_LATER

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
        if config.v0_watermark_blocks >= 0:
            return self._v0_can_allocate(request, num_new, hits) != V0_LATER
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
        scheduler looks at the queue again, so arrivals wait for the block to end. A sequence
        that finishes inside the block stays in its batch until the block ends: 0.6.0
        `engine/llm_engine.py: LLMEngine.step` reuses the cached `seq_group_metadata_list` while
        `_has_remaining_steps` (the N steps run on the GPU, outputs are processed at the last
        one) and calls `Scheduler.schedule` only at block boundaries. So when the whole batch
        finishes early, the block's remaining steps still run, and only then is the queue seen.
        """
        config = self.config
        if self.multi_step_left > 0 and (self.running or self.block_finished):
            self.multi_step_left -= 1
            self.schedule_running(plan, list(self.running.values()), config.max_num_batched_tokens)
            contexts = self.block_finished
            for index, context in enumerate(contexts):  # finished, still computed
                plan.num_decode_tokens += 1
                plan.decode_context += context
                plan.num_scheduled_reqs += 1
                contexts[index] = context + 1
            if not self.multi_step_left:
                contexts.clear()  # the block's last step: they leave with it
            return
        # a block boundary (or a block whose batch was preempted whole: V0 allocates a block's
        # slots at its start, so this is the simulator's per-step allocation, not V0's)
        self.multi_step_left = 0
        self.block_finished.clear()
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
        if self.multi_step_left:  # V0 multi-step: its block's next steps still compute it
            self.block_finished.append(request.num_computed_tokens + 1)
        request.status = Status.FINISHED
        del self.running[request.request_id]
        if self.kv_cache.enable_prefix_caching and request.is_shareable:
            self.kv_cache.cache_full_blocks(request, request.num_computed_tokens)
        self.kv_cache.free(request)
