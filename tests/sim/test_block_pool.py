"""The paged pool: null block, free-queue order, eviction of cached free blocks, touch."""

from __future__ import annotations

import pytest

from kvwise.sim.block_pool import NO_HASH, BlockPool
from tests.sim.factories import cached_blocks


def test_blocks_come_from_the_front_and_the_null_block_never_does() -> None:
    pool = BlockPool(6)
    assert pool.free_block_ids() == [1, 2, 3, 4, 5]
    assert pool.get_new_blocks(3) == [1, 2, 3]
    assert pool.free_block_ids() == [4, 5]
    assert pool.num_free_blocks == 2
    assert pool.usage == pytest.approx(3 / 5)  # 1 - free / (num_blocks - 1)


def test_freed_blocks_join_the_end_in_the_order_given() -> None:
    pool = BlockPool(6)
    taken = pool.get_new_blocks(3)
    pool.free_blocks(taken[::-1])
    assert pool.free_block_ids() == [4, 5, 3, 2, 1]
    assert pool.ref_cnt[1:4] == [0, 0, 0]


def test_a_shared_block_is_free_only_when_the_last_reference_goes() -> None:
    pool = BlockPool(4)
    [block] = pool.get_new_blocks(1)
    pool.touch([block])  # a second request hits it in the prefix cache
    pool.free_blocks([block])
    assert block not in pool.free_block_ids()
    pool.free_blocks([block])
    assert pool.free_block_ids()[-1] == block


def test_cached_free_blocks_stay_findable_until_taken_again_lru_first() -> None:
    pool = BlockPool(4)  # usable blocks 1, 2, 3
    blocks = pool.get_new_blocks(3)
    for block, value in zip(blocks, (111, 222, 333), strict=False):
        pool.cache_block(block, value)
    pool.free_blocks(blocks)  # free queue: 1, 2, 3 (all still cached)
    assert pool.num_free_blocks == 3  # cached blocks do not reduce capacity
    assert cached_blocks(pool) == {111: 1, 222: 2, 333: 3}
    assert pool.get_new_blocks(1) == [1]  # the oldest free block is evicted first
    assert cached_blocks(pool) == {222: 2, 333: 3}
    assert pool.num_evictions == 1


def test_touching_a_free_cached_block_takes_it_out_of_the_queue_only() -> None:
    pool = BlockPool(5)
    blocks = pool.get_new_blocks(4)
    pool.free_blocks(blocks)
    pool.touch([2])
    assert pool.free_block_ids() == [1, 3, 4]
    assert pool.num_free_blocks == 3
    assert pool.get_new_blocks(2) == [1, 3]  # the dead queue entry of block 2 is skipped


def test_a_block_touched_and_freed_again_is_taken_from_its_new_place_only() -> None:
    pool = BlockPool(5)
    pool.free_blocks(pool.get_new_blocks(4))  # queue: 1, 2, 3, 4
    for _ in range(2):  # 2 leaves on a hit and comes back at the end, twice
        pool.touch([2])
        pool.free_blocks([2])
    assert pool.free_block_ids() == [1, 3, 4, 2]
    assert pool.get_new_blocks(4) == [1, 3, 4, 2]
    assert pool.num_free_blocks == 0


def test_piled_up_dead_entries_are_dropped_without_changing_the_order() -> None:
    pool = BlockPool(4001)
    pool.free_blocks(pool.get_new_blocks(4000))
    pool.touch(list(range(1, 3001)))  # 3,000 dead entries against 1,000 free blocks
    assert len(pool.queue) - pool.head == 1000  # compacted
    pool.free_blocks([5, 7])
    assert pool.get_new_blocks(1002) == [*range(3001, 4001), 5, 7]


def test_the_first_block_registered_under_a_hash_keeps_it() -> None:
    pool = BlockPool(4)
    first, second = pool.get_new_blocks(2)
    pool.cache_block(first, 7)
    pool.cache_block(second, 7)
    assert cached_blocks(pool) == {7: first}
    assert pool.block_hash[second] == NO_HASH


def test_a_pool_needs_a_usable_block() -> None:
    with pytest.raises(ValueError, match="null block"):
        BlockPool(1)
