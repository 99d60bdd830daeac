"""Decoding requests kept implicit, so that a step costs O(events), not O(batch).

A request that is decoding gains exactly one token per step as long as every running request
gets its token (the step's budget covers them and no partial prefill precedes them). Its
counters are then a function of the step index, so they are stored once (`synced_step`) and
brought up to date only when something happens to it:

* it needs a new KV block: every `block_size` steps, at the steps s with
  (s - computed tokens) % block_size == its *phase*. The members of each phase are kept in one
  list sorted by admission order, so the requests that need a block at step s are simply
  `phase_groups[s % block_size]`, in the order vLLM's running loop serves them;
* it produces its last token: a *finish event*, filed in a calendar by step;
* it is preempted, or the engine falls back to the reference scheduler: `sync`.

A calendar entry is valid while the request's `epoch` is the one it was filed under (leaving
the cohort bumps the epoch), so nothing is ever removed from the calendar eagerly.
"""

from __future__ import annotations

import bisect
import heapq
from array import array

from kvwise.sim.kv_cache_manager import KVCacheManager
from kvwise.sim.request import Request


class DecodeCohort:
    __slots__ = (
        "block_size",
        "ctx_offset",
        "epoch",
        "finish_events",
        "finish_steps",
        "kv_cache",
        "members",
        "phase_groups",
        "phase_keys",
        "step_end_s",
    )

    def __init__(self, kv_cache: KVCacheManager, step_end_s: array) -> None:
        self.kv_cache = kv_cache
        self.block_size = kv_cache.block_size
        self.step_end_s = step_end_s  # end time of every step so far (shared with the engine)
        self.members: dict[int, Request] = {}
        self.epoch: dict[int, int] = {}  # request_id -> epoch of its calendar entries
        self.finish_events: dict[int, list[tuple[int, Request]]] = {}
        self.finish_steps: list[int] = []  # min-heap of steps with finish entries
        # members needing a block at steps s with s % block_size == phase, in running order
        self.phase_groups: list[list[Request]] = [[] for _ in range(self.block_size)]
        self.phase_keys: list[list[int]] = [[] for _ in range(self.block_size)]  # running_seq
        # sum over members of (num_computed_tokens + 1 - synced_step): the decode context of
        # step s is ctx_offset + len(members) * s
        self.ctx_offset = 0

    def __len__(self) -> int:
        return len(self.members)

    def decode_context(self, step: int) -> int:
        return self.ctx_offset + len(self.members) * step

    def needing_blocks(self, step: int) -> list[Request]:
        """Members that need a new block to schedule their token at `step`, in running order."""
        return self.phase_groups[step % self.block_size]

    def next_finish_step(self) -> int | None:
        steps = self.finish_steps
        while steps and steps[0] not in self.finish_events:
            heapq.heappop(steps)
        return steps[0] if steps else None

    def join(self, request: Request, step: int) -> None:
        """A request whose counters are exact at `step` (before it is scheduled) starts decoding."""
        request.synced_step = step
        self.members[request.request_id] = request
        self.ctx_offset += request.num_computed_tokens + 1 - step
        phase = (step - request.num_computed_tokens) % self.block_size
        keys = self.phase_keys[phase]
        position = bisect.bisect(keys, request.running_seq)
        keys.insert(position, request.running_seq)
        self.phase_groups[phase].insert(position, request)
        finish_step = step + request.output_len - request.num_output_tokens - 1
        entries = self.finish_events.get(finish_step)
        entry = (self.epoch.get(request.request_id, 0), request)
        if entries is None:
            self.finish_events[finish_step] = [entry]
            heapq.heappush(self.finish_steps, finish_step)
        else:
            entries.append(entry)

    def take_finishes(self, step: int) -> list[Request]:
        """Members producing their last token at `step`, in running order."""
        entries = self.finish_events.pop(step, None)
        if not entries:
            return []
        epochs, members = self.epoch, self.members
        valid = [
            request
            for epoch, request in entries
            if request.request_id in members and epochs.get(request.request_id, 0) == epoch
        ]
        if len(valid) > 1:
            valid.sort(key=_running_seq)
        return valid

    def sync(self, request: Request, step: int) -> None:
        """Bring a member's counters to their exact values at the start of `step`.

        Its newly full blocks are registered in the prefix cache only when it leaves: until
        then nobody can look them up (they hold its own answer, which no other request
        contains yet) and, being held, they are not in the free queue.
        """
        delta = step - request.synced_step
        if delta <= 0:
            return
        request.num_computed_tokens += delta
        request.num_output_tokens += delta
        request.synced_step = step
        request.last_step = step - 1
        request.last_token_s = self.step_end_s[step - 1]

    def leave(self, request: Request, step: int) -> None:
        self.sync(request, step)
        if self.kv_cache.enable_prefix_caching and request.is_shareable:
            self.kv_cache.cache_full_blocks(request, request.num_computed_tokens)
        del self.members[request.request_id]
        self.ctx_offset -= request.num_computed_tokens + 1 - step
        self.epoch[request.request_id] = self.epoch.get(request.request_id, 0) + 1
        phase = (step - request.num_computed_tokens) % self.block_size
        position = bisect.bisect_left(self.phase_keys[phase], request.running_seq)
        del self.phase_keys[phase][position]
        del self.phase_groups[phase][position]

    def materialize_all(self, step: int) -> None:
        """Every member leaves: the reference scheduler takes over with exact counters."""
        for request in list(self.members.values()):
            self.leave(request, step)
        self.finish_events.clear()
        self.finish_steps.clear()


def _running_seq(request: Request) -> int:
    return request.running_seq
