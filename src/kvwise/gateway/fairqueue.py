"""A bounded queue that is fair across flows (sessions or API keys), in KV tokens.

Start-time fair queuing (Goyal, Vin & Cheng, SIGCOMM 1996): each request gets a start tag
`S = max(v, F_flow)` and a finish tag `F = S + cost`, where `F_flow` is the finish tag of the
flow's previous request and `v` the start tag of the request served last. Requests are served in
start-tag order (ties by arrival). A flow that sends 16 requests at once gets tags 0, c, 2c, ...;
a flow arriving later starts at the current `v`, so it is interleaved with the heavy one instead
of waiting behind all 16. Cost is the request's KV tokens, so fairness is in KV, not in requests.

Room in the queue is shared too. When it is full, a request from a flow with fewer requests
queued than the longest flow pushes out that flow's newest request (longest-queue drop, Suter
et al., "Design considerations for supporting TCP with per-flow queueing", INFOCOM 1998): one
agent that queues `max_queue` requests cannot keep a newcomer out of the queue.

Pure data structure, no clocks and no I/O: `kvwise.gateway.admission` drives it.
"""

from __future__ import annotations

import heapq
import itertools
from collections import defaultdict, deque
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(order=True)
class _Entry(Generic[T]):
    start_tag: float
    seq: int
    flow: str = field(compare=False)
    cost_tokens: int = field(compare=False)
    item: T = field(compare=False)
    is_removed: bool = field(default=False, compare=False)


class QueueFull(Exception):
    """The queue holds `max_queue` requests already."""


class FairQueue(Generic[T]):
    def __init__(self, max_queue: int) -> None:
        self.max_queue = max_queue
        self._heap: list[_Entry[T]] = []
        self._finish_tags: dict[str, float] = {}
        self._virtual_time = 0.0
        self._seq = itertools.count()
        self._num_live = 0
        self._live_tokens = 0
        self._by_flow: defaultdict[str, deque[_Entry[T]]] = defaultdict(deque)  # oldest first
        self._num_by_flow: defaultdict[str, int] = defaultdict(int)  # live entries

    def __len__(self) -> int:
        return self._num_live

    @property
    def queued_tokens(self) -> int:
        return self._live_tokens

    def push(self, flow: str, cost_tokens: int, item: T) -> tuple[_Entry[T], T | None]:
        """Enqueue: a handle for `cancel`, and the item pushed out to make room (None if none).
        Raises QueueFull when the queue is full and this flow already has the most queued."""
        pushed_out = self._make_room(flow) if self._num_live >= self.max_queue else None
        start = max(self._virtual_time, self._finish_tags.get(flow, 0.0))
        self._finish_tags[flow] = start + cost_tokens
        entry = _Entry(start, next(self._seq), flow, cost_tokens, item)
        heapq.heappush(self._heap, entry)
        self._by_flow[flow].append(entry)
        self._num_by_flow[flow] += 1
        self._num_live += 1
        self._live_tokens += cost_tokens
        return entry, pushed_out

    def _make_room(self, flow: str) -> T:
        longest = max(self._num_by_flow, key=self._num_by_flow.__getitem__)
        if self._num_by_flow[flow] + 1 > self._num_by_flow[longest] - 1:
            raise QueueFull  # pushing one out of the longest would leave this flow the longest
        entries = self._by_flow[longest]
        while entries[-1].is_removed:
            entries.pop()
        newest = entries.pop()
        newest.is_removed = True  # lazily dropped from the heap
        self._forget(newest)
        return newest.item

    def peek(self) -> _Entry[T] | None:
        """The request to serve next (smallest start tag), without removing it."""
        while self._heap and self._heap[0].is_removed:
            heapq.heappop(self._heap)
        return self._heap[0] if self._heap else None

    def pop(self) -> _Entry[T]:
        entry = self.peek()
        if entry is None:
            raise IndexError("pop from an empty FairQueue")
        heapq.heappop(self._heap)
        self._virtual_time = entry.start_tag
        entry.is_removed = True
        self._forget(entry)
        return entry

    def cancel(self, entry: _Entry[T]) -> None:
        """Withdraw a queued request (timeout, client gone); lazily dropped from the heap."""
        if entry.is_removed:
            return  # already served or cancelled
        entry.is_removed = True
        self._forget(entry)

    def _forget(self, entry: _Entry[T]) -> None:
        self._num_live -= 1
        self._live_tokens -= entry.cost_tokens
        self._num_by_flow[entry.flow] -= 1
        if self._num_by_flow[entry.flow] == 0:
            del self._num_by_flow[entry.flow], self._by_flow[entry.flow]
        else:
            entries = self._by_flow[entry.flow]
            while entries and entries[0].is_removed:  # served from the front, usually
                entries.popleft()
        if self._num_live == 0:
            # An idle system starts a new busy period: old finish tags no longer matter.
            self._finish_tags.clear()
