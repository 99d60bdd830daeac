"""The requests on their way to the engine, taken in order of (arrival time, request id)."""

from __future__ import annotations

import heapq
import math
from collections import deque

from kvwise.sim.request import Request


class ArrivalQueue:
    """A queue that yields requests by (arrival_s, request_id), as one heap of them would.

    Requests submitted in that order (an open-loop workload sends them all at the start, sorted)
    wait in a plain FIFO, which costs no comparisons; the others in a heap. Taking the smaller of
    the two heads merges two sorted sequences, so the order is the heap's.
    """

    __slots__ = ("heap", "in_order", "next_s")

    def __init__(self) -> None:
        self.in_order: deque[Request] = deque()
        self.heap: list[tuple[float, int, Request]] = []
        self.next_s = math.inf  # arrival time of the next request (inf: none)

    def __len__(self) -> int:
        return len(self.in_order) + len(self.heap)

    def push(self, request: Request) -> None:
        in_order, arrival_s = self.in_order, request.arrival_s
        if not in_order or (arrival_s, request.request_id) > _key(in_order[-1]):
            in_order.append(request)
        else:
            heapq.heappush(self.heap, (arrival_s, request.request_id, request))
        if arrival_s < self.next_s:
            self.next_s = arrival_s

    def pop(self) -> Request:
        """The next request (the caller checks that there is one)."""
        in_order, heap = self.in_order, self.heap
        if heap and (not in_order or heap[0][:2] < _key(in_order[0])):
            request = heapq.heappop(heap)[2]
        else:
            request = in_order.popleft()
        if in_order:
            self.next_s = min(in_order[0].arrival_s, heap[0][0]) if heap else in_order[0].arrival_s
        else:
            self.next_s = heap[0][0] if heap else math.inf
        return request


def _key(request: Request) -> tuple[float, int]:
    return request.arrival_s, request.request_id
