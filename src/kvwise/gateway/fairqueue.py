"""A bounded queue that is fair across API keys and, within a key, across its sessions, in KV
tokens served.

Virtual token counters (VTC: Sheng et al., "Fairness in Serving Large Language Models",
OSDI 2024, Algorithm 2). Each group (an API key) keeps a counter of the KV tokens it has been
served, divided by its weight; the next request served is from the queued group with the
smallest counter, ties to the oldest request. A group is charged its request's reserved tokens
when the request leaves the queue and corrected by `charge` once the reply shows what it
really held (prompt + generated tokens: the KV cache it occupied), so a key with long prompts
and one with short ones are served the same KV tokens, not the same number of requests.
A group that joins the queue with nothing running is lifted to the smallest counter of the
groups queued or running (with none, to the counter of the group served last): it gets no
credit for having been idle, so it cannot then monopolise the engine, and it waits behind
nobody's backlog either. (The paper's artifact lifts against queued clients only; a client
whose request is running is not idle here, so it keeps its lead between two requests.)

Within a group the same counters run across its flows (sessions, else end users), so one
session of a key cannot starve the key's others. Without API keys each flow is its own group.

Room in the queue is shared as well. A group may be capped at a number of queued requests
(its share of the queue, from the keys file). When the queue is full, a request from a group
with fewer requests queued than the longest group pushes out that group's newest request
(longest-queue drop, Suter et al., "Design considerations for supporting TCP with per-flow
queueing", INFOCOM 1998); failing that, one from a flow with fewer requests queued than the
longest flow of its own group does the same within the group. So a newcomer is queued while
someone else holds more than it does.

Pure data structure, no clocks and no I/O: `kvwise.gateway.admission` drives it.
"""

from __future__ import annotations

import itertools
from collections import deque
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")

MAX_IDLE_COUNTERS = 100_000  # counters of groups and flows with nothing queued, at most


@dataclass(eq=False)  # identity: removed from its deque by `is`, not by comparing fields
class _Entry(Generic[T]):
    seq: int  # arrival order
    group: str
    flow: str
    cost_tokens: int
    weight: float
    item: T
    is_removed: bool = False


class QueueFull(Exception):
    """The queue holds `max_queue` requests and nobody holds more than the newcomer's group."""


class QueueShareFull(QueueFull):
    """The request's group already has its share of the queue."""


@dataclass
class _Counters:
    """Virtual token counters for one level (groups, or the flows of one group)."""

    values: dict[str, float] = field(default_factory=dict)
    last_served: float = 0.0

    def lift(self, name: str, active: list[str]) -> None:
        floor = min(self.values[a] for a in active) if active else self.last_served
        self.values[name] = max(self.values.get(name, 0.0), floor)

    def forget_idle(self, active: set[str]) -> None:
        if len(self.values) > MAX_IDLE_COUNTERS:
            self.values = {k: v for k, v in self.values.items() if k in active}


@dataclass
class _Group(Generic[T]):
    name: str
    flows: dict[str, deque[_Entry[T]]] = field(default_factory=dict)  # oldest first, live only
    counters: _Counters = field(default_factory=_Counters)
    num_queued: int = 0


