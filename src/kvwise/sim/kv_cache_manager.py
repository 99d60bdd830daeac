"""Per-request block bookkeeping over the pool, as vLLM V1's `KVCacheManager` does it.

`get_computed_blocks` finds the longest cached prefix of full blocks (never the last token: at
least one token is computed so that the model yields logits). `allocate_slots` gives a request
the blocks for its next `num_new_tokens`, or returns False and changes nothing when the pool
cannot supply them; it then registers the request's newly full blocks in the prefix cache (vLLM
caches blocks when they are allocated for tokens being scheduled, before they are computed).
Blocks of a request no other request can share (`Request.is_shareable` false) are registered
only when it is preempted: no lookup could find them before, so nothing observable changes.
"""

from __future__ import annotations

from typing import Any

from kvwise.sim.block_pool import BlockPool, gather
from kvwise.sim.request import ContentIds, Request


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


# The two loops below read the pool's lists as list[Any]: compiled, they then move block ids
# as references instead of unboxing and re-boxing them (most ids are above CPython's small ints).


def _cached_run(cached: list[Any], hashes: list[int], start: int, stop: int) -> list[Any]:
    """The blocks cached under hashes[start:stop], up to the first miss (NULL_BLOCK)."""
    found: list[Any] = []
    for index in range(start, stop):
        block_id = cached[hashes[index]]
        if not block_id:
            break
        found.append(block_id)
    return found


def _num_still_cached(cached: list[Any], hashes: list[int], hits: list[Any]) -> int:
    """How many of a memoised lookup's leading hits are still cached under their hash."""
    for index, block_id in enumerate(hits):
        if cached[hashes[index]] != block_id:
            return index
    return len(hits)


