"""Decoding requests kept implicit, so that a step costs O(events), not O(batch).

A request that is decoding gains exactly one token per step as long as every running request
gets its token (the step's budget covers them and no partial prefill precedes them). Its
counters are then a function of the step index, so they are stored once (`synced_step`) and
brought up to date only when something happens to it:

* it needs a new KV block (every `block_size` tokens): a *block event* at that step;
* it produces its last token: a *finish event*;
* it is preempted, or the engine falls back to the reference scheduler: `sync`.

Events live in a calendar keyed by step index. An entry is valid while the request's `epoch`
is the one it was filed under (leaving the cohort bumps the epoch), so nothing is ever removed
from the calendar eagerly.
"""

from __future__ import annotations

import heapq
from array import array

from kvwise.sim.kv_cache_manager import KVCacheManager
from kvwise.sim.request import Request


class DecodeCohort:
    __slots__ = (
        "block_events",
        "block_size",
        "ctx_offset",
        "epoch",
        "event_steps",
        "finish_events",
        "kv_cache",
        "members",
        "step_end_s",
    )

    def __init__(self, kv_cache: KVCacheManager, step_end_s: array) -> None:
        self.kv_cache = kv_cache
        self.block_size = kv_cache.block_size
        self.step_end_s = step_end_s  # end time of every step so far (shared with the engine)
        self.members: dict[int, Request] = {}
        self.epoch: dict[int, int] = {}  # request_id -> epoch of its calendar entries
        self.block_events: dict[int, list[tuple[int, Request]]] = {}
        self.finish_events: dict[int, list[tuple[int, Request]]] = {}
        self.event_steps: list[int] = []  # min-heap of steps that have calendar entries
        # sum over members of (num_computed_tokens + 1 - synced_step): the decode context of
        # step s is ctx_offset + len(members) * s
        self.ctx_offset = 0

    def __len__(self) -> int:
        return len(self.members)

    def decode_context(self, step: int) -> int:
        return self.ctx_offset + len(self.members) * step

    def next_event_step(self) -> int | None:
        steps = self.event_steps
        while steps and steps[0] not in self.block_events and steps[0] not in self.finish_events:
            heapq.heappop(steps)
        return steps[0] if steps else None

    def join(self, request: Request, step: int) -> None:
        """A request whose counters are exact at `step` (before it is scheduled) starts decoding."""
        request.synced_step = step
        self.members[request.request_id] = request
        self.ctx_offset += request.num_computed_tokens + 1 - step
        epoch = self.epoch.get(request.request_id, 0)
        finish_step = step + request.output_len - request.num_output_tokens - 1
        self._file(self.finish_events, finish_step, epoch, request)
        self._file_block_event(request, step, epoch)

    def _file_block_event(self, request: Request, step: int, epoch: int) -> None:
        # it needs a new block at the first step where its computed tokens fill whole blocks
        block_step = step + (-request.num_computed_tokens) % self.block_size
        finish_step = step + request.output_len - request.num_output_tokens - 1
        if block_step <= finish_step:
            self._file(self.block_events, block_step, epoch, request)

    def _file(self, calendar: dict[int, list[tuple[int, Request]]], step: int, epoch: int, request: Request) -> None:
        entries = calendar.get(step)
        if entries is None:
            calendar[step] = [(epoch, request)]
            heapq.heappush(self.event_steps, step)
        else:
            entries.append((epoch, request))

    def refile_block_event(self, request: Request, step: int) -> None:
        """After its block event at `step` (synced there), file the next one a block later."""
        block_step = step + self.block_size
        finish_step = step + request.output_len - request.num_output_tokens - 1
        if block_step <= finish_step:
            epoch = self.epoch.get(request.request_id, 0)
            self._file(self.block_events, block_step, epoch, request)

    def take_events(self, calendar: dict[int, list[tuple[int, Request]]], step: int) -> list[Request]:
        """Valid entries for `step`, in running order."""
        entries = calendar.pop(step, None)
        if not entries:
            return []
        epochs, members = self.epoch, self.members
        valid = [
            request
            for epoch, request in entries
            if request.request_id in members and epochs.get(request.request_id, 0) == epoch
        ]
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
        if self.kv_cache.enable_prefix_caching:
            self.kv_cache.cache_full_blocks(request, request.num_computed_tokens)
        del self.members[request.request_id]
        self.ctx_offset -= request.num_computed_tokens + 1 - step
        self.epoch[request.request_id] = self.epoch.get(request.request_id, 0) + 1

    def materialize_all(self, step: int) -> None:
        """Every member leaves: the reference scheduler takes over with exact counters."""
        for request in list(self.members.values()):
            self.leave(request, step)
        self.block_events.clear()
        self.finish_events.clear()
        self.event_steps.clear()


def _running_seq(request: Request) -> int:
    return request.running_seq
