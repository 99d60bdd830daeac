"""The paged KV pool: block reference counts, the LRU free queue and the prefix-cache map.

Follows vLLM V1's `BlockPool` (`vllm/v1/core/block_pool.py`):
- block 0 is the null block, never handed out, so `num_blocks - 1` blocks are usable;
- free blocks wait in one queue, oldest first; new blocks are taken from its front;
- a freed block keeps its hash and stays findable by the prefix cache until it is taken from the
  queue again (evicted), so cached blocks never reduce capacity;
- a cache hit on a free block removes it from the queue ("touch").

The queue is a list of block ids read from `head` on, so that blocks are taken and returned in
runs by slicing and extending (vLLM uses a doubly linked list). Entries have absolute positions
(`base` + index). A touch removes a block in O(1) by marking its entry's position dead (a heap of
dead positions, skipped when taking). Only cached blocks can be touched, so only their queue
position is recorded when freed (`queued_at`).

Invariants the fast paths rely on: a block has a hash exactly while the prefix-cache map names
it (`cached[block_hash[b]] == b`); a block without a hash is held by one request at most (only a
cache hit shares a block), so its one queue entry is live.

One simplification: vLLM can register two blocks under the same hash (two requests that computed
the same prefix at the same time); here the second one stays unregistered, so it is not found by
later lookups. Only concurrent duplicate prefills are affected.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from operator import itemgetter
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kvwise.sim.request import Request

NULL_BLOCK = 0
TRIM_ABOVE = 4096  # consumed queue entries dropped once there are this many (and over half)


def gather(values: list[Any], indices: list[int]) -> tuple[Any, ...]:
    """values[i] for each i in indices, in one C-level call."""
    if len(indices) > 1:
        return itemgetter(*indices)(values)
    return (values[indices[0]],) if indices else ()


class BlockPool:
    __slots__ = (
        "base",
        "block_hash",
        "cached",
        "dead",
        "eviction_log",
        "head",
        "num_blocks",
        "num_free_blocks",
        "queue",
        "queued_at",
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
        # free queue: queue[head:], front first; queue[i] sits at absolute position base + i
        self.queue = list(range(1, num_blocks))
        self.head = 0
        self.base = 0
        self.queued_at = [0, *range(num_blocks - 1)]  # position of a freed block's entry
        self.dead: list[int] = []  # min-heap: positions of entries whose block was touched
        self.num_free_blocks = num_blocks - 1

    @property
    def usage(self) -> float:
        """vLLM's KV-cache usage: 1 - free / usable (cached free blocks count as free)."""
        return 1.0 - self.num_free_blocks / (self.num_blocks - 1)

    def free_block_ids(self) -> list[int]:
        """The free queue, front (next to be taken) first."""
        dead = set(self.dead)
        start = self.base + self.head
        return [b for p, b in enumerate(self.queue[self.head :], start) if p not in dead]

    def _pop_front(self, count: int) -> list[int]:
        """The first `count` live queue entries, removed (the caller checks the free count)."""
        queue, dead, base = self.queue, self.dead, self.base
        index, stop = self.head, self.head + count
        if dead and dead[0] - base < stop:  # skip the dead entries among them
            taken: list[int] = []
            while dead and dead[0] - base < stop:
                position = heapq.heappop(dead) - base
                taken += queue[index:position]
                index, stop = position + 1, stop + 1
            taken += queue[index:stop]
        else:
            taken = queue[index:stop]
        self.head = stop
        self.num_free_blocks -= count
        return taken

    def _trim(self) -> None:
        """Drop the consumed front of the queue list (before it grows at the end)."""
        head = self.head
        if head > TRIM_ABOVE and 2 * head > len(self.queue):
            del self.queue[:head]
            self.base, self.head = self.base + head, 0

    def _claim(self, block_ids: list[int]) -> None:
        """Blocks taken from the queue: their cached hashes are evicted, one reference each."""
        ref_cnt, block_hash, cached = self.ref_cnt, self.block_hash, self.cached
        old_hashes = gather(block_hash, block_ids) if cached else ()
        if not cached or old_hashes.count(None) == len(block_ids):  # nothing to evict
            for block_id in block_ids:
                ref_cnt[block_id] = 1
            return
        if None not in old_hashes:  # all of them cached (blocks of finished requests, LRU first)
            for old_hash in old_hashes:
                del cached[old_hash]
            for block_id in block_ids:
                ref_cnt[block_id] = 1
                block_hash[block_id] = None
            self.eviction_log += block_ids
            return
        log = self.eviction_log
        for block_id, old_hash in zip(block_ids, old_hashes, strict=True):
            if old_hash is not None:
                del cached[old_hash]
                block_hash[block_id] = None
                log.append(block_id)
            ref_cnt[block_id] = 1

    def get_new_blocks(self, count: int) -> list[int]:
        """Take `count` blocks from the front of the free queue, evicting their cached hashes."""
        assert count <= self.num_free_blocks, "caller checks the free count first"
        taken = self._pop_front(count)
        self._claim(taken)
        return taken

    def grant_blocks(self, requests: list[Request]) -> None:
        """One block from the front of the free queue to each request, in order (the caller
        checks that there are enough)."""
        count, head, dead = len(requests), self.head, self.dead
        if self.cached or (dead and dead[0] - self.base < head + count):
            taken = self._pop_front(count)
            self._claim(taken)
            for request, block_id in zip(requests, taken, strict=True):
                request.block_ids.append(block_id)
            return
        # no hash to evict and no dead entry among them: one slice (the usual decode step)
        ref_cnt = self.ref_cnt
        for request, block_id in zip(requests, self.queue[head : head + count], strict=True):
            ref_cnt[block_id] = 1
            request.block_ids.append(block_id)
        self.head = head + count
        self.num_free_blocks -= count

    def get_new_block(self) -> int | None:
        """One block from the front of the free queue (None when it is empty)."""
        if not self.num_free_blocks:
            return None
        return self.get_new_blocks(1)[0]

    def touch(self, block_ids: Iterable[int]) -> None:
        """Take a reference on cache-hit blocks; free ones leave the free queue."""
        ref_cnt, queued_at, dead = self.ref_cnt, self.queued_at, self.dead
        for block_id in block_ids:
            if ref_cnt[block_id] == 0:
                heapq.heappush(dead, queued_at[block_id])  # its queue entry is now dead
                self.num_free_blocks -= 1
            ref_cnt[block_id] += 1
        if len(dead) > self.num_free_blocks + 1024:
            self._compact()

    def free_blocks(self, ordered_block_ids: Iterable[int]) -> None:
        """Drop a reference; blocks that reach zero join the END of the free queue, in order."""
        self._trim()
        block_ids = list(ordered_block_ids)
        ref_cnt, queued_at, queue = self.ref_cnt, self.queued_at, self.queue
        start = position = self.base + len(queue)
        refs = gather(ref_cnt, block_ids)
        num_joining = refs.count(1)
        if refs[:num_joining].count(1) == num_joining:
            # the blocks nobody else holds come first (a shared prefix, freed last, stays
            # held): they join as one run, the others lose a reference
            joining = block_ids[:num_joining]
            for entry_position, block_id in enumerate(joining, start):
                ref_cnt[block_id] = 0
                queued_at[block_id] = entry_position
            for block_id in block_ids[num_joining:]:
                ref_cnt[block_id] -= 1
            queue += joining
            self.num_free_blocks += num_joining
            return
        for block_id in block_ids:
            ref_cnt[block_id] -= 1
            if ref_cnt[block_id] == 0:
                queued_at[block_id] = position
                queue.append(block_id)
                position += 1
        self.num_free_blocks += position - start

    def free_private_blocks(self, ordered_block_ids: list[int]) -> None:
        """`free_blocks` for blocks that one request holds and that have no hash (never
        registered in the prefix cache): all of them join the queue, as one run. Their queue
        positions are not recorded: only cached blocks can be touched."""
        self._trim()
        ref_cnt = self.ref_cnt
        for block_id in ordered_block_ids:
            ref_cnt[block_id] = 0
        self.queue.extend(ordered_block_ids)
        self.num_free_blocks += len(ordered_block_ids)

    def _compact(self) -> None:
        """Drop the dead entries (many touches and few takes leave them piling up)."""
        dead = set(self.dead)
        start = self.base + self.head
        self.queue = [b for p, b in enumerate(self.queue[self.head :], start) if p not in dead]
        self.head, self.base, self.dead = 0, 0, []
        queued_at = self.queued_at
        for position, block_id in enumerate(self.queue):
            queued_at[block_id] = position

    def cache_block(self, block_id: int, block_hash: int) -> None:
        if self.block_hash[block_id] is not None or block_hash in self.cached:
            return
        self.block_hash[block_id] = block_hash
        self.cached[block_hash] = block_id

    def num_evictable(self, block_ids: list[int]) -> int:
        """How many of these (cache-hit) blocks sit in the free queue: touching them uses it up."""
        return gather(self.ref_cnt, block_ids).count(0)