class KVCacheManager:
    __slots__ = ("block_size", "content", "enable_prefix_caching", "max_model_len", "pool")

    def __init__(
        self,
        num_gpu_blocks: int,
        block_size: int,
        *,
        enable_prefix_caching: bool,
        max_model_len: int,
    ) -> None:
        self.pool = BlockPool(num_gpu_blocks)
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.max_model_len = max_model_len
        self.content = ContentIds()  # the block hashes of this run's requests

    def ensure_block_hashes(self, request: Request, num_blocks: int) -> None:
        """The request's block hashes up to `num_blocks`, with room for them in the cache map."""
        if len(request.block_hashes) < num_blocks:
            request.ensure_block_hashes(num_blocks, self.block_size, self.content)
            self.pool.reserve_hashes(len(self.content))

    @property
    def usage(self) -> float:
        return self.pool.usage

    def looks_up(self, request: Request) -> bool:
        """Whether the request's prefix can be in the cache: not when nobody registered its
        tokens (no other request has them, and it was never preempted)."""
        return self.enable_prefix_caching and (request.is_shareable or request.num_preemptions > 0)

    def get_computed_blocks(self, request: Request) -> list[int]:
        """Cached blocks for the request's longest cached prefix (at most num_tokens - 1 tokens).

        A blocked queue head is looked up at every step; the previous answer is reused, cut at
        its first block evicted since, and extended (the same result as a fresh walk).
        """
        if not self.looks_up(request):
            return []
        pool = self.pool
        max_blocks = (request.num_tokens - 1) // self.block_size
        hits = request.lookup_hits
        if request.lookup_num_evictions < 0:
            hits.clear()
        elif request.lookup_num_evictions < pool.num_evictions:
            del hits[_num_still_cached(pool.cached, request.block_hashes, hits) :]
        del hits[max_blocks:]
        if len(hits) < max_blocks:
            self.ensure_block_hashes(request, max_blocks)
            hits += _cached_run(pool.cached, request.block_hashes, len(hits), max_blocks)
        request.lookup_num_evictions = pool.num_evictions
        return list(hits)

    def blocks_needed(
        self,
        request: Request,
        num_new_tokens: int,
        computed_blocks: list[int],
        full_sequence_must_fit: bool,
    ) -> int:
        """Free blocks that allocating `num_new_tokens` (after the cache hits) would consume.

        With `full_sequence_must_fit` (vLLM's `scheduler_reserve_full_isl`, for admissions),
        the whole current sequence must fit, not only this step's chunk. Cache hits that sit in
        the free queue count too: touching them takes them out of it.
        """
        block_size = self.block_size
        num_computed = request.num_computed_tokens + len(computed_blocks) * block_size
        check_tokens = min(num_computed + num_new_tokens, self.max_model_len)
        if full_sequence_must_fit:
            check_tokens = max(check_tokens, min(request.num_tokens, self.max_model_len))
        required = cdiv(check_tokens, block_size) - len(request.block_ids) - len(computed_blocks)
        if computed_blocks:
            required += self.pool.num_evictable(computed_blocks)
        return required

    def allocate_slots(
        self,
        request: Request,
        num_new_tokens: int,
        computed_blocks: list[int] | None = None,
        *,
        full_sequence_must_fit: bool = False,
    ) -> bool:
        """Blocks for `num_new_tokens` more tokens (after any cache hits), or False if none fit."""
        hits = computed_blocks or []
        needed = self.blocks_needed(request, num_new_tokens, hits, full_sequence_must_fit)
        if needed > self.pool.num_free_blocks:
            return False
        self.allocate_checked(request, num_new_tokens, hits)
        return True

    def allocate_checked(self, request: Request, num_new_tokens: int, hits: list[int]) -> None:
        """`allocate_slots` once its caller has checked that `blocks_needed` are free."""
        pool, block_size = self.pool, self.block_size
        if hits:
            pool.touch(hits)
            request.block_ids.extend(hits)
            request.num_cached_blocks = len(request.block_ids)
        num_computed = request.num_computed_tokens + len(hits) * block_size
        need_slot = min(num_computed + num_new_tokens, self.max_model_len)
        num_new_blocks = cdiv(need_slot, block_size) - len(request.block_ids)
        if num_new_blocks > 0:
            request.block_ids.extend(pool.get_new_blocks(num_new_blocks))
        if self.enable_prefix_caching and request.is_shareable:
            self.cache_full_blocks(request, min(num_computed + num_new_tokens, request.num_tokens))

    def cache_full_blocks(self, request: Request, num_tokens: int) -> None:
        """Register the request's blocks that `num_tokens` fill completely."""
        num_full = num_tokens // self.block_size
        start = request.num_cached_blocks
        if num_full <= start:
            return
        self.ensure_block_hashes(request, num_full)
        new_hashes = request.block_hashes[start:num_full]
        new_ids = request.block_ids[start:num_full]  # past num_cached_blocks: no hash yet
        pool = self.pool
        request.num_cached_blocks = num_full
        if not any(gather(pool.cached, new_hashes)):  # the usual case: all of them register
            # (a chain never repeats an id: each one names its parent, back to the root)
            pool.register(new_ids, new_hashes)
            return
        for block_id, value in zip(new_ids, new_hashes, strict=True):
            pool.cache_block(block_id, value)  # the first registration of a hash wins

    def append_block(self, request: Request) -> bool:
        """A decoding request's next block, without touching the prefix cache (the caller
        registers the request's full blocks later, before anyone could look them up)."""
        block_id = self.pool.get_new_block()
        if block_id is None:
            return False
        request.block_ids.append(block_id)
        return True

    def free(self, request: Request) -> None:
        """Release the request's blocks, tail first, so that its tail is evicted first.

        Blocks past `num_cached_blocks` were never registered nor hit, so only this request
        holds them and they have no hash: they are freed as one run.
        """
        block_ids, num_cached = request.block_ids, request.num_cached_blocks
        private = block_ids[num_cached:]
        private.reverse()
        self.pool.free_private_blocks(private)
        if num_cached:
            shared = block_ids[:num_cached]
            shared.reverse()
            self.pool.free_blocks(shared)
        request.block_ids = []
        request.num_cached_blocks = 0
        request.lookup_num_evictions = -1
