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

from collections.abc import Sequence

from kvwise.sim.kv_cache_manager import KVCacheManager
from kvwise.sim.request import Request, Segment
from kvwise.sim.workloads import Workload

WARM_SEG_BASE = -(2**56)  # outputs of the warm-up run: ids no prompt segment uses


def warm_prefix_cache(kv_cache: KVCacheManager, workload: Workload) -> int:
    """Load every session's first prompt into the prefix cache; returns how many fit the pool
    (a prompt longer than max_model_len, or than the pool, is left out, as vLLM would reject
    or fail it)."""
    return _load(kv_cache, [(list(s.turns[0].new_segments), 0) for s in workload.sessions])


def replay_earlier_runs(kv_cache: KVCacheManager, runs: Sequence[Workload]) -> int:
    """The prefix cache as earlier runs on the same server left it: each run's first prompts
    with their answers, run after run, in workload order. An answer's full blocks are cached
    as vLLM caches them, and take room: when the runs hold more than the pool, the oldest
    (first freed) are evicted first, so a later run keeps the prompts of the latest.

    A prompt is named by its segments: vLLM's random data set at range ratio 0 draws prompt i
    of every run of a sweep from the same seeded offsets (`RandomDataset.sample`: token ids
    offset_i + i + 0..L-1), so prompt i of a run repeats prompt i of any other run, and a
    longer prompt starts with a shorter one; kvwise's random workloads number prompt i's
    segment i, with the same effect on the block hashes."""
    return _load(
        kv_cache,
        [
            (list(s.turns[0].new_segments), s.turns[0].output_len)
            for run in runs
            for s in run.sessions
        ],
    )


def _load(kv_cache: KVCacheManager, sequences: list[tuple[list[Segment], int]]) -> int:
    """Compute, cache and free each (prompt, answer tokens) in turn; returns how many fit."""
    if not kv_cache.enable_prefix_caching:
        return 0
    num_loaded = 0
    for index, (prompt, answer) in enumerate(sequences):
        request = Request(-1 - index, prompt, max(answer, 1), output_seg_id=WARM_SEG_BASE - index)
        request.num_output_tokens = answer
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
