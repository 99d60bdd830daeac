"""Slots per request: prefix hits, all-or-nothing allocation, full-sequence admission, frees."""

from __future__ import annotations

from kvwise.sim.kv_cache_manager import KVCacheManager
from tests.sim.factories import cached_blocks, request

BLOCK = 4


def manager(num_blocks: int, caching: bool = True) -> KVCacheManager:
    return KVCacheManager(num_blocks, BLOCK, enable_prefix_caching=caching, max_model_len=1024)


def admit(kv: KVCacheManager, r, full: bool = False) -> list[int]:  # type: ignore[no-untyped-def]
    hits = kv.get_computed_blocks(r)
    assert kv.allocate_slots(r, r.num_tokens - len(hits) * BLOCK, hits, full_sequence_must_fit=full)
    r.num_computed_tokens = r.num_tokens
    return hits


def test_a_shared_prefix_is_found_in_the_first_requests_blocks() -> None:
    kv = manager(16)
    a = request(1, [(7, 8), (100, 3)])
    admit(kv, a)
    assert a.block_ids == [1, 2, 3]
    b = request(2, [(7, 8), (200, 5)])
    hits = admit(kv, b)
    assert hits == [1, 2]  # the system prompt's two full blocks
    assert b.block_ids == [1, 2, 4, 5]
    assert kv.pool.ref_cnt[1:3] == [2, 2]


def test_a_hit_never_covers_the_last_token() -> None:
    kv = manager(16)
    admit(kv, request(1, [(7, 8)]))
    again = request(2, [(7, 8)])  # exactly the same 8 tokens: only the first block may hit
    assert kv.get_computed_blocks(again) == [1]


def test_allocation_is_all_or_nothing() -> None:
    kv = manager(4)  # 3 usable blocks
    r = request(1, 16)  # needs 4
    assert not kv.allocate_slots(r, 16)
    assert r.block_ids == []
    assert kv.pool.num_free_blocks == 3


def test_full_sequence_admission_refuses_what_only_the_first_chunk_fits() -> None:
    kv = manager(4)  # 3 usable blocks = 12 tokens
    r = request(1, 14)
    assert kv.allocate_slots(r, 8)  # an 8-token chunk fits when only the chunk must
    kv.free(r)
    assert not kv.allocate_slots(r, 8, full_sequence_must_fit=True)  # 14 tokens do not


def test_cache_hits_sitting_in_the_free_queue_count_against_free_blocks() -> None:
    kv = manager(5)  # 4 usable
    a = request(1, [(7, 8), (100, 1)])
    admit(kv, a)
    kv.free(a)  # blocks 1, 2 cached and free; 3 free
    b = request(2, [(7, 8), (200, 8)])  # hits 1, 2; needs 2 more; touching 1, 2 uses them up
    hits = kv.get_computed_blocks(b)
    assert hits == [1, 2]
    assert kv.blocks_needed(b, 8, hits, False) == 2 + 2
    assert kv.allocate_slots(b, 8, hits)
    assert kv.pool.num_free_blocks == 0


def test_a_request_frees_tail_first_so_its_tail_is_evicted_first() -> None:
    kv = manager(6)
    a = request(1, [(7, 12)])
    admit(kv, a)
    assert a.block_ids == [1, 2, 3]
    kv.free(a)
    assert kv.pool.free_block_ids() == [4, 5, 3, 2, 1]


def test_a_memoised_lookup_is_cut_where_a_hit_block_was_evicted() -> None:
    kv = manager(5)
    a = request(1, [(7, 12), (100, 1)])
    admit(kv, a)
    kv.free(a)  # queue: 4, 3, 2, 1; blocks 1-3 cached (block 4 holds one token: not full)
    head = request(2, [(7, 12), (200, 8)])
    assert kv.get_computed_blocks(head) == [1, 2, 3]
    other = request(3, 8)
    assert kv.allocate_slots(other, 8)  # takes 4, then evicts block 3 (the prompt's tail)
    assert other.block_ids == [4, 3]
    assert kv.get_computed_blocks(head) == [1, 2]
    assert manager_walk(kv, head) == [1, 2]


def manager_walk(kv: KVCacheManager, r) -> list[int]:  # type: ignore[no-untyped-def]
    """The lookup without the memo: walk the hashes from the first block."""
    r.lookup_num_evictions = -1
    return kv.get_computed_blocks(r)


def test_without_prefix_caching_nothing_is_shared_or_registered() -> None:
    kv = manager(16, caching=False)
    admit(kv, request(1, [(7, 8), (100, 3)]))
    assert kv.get_computed_blocks(request(2, [(7, 8), (200, 5)])) == []
    assert cached_blocks(kv.pool) == {}
