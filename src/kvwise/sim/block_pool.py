"""The paged KV pool: block reference counts, the LRU free queue and the prefix-cache map.

Follows vLLM V1's `BlockPool` (`vllm/v1/core/block_pool.py`):
- block 0 is the null block, never handed out, so `num_blocks - 1` blocks are usable;
- free blocks wait in one queue, oldest first; new blocks are taken from its front;
- a freed block keeps its hash and stays findable by the prefix cache until it is taken from the
  queue again (evicted), so cached blocks never reduce capacity;
- a cache hit on a free block removes it from the queue ("touch").

The queue is a deque of entries `seq * num_blocks + block_id`; an entry is live while the
block's `free_seq` is still `seq`, so a touch removes a block in O(1) by leaving a dead entry
behind (vLLM uses a doubly linked list to the same effect).

One simplification: vLLM can register two blocks under the same hash (two requests that computed
the same prefix at the same time); here the second one stays unregistered, so it is not found by
later lookups. Only concurrent duplicate prefills are affected.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from operator import itemgetter
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kvwise.sim.request import Request

NULL_BLOCK = 0
NOT_FREE = -1


class BlockPool:
    __slots__ = (
        "block_hash",
        "cached",
        "eviction_log",
        "free_seq",
        "next_seq",
        "num_blocks",
        "num_free_blocks",
        "queue",
        "ref_cnt",
    )

    def __init__(self, num_blocks: int) -> None:
        if num_blocks < 2:
            raise ValueError(
                f"a KV pool needs at least 2 blocks (one is the null block), got {num_blocks}"
            )
        self.num_blocks = num_blocks
        self.ref_cnt = [0] * num_blocks
        self.block_hash: list[int | None] = [None] * num_blocks
        self.cached: dict[int, int] = {}  # block hash -> block id
        self.eviction_log: list[int] = []  # blocks whose cached hash was dropped, in order
        # free queue: entries seq * num_blocks + block_id, live while free_seq[block_id] == seq
        self.free_seq = [NOT_FREE, *list(range(1, num_blocks))]
        self.queue: deque[int] = deque(b * num_blocks + b for b in range(1, num_blocks))
        self.next_seq = num_blocks
        self.num_free_blocks = num_blocks - 1

    @property
    def usage(self) -> float:
        """vLLM's KV-cache usage: 1 - free / usable (cached free blocks count as free)."""
        return 1.0 - self.num_free_blocks / (self.num_blocks - 1)

    def free_block_ids(self) -> list[int]:
        """The free queue, front (next to be taken) first."""
        n, free_seq = self.num_blocks, self.free_seq
        return [e % n for e in self.queue if free_seq[e % n] == e // n]

    def _pop_free(self) -> int:
        n, free_seq, popleft = self.num_blocks, self.free_seq, self.queue.popleft
        while True:
            entry = popleft()
            block_id = entry % n
            if free_seq[block_id] == entry // n:
                free_seq[block_id] = NOT_FREE
                self.num_free_blocks -= 1
                return block_id

    def get_new_blocks(self, count: int) -> list[int]:
        """Take `count` blocks from the front of the free queue, evicting their cached hashes."""
        assert count <= self.num_free_blocks, "caller checks the free count first"
        n, free_seq, popleft = self.num_blocks, self.free_seq, self.queue.popleft
        block_hash, cached, ref_cnt = self.block_hash, self.cached, self.ref_cnt
        taken: list[int] = []
        while len(taken) < count:
            entry = popleft()
            block_id = entry % n
            if free_seq[block_id] != entry // n:
                continue  # a dead entry: the block was touched since it was queued
            free_seq[block_id] = NOT_FREE
            old_hash = block_hash[block_id]
            if old_hash is not None:  # evict it from the prefix cache
                if cached.get(old_hash) == block_id:
                    del cached[old_hash]
                    self.eviction_log.append(block_id)
                block_hash[block_id] = None
            ref_cnt[block_id] = 1
            taken.append(block_id)
        self.num_free_blocks -= count
        return taken

    def grant_blocks(self, requests: list[Request]) -> None:
        """One block from the front of the free queue to each request, in order (the caller
        checks that there are enough)."""
        n, free_seq, popleft = self.num_blocks, self.free_seq, self.queue.popleft
        block_hash, ref_cnt = self.block_hash, self.ref_cnt
        for request in requests:
            entry = popleft()
            while free_seq[entry % n] != entry // n:
                entry = popleft()  # a dead entry: the block was touched since it was queued
            block_id = entry % n
            free_seq[block_id] = NOT_FREE
            if block_hash[block_id] is not None:
                self._evict(block_id)
            ref_cnt[block_id] = 1
            request.block_ids.append(block_id)
        self.num_free_blocks -= len(requests)

    def _evict(self, block_id: int) -> None:
        old_hash = self.block_hash[block_id]
        assert old_hash is not None
        if self.cached.get(old_hash) == block_id:
            del self.cached[old_hash]
            self.eviction_log.append(block_id)
        self.block_hash[block_id] = None

    def get_new_block(self) -> int | None:
        """One block from the front of the free queue (None when it is empty)."""
        if not self.num_free_blocks:
            return None
        return self._take(self._pop_free())

    def _take(self, block_id: int) -> int:
        old_hash = self.block_hash[block_id]
        if old_hash is not None:
            if self.cached.get(old_hash) == block_id:
                del self.cached[old_hash]
                self.eviction_log.append(block_id)
            self.block_hash[block_id] = None
        self.ref_cnt[block_id] = 1
        return block_id

    def touch(self, block_ids: Iterable[int]) -> None:
        """Take a reference on cache-hit blocks; free ones leave the free queue."""
        ref_cnt, free_seq = self.ref_cnt, self.free_seq
        for block_id in block_ids:
            if ref_cnt[block_id] == 0:
                free_seq[block_id] = NOT_FREE  # its queue entry is now dead
                self.num_free_blocks -= 1
            ref_cnt[block_id] += 1

    def free_blocks(self, ordered_block_ids: Iterable[int]) -> None:
        """Drop a reference; blocks that reach zero join the END of the free queue, in order."""
        ref_cnt, free_seq, append, n = (
            self.ref_cnt,
            self.free_seq,
            self.queue.append,
            self.num_blocks,
        )
        seq = self.next_seq
        for block_id in ordered_block_ids:
            ref_cnt[block_id] -= 1
            if ref_cnt[block_id] == 0:
                free_seq[block_id] = seq
                append(seq * n + block_id)
                seq += 1
                self.num_free_blocks += 1
        self.next_seq = seq
        if len(self.queue) > 2 * self.num_free_blocks + 1024:
            self._compact()

    def _compact(self) -> None:
        n, free_seq = self.num_blocks, self.free_seq
        self.queue = deque(e for e in self.queue if free_seq[e % n] == e // n)

    def cache_block(self, block_id: int, block_hash: int) -> None:
        if self.block_hash[block_id] is not None or block_hash in self.cached:
            return
        self.block_hash[block_id] = block_hash
        self.cached[block_hash] = block_id

    def num_evictable(self, block_ids: list[int]) -> int:
        """How many of these (cache-hit) blocks sit in the free queue: touching them uses it up."""
        if len(block_ids) == 1:
            return int(self.ref_cnt[block_ids[0]] == 0)
        return itemgetter(*block_ids)(self.ref_cnt).count(0) if block_ids else 0
