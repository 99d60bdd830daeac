"""A prefix cache that already holds the workload's prompts (`kvwise simulate --warm-cache`).

vLLM's benchmark sends the same sampled prompts at every request rate of a sweep (the data set
is drawn with a fixed seed). Against a server that was not restarted between the points, the
prefix cache (on by default in V1) still holds the prompts of the earlier points, so their
prefills are cache hits, not computed. Warming the cache reproduces that: every session's first
prompt is computed once, in workload order, registered in the prefix cache and freed, as a
finished request's blocks are (`Scheduler.finish`); the newest stay when the pool is too small
for all of them (LRU eviction). Only first turns: what later turns send depends on answers
the earlier run generated (not modelled).
"""

from __future__ import annotations

from kvwise.sim.kv_cache_manager import KVCacheManager
from kvwise.sim.request import Request
from kvwise.sim.workloads import Workload

WARM_SEG_BASE = -(2**56)  # outputs of the warm-up run: ids no prompt segment uses


def warm_prefix_cache(kv_cache: KVCacheManager, workload: Workload) -> int:
    """Load every session's first prompt into the prefix cache; returns how many fit the pool
    (a prompt longer than max_model_len, or than the pool, is left out, as vLLM would reject
    or fail it)."""
    if not kv_cache.enable_prefix_caching:
        return 0
    num_loaded = 0
    for index, session in enumerate(workload.sessions):
        prompt = list(session.turns[0].new_segments)
        request = Request(-1 - index, prompt, 1, output_seg_id=WARM_SEG_BASE - index)
        if request.num_tokens >= kv_cache.max_model_len:
            continue
        hits = kv_cache.get_computed_blocks(request)
        num_new = request.num_tokens - len(hits) * kv_cache.block_size
        if not kv_cache.allocate_slots(request, num_new, hits, full_sequence_must_fit=True):
            continue
        request.num_computed_tokens = request.num_tokens
        kv_cache.cache_full_blocks(request, request.num_tokens)
        kv_cache.free(request)
        num_loaded += 1
    return num_loaded
