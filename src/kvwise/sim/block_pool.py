"""The paged KV pool: block reference counts, the LRU free queue and the prefix-cache map.

Follows vLLM V1's `BlockPool` (`vllm/v1/core/block_pool.py`):
- block 0 is the null block, never handed out, so `num_blocks - 1` blocks are usable;
- free blocks wait in one queue, oldest first; new blocks are taken from its front;
- a freed block keeps its hash and stays findable by the prefix cache until it is taken from the
  queue again (evicted), so cached blocks never reduce capacity;
- a cache hit on a free block removes it from the queue ("touch").

The queue is a list of block ids read from `head` on, so that blocks are taken and returned in
runs by slicing and extending (vLLM uses a doubly linked list). A touch leaves the block's entry
in place, dead, and counts it (`dead_entries[b]`); entries are skipped when taken while their
block has dead ones counted. This is exact because only a block's newest entry can be live: a
touch kills the newest one (the block was free), and a block re-enters the queue only at the end.
So the dead entries of a block are always its oldest ones, the first ones reached from the front.

Block hashes are the dense content ids of `request.ContentIds` (1, 2, ...), so the prefix-cache
map is a list indexed by id: `cached[h]` is the block registered under `h`, or NULL_BLOCK (0,
never handed out) when there is none; `block_hash[b]` is 0 while block `b` has none.

Invariants the fast paths rely on: a block has a hash exactly while the prefix-cache map names
it (`cached[block_hash[b]] == b`); a block without a hash is held by one request at most (only a
cache hit shares a block), so its one queue entry is live.

One simplification: vLLM can register two blocks under the same hash (two requests that computed
the same prefix at the same time); here the second one stays unregistered, so it is not found by
later lookups. Only concurrent duplicate prefills are affected.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from kvwise.sim.request import Request

NULL_BLOCK: Final = 0
NO_HASH: Final = 0  # block_hash of a block outside the prefix cache (content ids start at 1)
TRIM_ABOVE: Final = 4096  # consumed queue entries dropped once there are this many (and over half)


def gather(values: list[Any], indices: list[int]) -> list[Any]:
    """values[i] for each i in indices (typed Any, so that compiled code copies references
    instead of unboxing and re-boxing the ints)."""
    return [values[i] for i in indices]


class BlockPool:
    __slots__ = (
        "block_hash",
        "cached",
        "dead_entries",
        "head",
        "num_blocks",
        "num_cached",
        "num_dead",
        "num_evictions",
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
        self.block_hash = [NO_HASH] * num_blocks
        self.cached: list[int] = []  # block hash (content id) -> block id, NULL_BLOCK if none
        self.num_cached = 0
        self.num_evictions = 0  # cached hashes dropped so far (lookup memos check it)
        # free queue: queue[head:], front first, with dead entries (touched blocks) among them
        self.queue = list(range(1, num_blocks))
        self.head = 0
        self.dead_entries = [0] * num_blocks  # a block's dead entries in the queue
        self.num_dead = 0  # dead entries in the queue, all blocks
        self.num_free_blocks = num_blocks - 1

    @property
    def usage(self) -> float:
        """vLLM's KV-cache usage: 1 - free / usable (cached free blocks count as free)."""
        return 1.0 - self.num_free_blocks / (self.num_blocks - 1)

    def reserve_hashes(self, num_hashes: int) -> None:
        """Room in the prefix-cache map for content ids up to `num_hashes`."""
        missing = num_hashes + 1 - len(self.cached)
        if missing > 0:
            self.cached += [NULL_BLOCK] * max(missing, len(self.cached))

    def free_block_ids(self) -> list[int]:
        """The free queue, front (next to be taken) first."""
        dead = list(self.dead_entries)
        live: list[int] = []
        for block_id in self.queue[self.head :]:
            if dead[block_id]:
                dead[block_id] -= 1
            else:
                live.append(block_id)
        return live

    def _pop_front(self, count: int) -> list[int]:
        """The first `count` live queue entries, removed (the caller checks the free count)."""
        queue, head = self.queue, self.head
        taken = queue[head : head + count]
        if self.num_dead and any(gather(self.dead_entries, taken)):
            taken = self._pop_front_skipping_dead(count)
        else:
            self.head = head + count
        self.num_free_blocks -= count
        return taken

    def _pop_front_skipping_dead(self, count: int) -> list[int]:
        queue, dead = self.queue, self.dead_entries
        taken: list[int] = []
        index = self.head
        while len(taken) < count:
            block_id = queue[index]
            index += 1
            if dead[block_id]:  # one of its oldest entries: dead
                dead[block_id] -= 1
                self.num_dead -= 1
            else:
                taken.append(block_id)
        self.head = index
        return taken

    def _trim(self) -> None:
        """Drop the consumed front of the queue list (before it grows at the end)."""
        head = self.head
        if head > TRIM_ABOVE and 2 * head > len(self.queue):
            del self.queue[:head]
            self.head = 0

    def _claim(self, block_ids: list[int]) -> None:
        """Blocks taken from the queue: their cached hashes are evicted, one reference each."""
        ref_cnt, block_hash, cached = self.ref_cnt, self.block_hash, self.cached
        for block_id in block_ids:
            ref_cnt[block_id] = 1
        if not self.num_cached:
            return
        num_evicted = 0
        for block_id in block_ids:
            old_hash = block_hash[block_id]
            if old_hash != NO_HASH:
                cached[old_hash] = NULL_BLOCK
                block_hash[block_id] = NO_HASH
                num_evicted += 1
        self.num_cached -= num_evicted
        self.num_evictions += num_evicted

    def get_new_blocks(self, count: int) -> list[int]:
        """Take `count` blocks from the front of the free queue, evicting their cached hashes."""
        assert count <= self.num_free_blocks, "caller checks the free count first"
        taken = self._pop_front(count)
        self._claim(taken)
        return taken

    def grant_blocks(self, requests: list[Request]) -> None:
        """One block from the front of the free queue to each request, in order (the caller
        checks that there are enough)."""
        count, head = len(requests), self.head
        if self.num_cached or self.num_dead:
            taken = self._pop_front(count)
            self._claim(taken)
        else:  # no hash to evict and no dead entry: one slice (the usual decode step)
            taken = self.queue[head : head + count]
            ref_cnt = self.ref_cnt
            for block_id in taken:
                ref_cnt[block_id] = 1
            self.head = head + count
            self.num_free_blocks -= count
        taken_ref: list[Any] = taken  # (ids moved as references, see `register`)
        for index in range(count):
            requests[index].block_ids.append(taken_ref[index])

    def get_new_block(self) -> int | None:
        """One block from the front of the free queue (None when it is empty)."""
        if not self.num_free_blocks:
            return None
        return self.get_new_blocks(1)[0]

    def touch(self, block_ids: list[int]) -> None:
        """Take a reference on cache-hit blocks; free ones leave the free queue."""
        ref_cnt, dead = self.ref_cnt, self.dead_entries
        for block_id in block_ids:
            if ref_cnt[block_id] == 0:  # its newest queue entry is now dead
                dead[block_id] += 1
                self.num_dead += 1
                self.num_free_blocks -= 1
            ref_cnt[block_id] += 1
        if self.num_dead > self.num_free_blocks + 1024:
            self._compact()

    def free_blocks(self, ordered_block_ids: list[int]) -> None:
        """Drop a reference; blocks that reach zero join the END of the free queue, in order."""
        self._trim()
        ref_cnt, queue = self.ref_cnt, self.queue
        # the blocks nobody else holds usually come first (a shared prefix, freed last, stays
        # held): they join as one run
        num_joining = 0
        for block_id in ordered_block_ids:
            if ref_cnt[block_id] != 1:
                break
            ref_cnt[block_id] = 0
            num_joining += 1
        queue += ordered_block_ids[:num_joining]
        for index in range(num_joining, len(ordered_block_ids)):
            block_id = ordered_block_ids[index]
            ref_cnt[block_id] -= 1
            if ref_cnt[block_id] == 0:
                queue.append(block_id)
                num_joining += 1
        self.num_free_blocks += num_joining

    def free_private_blocks(self, ordered_block_ids: list[int]) -> None:
        """`free_blocks` for blocks that one request holds and that have no hash (never
        registered in the prefix cache): all of them join the queue, as one run."""
        self._trim()
        ref_cnt = self.ref_cnt
        for block_id in ordered_block_ids:
            ref_cnt[block_id] = 0
        self.queue.extend(ordered_block_ids)
        self.num_free_blocks += len(ordered_block_ids)

    def _compact(self) -> None:
        """Drop the dead entries (many touches and few takes leave them piling up)."""
        self.queue = self.free_block_ids()
        self.head, self.num_dead = 0, 0
        self.dead_entries = [0] * self.num_blocks

    def cache_block(self, block_id: int, block_hash: int) -> None:
        """Register a full block under its hash; the first block registered under one keeps it."""
        self.reserve_hashes(block_hash)
        if self.block_hash[block_id] != NO_HASH or self.cached[block_hash] != NULL_BLOCK:
            return
        self.block_hash[block_id] = block_hash
        self.cached[block_hash] = block_id
        self.num_cached += 1

    def num_evictable(self, block_ids: list[int]) -> int:
        """How many of these (cache-hit) blocks sit in the free queue: touching them uses it up."""
        ref_cnt = self.ref_cnt
        count = 0
        for block_id in block_ids:
            if ref_cnt[block_id] == 0:
                count += 1
        return count

    def register(self, block_ids: list[int], block_hashes: list[int]) -> None:
        """Cache full blocks under their hashes (none of which is cached yet)."""
        # the same lists typed Any: compiled, the ids move as references, without re-boxing
        ids_ref: list[Any] = block_ids
        hashes_ref: list[Any] = block_hashes
        block_hash: list[Any] = self.block_hash
        cached: list[Any] = self.cached
        for index in range(len(block_ids)):
            block_hash[block_ids[index]] = hashes_ref[index]
            cached[block_hashes[index]] = ids_ref[index]
        self.num_cached += len(block_ids)
