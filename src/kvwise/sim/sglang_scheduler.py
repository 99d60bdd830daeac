"""SGLang's scheduler, as a variant of the simulated vLLM one: only what SGLang does differently.

Read in SGLang v0.5.23 (the PyPI wheel, python/sglang/srt/...):

* Radix-tree prefix cache with token-granular matching (`mem_cache/radix_cache.py`, page_size 1
  by default in `server_args.py`): the pool is run with one-token blocks, so a cached prefix is
  hit to the token, where vLLM hits whole blocks of 16. At least one token is computed
  (`Req.init_next_round_input`: the prefix is cut to input length - 1), as in vLLM.
* Prefill before decode (`scheduler.py` get_next_batch_to_run): a step is a prefill batch when
  anything can be prefilled, else one decode step for every running request; no mixed batches
  (`--enable-mixed-chunk` is off by default). A prompt longer than `--chunked-prefill-size` is
  prefilled in chunks, the chunked request first in each prefill batch.
* Schedule policy (`--schedule-policy`, `managers/schedule_policy.py`): `fcfs` keeps arrival
  order; `lpm` sorts the waiting queue by the longest cached prefix, and falls back to FCFS above
  128 waiting requests (WAITING_QUEUE_PREFIX_MATCH_MAX). The default is `lpm` up to 0.4.3 and
  `fcfs` from 0.4.4 (server_args.py in the 0.4.0, 0.4.1, 0.4.3 and the 0.4.4, 0.4.5, 0.4.6,
  0.5.2, 0.5.9, 0.5.23 wheels).
* Admission reserves room for the answers (`PrefillAdder`, `mem_cache/prefill_budget.py`): a
  request enters when prompt-left-to-compute + min(max_new_tokens, 4096) is below the free and
  evictable tokens less every running request's remaining min(max_new_tokens, 4096) times
  `new_token_ratio`, and less what this batch admitted before it. vLLM reserves nothing for the
  answers.
* Retraction instead of preemption (`ScheduleBatch.retract_decode`): when a decode step does not
  fit, requests are retracted, fewest generated tokens first (longest prompt first among equals),
  until it fits, never the last one; they go to the END of the waiting queue
  (`_add_request_to_queue`) and are recomputed. `new_token_ratio` (start 0.7, floor 0.7 x 0.14,
  decaying to the floor over 600 decode steps: `environ.py`, `new_token_ratio_tracker.py`) is
  raised after a retraction to (tokens generated + 20 per request) / max_new_tokens of those
  left, so the next admissions reserve more. vLLM preempts the newest request and puts it at the
  head of its queue.

Not modelled: the in-batch prefix deprioritisation of `lpm` (requests sharing a prefix of more
than 32 uncached tokens with one already in the batch wait one round), SGLang's insertion of a
prompt into the tree only after its prefill (the shared block pool registers blocks when they
are allocated, as vLLM does), and HiCache. The step-time model is the same for both engines.
"""

from __future__ import annotations

from typing import Final

from kvwise.sim.kv_cache_manager import KVCacheManager
from kvwise.sim.request import Request, Status
from kvwise.sim.scheduler import Scheduler, SchedulerConfig, StepPlan

PAGE_SIZE: Final = 1  # server_args.py: page_size None -> 1 for the default attention backends
INIT_NEW_TOKEN_RATIO: Final = 0.7  # environ.py SGLANG_INIT_NEW_TOKEN_RATIO
MIN_NEW_TOKEN_RATIO_FACTOR: Final = 0.14  # environ.py SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR
NEW_TOKEN_RATIO_DECAY_STEPS: Final = 600  # environ.py SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS
RETRACT_DECODE_STEPS: Final = 20  # environ.py SGLANG_RETRACT_DECODE_STEPS
CLIP_MAX_NEW_TOKENS: Final = 4096  # schedule_policy.py SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION
WAITING_QUEUE_PREFIX_MATCH_MAX: Final = 128  # schedule_policy.py: lpm -> fcfs above this
FCFS_DEFAULT_SINCE: Final = (0, 4, 4)  # server_args.py: schedule_policy "lpm" before, "fcfs" from


def default_schedule_policy(release: tuple[int, ...] | None) -> str:
    """SGLang's default `--schedule-policy` for a release (None: the newest)."""
    return "lpm" if release is not None and release < FCFS_DEFAULT_SINCE else "fcfs"


def _left_to_generate(request: Request) -> int:
    return min(max(request.max_tokens - request.num_output_tokens, 0), CLIP_MAX_NEW_TOKENS)


