"""vLLM V1's scheduler, step by step, with exact block ids, queue order and victims.

Every expected value below is worked out by hand from the rules in scheduler.py's docstring
(block size 4 throughout; the free queue starts 1, 2, 3...).
"""

from __future__ import annotations

from kvwise.sim.request import Status
from tests.sim.factories import ids, request, scheduled, scheduler, step


def test_chunked_prefill_running_first_then_waiting() -> None:
    s = scheduler(16, max_num_batched_tokens=16)
    r1, r2 = request(1, 20, output_len=3), request(2, 6, output_len=2)
    s.add_request(r1)
    plan, produced, _ = step(s)
    assert scheduled(plan) == [(1, 16)]  # the budget caps the first chunk
    assert r1.block_ids == [1, 2, 3, 4]
    assert produced == []  # the prompt is not finished: no token yet
    s.add_request(r2)
    plan, produced, _ = step(s)
    assert scheduled(plan) == [(1, 4), (2, 6)]  # running first, then the new request
    assert (r1.block_ids, r2.block_ids) == ([1, 2, 3, 4, 5], [6, 7])
    assert ids(produced) == [1, 2]  # both prompts complete: first tokens
    plan, _, finished = step(s)
    assert scheduled(plan) == [(1, 1), (2, 1)]
    assert r1.block_ids == [1, 2, 3, 4, 5, 8]  # token 21 needs a sixth block
    assert ids(finished) == [2]
    # r2's blocks go to the end of the free queue, tail first
    assert s.kv_cache.pool.free_block_ids() == [9, 10, 11, 12, 13, 14, 15, 7, 6]


def test_max_num_seqs_and_head_of_line_blocking() -> None:
    s = scheduler(8, max_num_seqs=2, max_num_batched_tokens=64)
    big, small, third = request(1, 40), request(2, 4), request(3, 4)
    for r in (big, small, third):
        s.add_request(r)
    plan, _, _ = step(s)
    # 7 usable blocks: the 40-token prompt (10 blocks) can never fit, and the requests behind it
    # wait too (FCFS, head of line)
    assert scheduled(plan) == []
    assert ids(s.waiting) == [1, 2, 3]
    s.waiting.popleft()  # the big one gives up
    plan, _, _ = step(s)
    assert scheduled(plan) == [(2, 4), (3, 4)]
    s.add_request(request(4, 4))
    plan, _, _ = step(s)
    assert scheduled(plan) == [(2, 1), (3, 1)]  # max_num_seqs = 2: request 4 waits
    assert ids(s.waiting) == [4]


def test_preemption_takes_the_newest_recomputes_it_and_returns_it_to_the_queue_head() -> None:
    s = scheduler(7, max_num_batched_tokens=16)  # 6 usable blocks
    r1, r2, r3 = (
        request(1, 8, output_len=8),
        request(2, 8, output_len=8),
        request(3, 4, output_len=4),
    )
    for r in (r1, r2, r3):
        s.add_request(r)
    plan, _, _ = step(s)
    assert scheduled(plan) == [(1, 8), (2, 8)]  # the budget is spent: r3 waits
    assert (r1.block_ids, r2.block_ids) == ([1, 2], [3, 4])
    plan, _, _ = step(s)
    assert (r1.block_ids, r2.block_ids) == ([1, 2, 5], [3, 4, 6])
    assert ids(s.waiting) == [3]  # full sequence (1 block) does not fit: 0 free
    for _ in range(3):
        step(s)  # tokens 10, 11, 12 fit in three blocks
    plan, _, _ = step(s)  # r1 needs token 13's block; none is free
    assert scheduled(plan) == [(1, 1)]
    assert plan.num_preempted == 1
    assert r2.status is Status.PREEMPTED and r2.num_computed_tokens == 0 and r2.num_preemptions == 1
    assert r2.num_output_tokens == 5  # generated tokens are kept; their KV is recomputed
    assert ids(s.waiting) == [2, 3]  # the victim goes back to the head of the queue
    assert r1.block_ids == [1, 2, 5, 6]  # r2's freed tail block (6) was at the queue's front
    assert s.kv_cache.pool.free_block_ids() == [4, 3]
    step(s)  # no admission: r2 needs 5 blocks' worth, 2 are free (its own cached prompt)
    assert ids(s.waiting) == [2, 3]
    _, _, finished = step(s)
    assert ids(finished) == [1]
    plan, _, _ = step(s)
    # r2 comes back: its prompt blocks 3 and 4 are still cached, so only 5 of 13 tokens run
    assert scheduled(plan) == [(2, 5), (3, 4)]
    assert r2.block_ids == [3, 4, 6, 5]
    assert s.prefix_hit_tokens == 8
    assert s.num_preemptions == 1


