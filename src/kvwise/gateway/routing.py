"""Which replica serves a request: affinity by consistent hashing, bounded by load.

Session affinity (the session id) and prefix affinity (the system prompt, when there is no
session) both hash onto a ring of virtual nodes, so a key keeps its replica while replicas come
and go (only the keys of a vanished replica move), and vLLM's prefix cache on that replica keeps
hitting. Consistent hashing with bounded loads (Mirrokni, Thorup & Zadimoghaddam, 2018): walking
the ring from the key, take the first replica with room whose KV reservations after this request
stay within `(1 + epsilon)` times the mean, so a hot key cannot turn one replica into a hot spot.
If every replica with room is over that bound, the least loaded one with room serves.
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Sequence

from kvwise.gateway.replicas import Replica

VIRTUAL_NODES_PER_REPLICA = 64
LOAD_BOUND_EPSILON = 0.25
# ring orders remembered per key (each a few replicas; a key is at most a session id or 2 KiB
# of prompt prefix): a gateway sees the same few system prompts and sessions again and again
MAX_CACHED_ORDERS = 1024


def _hash(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


class Router:
    def __init__(self, replicas: Sequence[Replica]) -> None:
        self.rebuild(replicas)

    def rebuild(self, replicas: Sequence[Replica]) -> None:
        """The replicas known now (`kvwise.gateway.membership`); the ring holds those not being
        drained, so a drained replica's keys move to the next one on the ring, and only those."""
        self.replicas = list(replicas)
        members = [r for r in self.replicas if not r.is_draining]
        ring = [
            (_hash(f"{r.name}#{i}"), r) for r in members for i in range(VIRTUAL_NODES_PER_REPLICA)
        ]
        ring.sort(key=lambda point: point[0])
        self._points = [point for point, _ in ring]
        self._owners = [replica for _, replica in ring]
        self._num_members = len(members)
        self._orders: dict[str, tuple[Replica, ...]] = {}  # ring_order's, for this ring

    def ring_order(self, key: str) -> tuple[Replica, ...]:
        """Replicas in the order the ring visits them from `key`, each once."""
        order = self._orders.get(key)
        if order is None:
            if len(self._orders) >= MAX_CACHED_ORDERS:
                self._orders.clear()
            order = self._orders[key] = self._walk(key)
        return order

    def _walk(self, key: str) -> tuple[Replica, ...]:
        start = bisect.bisect(self._points, _hash(key))
        order: list[Replica] = []
        for i in range(len(self._owners)):
            replica = self._owners[(start + i) % len(self._owners)]
            if replica not in order:
                order.append(replica)
                if len(order) == self._num_members:
                    break
        return tuple(order)

    def pick(
        self,
        key: str,
        cost_tokens: int,
        exclude: Sequence[Replica] = (),
        num_seqs: int = 1,
        prompt_tokens: int | None = None,
        request_id: int | None = None,
    ) -> Replica | None:
        """The replica to reserve `cost_tokens` (`num_seqs` sequences) on, or None when none
        has room now. `prompt_tokens` and `request_id` are for routers that price the prompt
        (`cost_routing`); this one routes by `key` alone."""
        candidates = [
            r
            for r in self.ring_order(key)
            if r not in exclude and r.has_room(cost_tokens, num_seqs)
        ]
        if not candidates:
            return None
        healthy = [r for r in self.replicas if r.is_in_service]
        # mean reservation once this request lands somewhere; one request of slack plays the
        # part of the ceiling in the paper's integer bound, so two replicas do not ping-pong
        mean_tokens = (sum(r.reserved_tokens for r in healthy) + cost_tokens) / max(1, len(healthy))
        bound_tokens = (1 + LOAD_BOUND_EPSILON) * mean_tokens + cost_tokens
        for replica in candidates:
            if replica.reserved_tokens + cost_tokens <= bound_tokens:
                return replica
        return min(candidates, key=lambda r: r.reserved_tokens / max(1, r.budget_tokens))

    def first_token(self, request_id: int, ttft_s: float) -> None:
        """The request's first token arrived `ttft_s` after it was sent upstream."""

    def done(self, request_id: int) -> None:
        """The request ended, or moved to another replica, before its first token."""