class SglangScheduler(Scheduler):
    """`Scheduler.schedule` replaced by SGLang's step; the bookkeeping is the base class's."""

    def __init__(
        self, config: SchedulerConfig, kv_cache: KVCacheManager, schedule_policy: str = "fcfs"
    ) -> None:
        super().__init__(config, kv_cache)
        self.schedule_policy = schedule_policy
        self.min_ratio = INIT_NEW_TOKEN_RATIO * MIN_NEW_TOKEN_RATIO_FACTOR
        self.ratio_decay = (INIT_NEW_TOKEN_RATIO - self.min_ratio) / NEW_TOKEN_RATIO_DECAY_STEPS
        self.new_token_ratio = INIT_NEW_TOKEN_RATIO

    def schedule(self) -> StepPlan:
        plan = StepPlan()
        if not self.running:  # an idle scheduler resets the ratio (self_check_during_idle)
            self.new_token_ratio = INIT_NEW_TOKEN_RATIO
        self._prefill(plan)
        if not plan.num_scheduled_reqs:
            self._decode(plan)
        self.advance_computed(plan)
        return plan

    # -- prefill --------------------------------------------------------------------------

    def _ordered_waiting(self) -> list[Request]:
        waiting = list(self.waiting)
        if self.schedule_policy != "lpm" or len(waiting) > WAITING_QUEUE_PREFIX_MATCH_MAX:
            return waiting
        cached = {r.request_id: len(self.kv_cache.get_computed_blocks(r)) for r in waiting}
        return sorted(waiting, key=lambda r: -cached[r.request_id])  # stable: FCFS among equals

    def _reserved_for_running(self) -> float:
        return sum(_left_to_generate(r) for r in self.running.values()) * self.new_token_ratio

    def _prefill(self, plan: StepPlan) -> None:
        kv_cache, budget = self.kv_cache, self.config.max_num_batched_tokens
        for request in self.running.values():  # the chunked request goes on first
            left = request.num_tokens - request.num_computed_tokens
            if left > 1 and budget > 0:
                num_new = min(left, budget)
                if kv_cache.allocate_slots(request, num_new):
                    plan.add(request, num_new)
                    budget -= num_new
        if not self.waiting or budget <= 0:
            return
        free = kv_cache.pool.num_free_blocks * kv_cache.block_size  # free + evictable
        remaining = free - self._reserved_for_running()
        for request in self._ordered_waiting():
            if budget <= 0 or len(self.running) >= self.config.max_num_seqs:
                break
            hits = kv_cache.get_computed_blocks(request)
            num_computed = len(hits) * kv_cache.block_size
            extend = request.num_tokens - num_computed
            total = extend + _left_to_generate(request)
            alone = not self.running and not plan.num_scheduled_reqs
            if total >= remaining and not alone:
                break  # AddReqResult.NO_TOKEN: admission stops here
            num_new = min(extend, budget)
            if not kv_cache.allocate_slots(request, num_new, hits):
                break
            self.waiting.remove(request)
            self.start_running(request, num_computed)
            plan.add(request, num_new)
            budget -= num_new
            remaining -= total

    # -- decode ---------------------------------------------------------------------------

    def _decode(self, plan: StepPlan) -> None:
        decoders = [r for r in self.running.values() if r.num_tokens - r.num_computed_tokens == 1]
        if not decoders:
            return
        if self._decode_fits(decoders):
            self.new_token_ratio = max(self.new_token_ratio - self.ratio_decay, self.min_ratio)
        else:
            decoders = self._retract(decoders)
        for request in decoders:
            if self.kv_cache.allocate_slots(request, 1):
                plan.add(request, 1)

    def _decode_fits(self, decoders: list[Request]) -> bool:
        kv_cache = self.kv_cache
        needed = sum(kv_cache.blocks_needed(r, 1, [], False) for r in decoders)
        return needed <= kv_cache.pool.num_free_blocks

    def _retract(self, decoders: list[Request]) -> list[Request]:
        """retract_decode: keep the requests with the most generated tokens (then the shortest
        prompts); retract from the other end until the step fits, keeping at least one. A
        request still in its chunked prefill holds KV too and has generated nothing: it goes
        first."""
        decoding = {r.request_id for r in decoders}
        kept = sorted(
            self.running.values(), key=lambda r: (r.num_output_tokens, -r.num_prompt_tokens)
        )
        kept.reverse()
        while len(kept) > 1 and not self._decode_fits(
            [r for r in kept if r.request_id in decoding]
        ):
            self.retract(kept.pop())
        kept = [r for r in kept if r.request_id in decoding]
        generated = sum(r.num_output_tokens for r in kept)
        max_new = sum(r.max_tokens for r in kept)
        self.new_token_ratio = min(
            1.0, (generated + RETRACT_DECODE_STEPS * len(kept)) / (max_new + 1)
        )
        return kept

    def retract(self, request: Request) -> None:
        """Free the request's KV and requeue it at the END of the waiting queue; its prompt stays
        in the radix tree (inserted after its prefill), so its recompute hits it."""
        if self.kv_cache.enable_prefix_caching:
            self.kv_cache.cache_full_blocks(
                request, min(request.num_computed_tokens, request.num_prompt_tokens)
            )
        self.kv_cache.free(request)
        del self.running[request.request_id]
        request.status = Status.PREEMPTED
        request.num_computed_tokens = 0
        request.num_preemptions += 1
        self.num_preemptions += 1
        self.waiting.append(request)