def test_decoders_crossing_block_boundaries_preempt_the_newest_each_time() -> None:
    s = scheduler(6, max_num_batched_tokens=64)  # 5 usable blocks
    a, b, c = (request(i, 4, output_len=12) for i in (1, 2, 3))
    for r in (a, b, c):
        s.add_request(r)
    step(s)
    assert (a.block_ids, b.block_ids, c.block_ids) == ([1], [2], [3])
    plan, _, _ = step(s)  # each needs a second block; only two are free
    assert (a.block_ids, b.block_ids) == ([1, 4], [2, 5])
    assert c.status is Status.PREEMPTED and scheduled(plan) == [(1, 1), (2, 1)]
    for _ in range(3):
        step(s)
    plan, _, _ = step(s)  # tokens 9: a takes c's freed block, b has none left
    assert a.block_ids == [1, 4, 3]
    assert b.status is Status.PREEMPTED and scheduled(plan) == [(1, 1)]
    assert ids(s.waiting) == [2, 3]
    assert s.num_preemptions == 2


def test_agent_turns_share_prefixes_then_a_growing_history_preempts_and_blocks() -> None:
    s = scheduler(9, max_num_batched_tokens=64)  # 8 usable blocks
    sys_prompt = (1, 4)
    turn1 = [request(i, [sys_prompt, (10 + i, 4)], output_len=4) for i in (1, 2, 3)]
    for r in turn1:
        s.add_request(r)
    step(s)
    # the system prompt block is allocated once and shared (cached as it is allocated)
    assert [r.block_ids for r in turn1] == [[1, 2], [1, 3], [1, 4]]
    assert s.kv_cache.pool.ref_cnt[1] == 3
    for _ in range(3):
        _, _, finished = step(s)
    assert ids(finished) == [1, 2, 3]
    assert s.kv_cache.pool.free_block_ids() == [8, 5, 2, 6, 3, 7, 4, 1]
    # turn 2: the history (prompt + answer) plus a 4-token tool output
    turn2 = [
        request(
            10 + r.request_id,
            [*r.prompt, (r.output_seg_id, 4), (20 + r.request_id, 4)],
            output_len=4,
        )
        for r in turn1
    ]
    for r in turn2:
        s.add_request(r)
    plan, _, _ = step(s)
    # 8 of 16 tokens hit (system prompt + own user block); the answer's block was never full
    assert scheduled(plan) == [(11, 8), (12, 8)]
    assert (turn2[0].block_ids, turn2[1].block_ids) == ([1, 2, 8, 5], [1, 3, 6, 7])
    assert ids(s.waiting) == [13]  # needs 2 new + 1 cached free block; 1 is free
    plan, _, _ = step(s)
    # token 17 of each needs a fifth block: 11 takes the last one, 12 (the newest) preempts itself
    assert turn2[0].block_ids == [1, 2, 8, 5, 4]
    assert turn2[1].status is Status.PREEMPTED
    assert ids(s.waiting) == [12, 13]
    plan, _, _ = step(s)
    # 12 finds its 16 computed tokens cached (blocks 1, 3, 6, 7), but admitting 17 tokens takes
    # 4 free blocks (1 new + its 3 cached free ones) and only those 3 are free: 13 waits too
    assert scheduled(plan) == [(11, 1)]
    assert ids(s.waiting) == [12, 13]
    _, _, finished = step(s)
    assert ids(finished) == [11]
    plan, _, _ = step(s)
    assert scheduled(plan)[0] == (12, 1)  # recomputes 1 token: 16 of 17 come from its cache


def test_a_step_that_preempts_admits_nobody_and_the_victim_blocks_the_queue_after() -> None:
    # vLLM V1 (v1/core/sched/scheduler.py, schedule()): the waiting queue is served only
    # `if not preempted_reqs`, and in FCFS order, stopping at the first request that does not fit
    s = scheduler(6, max_num_batched_tokens=64)  # 5 usable blocks
    a, b = request(1, 8, output_len=12), request(2, 8, output_len=12)
    s.add_request(a)
    s.add_request(b)
    step(s)
    assert (a.block_ids, b.block_ids) == ([1, 2], [3, 4])
    c = request(3, 3, output_len=2)  # needs one block
    s.add_request(c)
    plan, _, _ = step(s)  # a takes the last free block for token 9; b needs one too: preempted
    assert scheduled(plan) == [(1, 1)] and plan.num_preempted == 1
    assert b.status is Status.PREEMPTED and ids(s.waiting) == [2, 3]
    # b's two blocks are free and the budget is nearly whole, yet c was not admitted
    assert s.kv_cache.pool.num_free_blocks == 2 and c.status is Status.WAITING
    plan, _, _ = step(s)
    # b, at the head, needs 3 blocks (its 2 cached prompt blocks, taken out of the free queue,
    # and one more): 2 are free, so it waits, and c, which would fit, waits behind it
    assert scheduled(plan) == [(1, 1)] and ids(s.waiting) == [2, 3]