class FairQueue(Generic[T]):
    def __init__(self, max_queue: int) -> None:
        self.max_queue = max_queue
        self._groups: dict[str, _Group[T]] = {}  # groups with requests queued
        self._counters = _Counters()
        self._flow_counters: dict[str, _Counters] = {}  # per group, kept while the group is idle
        self._num_in_service: dict[str, int] = {}  # per group: served, not yet `finished`
        self._seq = itertools.count()
        self._num_live = 0
        self._live_tokens = 0

    def __len__(self) -> int:
        return self._num_live

    @property
    def queued_tokens(self) -> int:
        return self._live_tokens

    def queued_tokens_by_flow(self) -> dict[str, int]:
        return {
            flow: sum(e.cost_tokens for e in entries)
            for group in self._groups.values()
            for flow, entries in group.flows.items()
        }

    def counter(self, group: str) -> float:
        """KV tokens served to `group` so far, per unit of weight (after lifts)."""
        return self._counters.values.get(group, 0.0)

    def push(
        self,
        flow: str,
        cost_tokens: int,
        item: T,
        group: str | None = None,
        max_group_queued: int | None = None,
        weight: float = 1.0,
    ) -> tuple[_Entry[T], T | None]:
        """Enqueue: a handle for `cancel`, and the item pushed out to make room (None if none).
        Raises QueueShareFull when the group holds `max_group_queued` already, QueueFull when
        the queue is full and the group (and flow, within it) already has the most queued."""
        group = flow if group is None else group
        queued = self._groups.get(group)
        if max_group_queued is not None and queued and queued.num_queued >= max_group_queued:
            raise QueueShareFull
        pushed_out = self._make_room(group, flow) if self._num_live >= self.max_queue else None
        entry = _Entry(next(self._seq), group, flow, cost_tokens, weight, item)
        if group not in self._groups:
            self._lift(group)
            counters = self._flow_counters.setdefault(group, _Counters())
            self._groups[group] = _Group(group, counters=counters)
            self._forget_idle(self._groups[group])
        state = self._groups[group]
        if flow not in state.flows:
            state.counters.lift(flow, list(state.flows))
            state.flows[flow] = deque()
        state.flows[flow].append(entry)
        state.num_queued += 1
        self._num_live += 1
        self._live_tokens += cost_tokens
        return entry, pushed_out

    def _make_room(self, group: str, flow: str) -> T:
        def queued(name: str) -> int:
            return self._groups[name].num_queued if name in self._groups else 0

        longest = max(self._groups, key=queued)
        if queued(group) + 1 <= queued(longest) - 1:  # still not the longest after the swap
            victim_group = longest
        elif group in self._groups:
            victim_group = group  # within its own group: another flow's backlog
        else:
            raise QueueFull
        flows = self._groups[victim_group].flows
        longest_flow = max(flows, key=lambda f: len(flows[f]))
        own = len(flows[flow]) if victim_group == group and flow in flows else 0
        if victim_group == group and own + 1 > len(flows[longest_flow]) - 1:
            raise QueueFull  # pushing one out would leave this flow the longest
        newest = flows[longest_flow][-1]
        self._remove(newest)
        return newest.item

    def peek(self) -> _Entry[T] | None:
        """The request to serve next, without removing it: the oldest request of the flow with
        the smallest counter, within the group with the smallest counter (ties: oldest)."""
        if not self._groups:
            return None
        values = self._counters.values
        group = min(self._groups.values(), key=lambda g: (values[g.name], _oldest(g).seq))
        flows = group.counters.values
        flow = min(group.flows.values(), key=lambda q: (flows[q[0].flow], q[0].seq))
        return flow[0]

    def pop(self) -> _Entry[T]:
        """Serve the next request: its group and flow are charged its reserved tokens."""
        entry = self.peek()
        if entry is None:
            raise IndexError("pop from an empty FairQueue")
        self._remove(entry)
        self._served(entry.group, entry.flow, entry.cost_tokens, entry.weight)
        return entry

    def serve_now(
        self, flow: str, cost_tokens: int, group: str | None = None, weight: float = 1.0
    ) -> None:
        """A request admitted with nothing queued is served all the same: charged as if it had
        passed through the queue (lifted, then charged), so counters count all service."""
        group = flow if group is None else group
        if group not in self._groups:
            self._lift(group)
        counters = self._flow_counters.setdefault(group, _Counters())
        if group not in self._groups or flow not in self._groups[group].flows:
            counters.lift(flow, list(self._groups[group].flows) if group in self._groups else [])
        self._served(group, flow, cost_tokens, weight)

    def _lift(self, group: str) -> None:
        """A group with nothing queued joins: lifted to the least-served group queued or in
        service. One with a request still running is not idle and keeps its counter (a client
        sending its next request as the last one ends would otherwise lose its lead)."""
        if self._num_in_service.get(group):
            return
        active = set(self._groups) | set(self._num_in_service)
        self._counters.lift(group, [g for g in active if g in self._counters.values])

    def finished(self, group: str) -> None:
        """A request served (popped or `serve_now`) is done: its group may become idle."""
        left = self._num_in_service.get(group, 0) - 1
        if left > 0:
            self._num_in_service[group] = left
        else:
            self._num_in_service.pop(group, None)

    def _served(self, group: str, flow: str, cost_tokens: int, weight: float) -> None:
        self._num_in_service[group] = self._num_in_service.get(group, 0) + 1
        self.charge(group, flow, cost_tokens, weight)
        self._counters.last_served = self._counters.values[group]
        flow_counters = self._flow_counters[group]
        flow_counters.last_served = flow_counters.values[flow]

    def charge(self, group: str, flow: str, tokens: float, weight: float = 1.0) -> None:
        """Add `tokens` served (negative: a refund of reserved tokens the reply did not use)."""
        if group in self._counters.values:
            self._counters.values[group] += tokens / weight
        flow_counters = self._flow_counters.get(group)
        if flow_counters is not None and flow in flow_counters.values:
            flow_counters.values[flow] += tokens

    def cancel(self, entry: _Entry[T]) -> None:
        """Withdraw a queued request (timeout, client gone)."""
        if not entry.is_removed:  # else already served or cancelled
            self._remove(entry)

    def _remove(self, entry: _Entry[T]) -> None:
        entry.is_removed = True
        state = self._groups[entry.group]
        flow = state.flows[entry.flow]
        flow.remove(entry)  # O(flow length); usually the front or the back
        if not flow:
            del state.flows[entry.flow]
        state.num_queued -= 1
        if not state.num_queued:
            del self._groups[entry.group]
        self._num_live -= 1
        self._live_tokens -= entry.cost_tokens

    def _forget_idle(self, state: _Group[T]) -> None:
        """Bounded memory: past MAX_IDLE_COUNTERS, counters of those with nothing queued go
        (they would be lifted on their return anyway, losing at most their lead)."""
        self._counters.forget_idle(set(self._groups) | set(self._num_in_service))
        state.counters.forget_idle(set(state.flows))
        if len(self._flow_counters) > MAX_IDLE_COUNTERS:
            self._flow_counters = {
                g: c for g, c in self._flow_counters.items() if g in self._groups
            }


def _oldest(group: _Group[T]) -> _Entry[T]:
    return min((q[0] for q in group.flows.values()), key=lambda e: e.seq)
