"""Pure-decode runs: the engine's steps while nothing but its implicit decoders can run.

In such a step every running request is a `DecodeCohort` member that gets one token, so the
step's cost and effects follow from the step index alone, and consecutive steps run in a tight
loop (`_decode_loop`). The loop stops at the next finish (that step runs too: its batch is the
same, then its finishers leave), at a block shortage, or at an arrival. At a finish or an
arrival the run goes on when `Engine.run` would choose a decode-only step next, and also when
the requests just arrived all fit the next step whole: that step is run by the reference
scheduler's own calls (`_admit_whole_prompts`), and they decode with the others after it.
Anything else (a block shortage, a partial prefill, a queue that was not empty) goes back to
`Engine.run`, which takes the next step the reference way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvwise.sim.request import Request
from kvwise.sim.scheduler import StepPlan

if TYPE_CHECKING:
    from kvwise.sim.engine import Engine


def ready(engine: Engine) -> bool:
    """Nothing but the implicit decoders can run at this step boundary."""
    cohort, scheduler = engine.cohort, engine.scheduler
    if not cohort.members or len(cohort.members) != len(scheduler.running):
        return False
    step = engine.step_index
    if len(cohort.needing_blocks(step)) > engine.kv_cache.pool.num_free_blocks:
        return False
    budget = engine.config.max_num_batched_tokens - len(cohort.members)
    if budget < 0:
        return False
    # a blocked queue head stays blocked: no block is freed and no budget or seat appears
    # before the next finish
    return not scheduler.waiting or not scheduler.can_admit_head(budget)


def run(engine: Engine) -> None:
    """Decode-only steps until a block shortage, or a step boundary where something other
    than decoding could run; finish steps and whole-prompt admissions do not end the run."""
    while True:
        next_finish = engine.cohort.next_finish_step()
        if engine.step_log is not None:
            _logged_decode_loop(engine, next_finish)
            if next_finish is not None and engine.step_index > next_finish:
                engine.complete(engine.finish_decoders(next_finish))
            return
        at_arrival = _decode_loop(engine, next_finish)
        if next_finish is not None and engine.step_index > next_finish:
            # the finish step ran (its batch is the same): its finishers leave
            engine.complete(engine.finish_decoders(next_finish))
        elif not at_arrival:
            return  # a block shortage: Engine.run takes the next step the reference way
        if not _at_boundary(engine):
            return


def _decode_loop(engine: Engine, next_finish: int | None) -> bool:
    """Steps up to and including `next_finish`; True if it stopped at an arrival first."""
    cohort, pool = engine.cohort, engine.kv_cache.pool
    groups, block_size = cohort.phase_groups, cohort.block_size
    num_decode, step, last_step, next_arrival_s, context = _run_start(engine, next_finish)
    fixed_s, context_token_s, reqs_s = _decode_step_terms(engine, num_decode)
    # Engine.end_step inlined, with the same float operations in the same order
    usable = engine.config.num_gpu_blocks - 1
    used = usable - pool.num_free_blocks
    now, busy_s, kv_block_s, max_used = (
        engine.now,
        engine.busy_s,
        engine.kv_block_s,
        engine.max_used_blocks,
    )
    append_end, hist = engine.step_end_s.append, engine.itl_hist
    next_sample_s, itl = engine.next_sample_s, engine.decode_itl_bin
    # Engine.end_step's stream of tokens to the API server's CPU, when it costs any. Step times
    # do not fall during the run (the context grows): when the CPU has caught up by the end of
    # the first step and takes no longer than a step for a step's tokens, it keeps up with
    # every step, and the loop leaves it alone (each step's tokens seen at its end, as
    # Engine.end_step would find with the same operations)
    token_s, seen_s, num_streamed = engine.token_s, engine.stream_seen_s, engine.stream_tokens
    first_step = step
    late_steps = engine.late_steps
    keeping_up = True
    if token_s:
        step_s = fixed_s + context_token_s * context + reqs_s
        keeping_up = (
            seen_s + token_s * num_streamed <= now + step_s and token_s * num_decode <= step_s
        )
    # the blocks are granted in one call for many steps: nothing else takes or returns
    # blocks meanwhile, so each step's group gets the same blocks as one call per step
    pending: list[Request] = []
    num_free = pool.num_free_blocks
    while step < last_step and now < next_arrival_s:
        group = groups[step % block_size]
        if group:
            if len(group) > num_free:
                break
            pending += group
            num_free -= len(group)
            used = usable - num_free
            if used > max_used:
                max_used = used
        step_s = fixed_s + context_token_s * context + reqs_s
        now += step_s
        append_end(now)
        if not keeping_up:
            free_s = seen_s + token_s * num_streamed
            if free_s > now:
                seen_s = late_steps[step] = free_s
            else:
                seen_s = now
            num_streamed = num_decode
        busy_s += step_s
        kv_block_s += used * step_s
        if not itl.lo <= step_s < itl.hi:
            itl.flush(hist)
            itl.start(step_s)
        itl.count += num_decode
        step += 1
        context += num_decode
        if now >= next_sample_s:  # (a sample also reports progress, as Engine.end_step's)
            pool.grant_blocks(pending)  # the sample reads the pool
            pending = []
            engine.now, engine.step_index = now, step
            engine.sample()
            next_sample_s = engine.next_sample_s
    if pending:
        pool.grant_blocks(pending)
    itl.flush(hist)
    engine.now, engine.step_index, engine.busy_s, engine.kv_block_s = now, step, busy_s, kv_block_s
    engine.max_used_blocks = max_used
    if token_s and step > first_step:
        engine.stream_seen_s = now if keeping_up else seen_s
        engine.stream_tokens = num_decode
    return step < last_step and now >= next_arrival_s


def _logged_decode_loop(engine: Engine, next_finish: int | None) -> None:
    """The same steps through `Engine.end_step`, when steps are logged (the run then ends at
    its first event)."""
    cohort, pool = engine.cohort, engine.kv_cache.pool
    groups, block_size = cohort.phase_groups, cohort.block_size
    num_decode, step, last_step, next_arrival_s, context = _run_start(engine, next_finish)
    fixed_s, context_token_s, reqs_s = _decode_step_terms(engine, num_decode)
    log = engine.step_log
    while step < last_step and engine.now < next_arrival_s:
        group = groups[step % block_size]
        if group:
            if len(group) > pool.num_free_blocks:
                break
            pool.grant_blocks(group)
        step_s = fixed_s + context_token_s * context + reqs_s
        if log is not None:
            log.add(engine.now, num_decode, 0, context, num_decode)
        engine.end_step(step_s, num_decode)
        step += 1
        context += num_decode


def _run_start(engine: Engine, next_finish: int | None) -> tuple[int, int, int, float, int]:
    """Decoders, first step, the step after the last one to run, the next arrival's time, and
    the decode context of the first step."""
    step = engine.step_index
    last_step = next_finish + 1 if next_finish is not None else step + 10**12
    context = engine.cohort.decode_context(step)
    return len(engine.cohort.members), step, last_step, engine.arrivals.next_s, context


def _decode_step_terms(engine: Engine, num_decode: int) -> tuple[float, float, float]:
    """StepWeights.step_s(num_decode, 0, context, num_decode) with its constant part hoisted:
    fixed + context_token_s * context + reqs is the same float operations in the same order,
    so the same result bit for bit."""
    w = engine.weights
    excess = w.gemm_token_s * num_decode - w.weight_read_s
    fixed_s = (
        w.base_s
        - w.idle_experts_s(num_decode)
        + w.token_s * num_decode
        + (w.gemm * excess if excess > 0 else 0.0)
        + (w.shm_allreduce_s(num_decode) if w.shm_calls else 0.0)
    )
    return fixed_s, w.context_token_s, w.request_s * num_decode


def _at_boundary(engine: Engine) -> bool:
    """Engine.run's choice at a step boundary, made here: arrivals are taken in, then True if
    the next step is again decode-only, or was run as a whole-prompt admission. False: Engine.run
    decides (the same way: the arrivals are in the queue already, and a step that admits
    nothing has the same outcome as a decode-only step)."""
    waiting = engine.scheduler.waiting
    was_waiting = bool(waiting)
    if engine.arrivals.next_s <= engine.now:
        engine.admit_arrivals()
    if (was_waiting or not waiting) and ready(engine):
        return True
    return not was_waiting and bool(waiting) and _admit_whole_prompts(engine)


def _admit_whole_prompts(engine: Engine) -> bool:
    """The reference step for the implicit decoders plus the waiting requests (all of them
    just arrived), when each one's whole prompt fits the step and the pool, so that they all
    leave the step decoding and join the cohort. False, with nothing changed, otherwise."""
    config, scheduler, cohort = engine.config, engine.scheduler, engine.cohort
    kv_cache, reserve_full_isl = engine.kv_cache, scheduler.config.reserve_full_isl
    step, num_decode, waiting = engine.step_index, len(cohort.members), scheduler.waiting
    if len(scheduler.running) + len(waiting) > config.max_num_seqs:
        return False
    group = cohort.needing_blocks(step)
    # Scheduler.admit_waiting's checks, made before the decoders' blocks are granted and before
    # any of the requests is admitted: the first one's cache hits stay the same unless the
    # grant evicts one, the others must have none to find (an admission registers blocks)
    budget = config.max_num_batched_tokens - num_decode
    num_blocks = len(group)
    admissions: list[tuple[Request, list[int], int]] = []
    for request in waiting:
        if admissions and kv_cache.looks_up(request):
            return False
        hits = kv_cache.get_computed_blocks(request)
        num_new = request.num_tokens - len(hits) * kv_cache.block_size
        if (hits and group) or num_new > budget or request.output_len < 2:
            return False  # (a partial prefill would stay explicit; a first token can be the last)
        num_blocks += kv_cache.blocks_needed(request, num_new, hits, reserve_full_isl)
        budget -= num_new
        admissions.append((request, hits, num_new))
    # V0's block manager (Scheduler._v0_can_allocate): each admission leaves the watermark
    # free, so all of them do when the last one does; one that could never fit goes the
    # reference way
    watermark = scheduler.config.v0_watermark_blocks
    if watermark >= 0:
        usable = kv_cache.pool.num_blocks - 1 - watermark
        for request, hits, num_new in admissions:
            if kv_cache.blocks_needed(request, num_new, hits, True) > usable:
                return False
    if num_blocks + max(watermark, 0) > kv_cache.pool.num_free_blocks:
        return False
    # Engine._schedule_fast: the decoders' blocks, then admit_waiting's body for each request
    if group:
        kv_cache.pool.grant_blocks(group)
    plan = StepPlan()
    for request, hits, num_new in admissions:
        kv_cache.allocate_checked(request, num_new, hits)  # (num_blocks are free)
        waiting.popleft()
        scheduler.start_running(request, len(hits) * kv_cache.block_size)
        plan.add(request, num_new)
        request.num_computed_tokens += num_new  # Scheduler.advance_computed
    plan.num_decode_tokens += num_decode
    plan.decode_context += cohort.decode_context(step)
    plan.num_scheduled_reqs += num_decode
    # Engine._step from here on
    for request in plan.scheduled:
        if request.first_scheduled_s is None:
            request.first_scheduled_s = engine.now
    step_s = engine.weights.step_s(
        plan.num_prefill_tokens + plan.num_decode_tokens,
        plan.prefill_attention_x2,
        plan.decode_context,
        plan.num_scheduled_reqs,
    )
    engine.end_step(step_s, num_decode)
    # Engine.apply_outputs for this step: the finishers among the decoders leave first; each
    # admitted request computed its whole prompt, so it yields its first token (not its last:
    # output_len >= 2) and decodes from the next step on
    now = engine.now
    done = engine.finish_decoders(step) if step in cohort.finish_events else []
    for request in plan.scheduled:
        request.num_output_tokens += 1
        request.first_token_s = request.last_token_s = now
        request.first_token_step = request.last_step = step
        cohort.join(request, step + 1)
    if engine.token_s:
        engine.stream(len(plan.scheduled))
    if done:
        engine.complete(done)
    return True
