"""A bounded queue that is fair across flows (sessions or API keys), in KV tokens.

Start-time fair queuing (Goyal, Vin & Cheng, SIGCOMM 1996): each request gets a start tag
`S = max(v, F_flow)` and a finish tag `F = S + cost`, where `F_flow` is the finish tag of the
flow's previous request and `v` the start tag of the request served last. Requests are served in
start-tag order (ties by arrival). A flow that sends 16 requests at once gets tags 0, c, 2c, ...;
a flow arriving later starts at the current `v`, so it is interleaved with the heavy one instead
of waiting behind all 16. Cost is the request's KV tokens, so fairness is in KV, not in requests.

Pure data structure, no clocks and no I/O: `kvwise.gateway.admission` drives it.
"""

from __future__ import annotations

import heapq
import itertools
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

    def __len__(self) -> int:
        return self._num_live

    @property
    def queued_tokens(self) -> int:
        return self._live_tokens

    def push(self, flow: str, cost_tokens: int, item: T) -> _Entry[T]:
        """Enqueue; raises QueueFull past `max_queue`. Returns a handle for `cancel`."""
        if self._num_live >= self.max_queue:
            raise QueueFull
        start = max(self._virtual_time, self._finish_tags.get(flow, 0.0))
        self._finish_tags[flow] = start + cost_tokens
        entry = _Entry(start, next(self._seq), flow, cost_tokens, item)
        heapq.heappush(self._heap, entry)
        self._num_live += 1
        self._live_tokens += cost_tokens
        return entry

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
        if self._num_live == 0:
            # An idle system starts a new busy period: old finish tags no longer matter.
            self._finish_tags.clear()
