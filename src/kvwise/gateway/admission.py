"""Admission in KV tokens: reserve on a replica now, or wait in the fair queue, or be refused.

`Admission.acquire` returns a `Lease` (the replica and the tokens reserved on it) as soon as a
replica has room and nobody queued is ahead; otherwise the request waits in `FairQueue` (fair
across flows) until a release makes room, up to `queue_timeout_s`. A full queue or a timeout
raises `Overloaded` (the HTTP layer answers 429 with Retry-After). Service is strictly in
queue order: the head waits for room even if a smaller request behind it would fit, so large
requests are never starved by a stream of small ones. A full queue makes room for a flow with
fewer requests queued than the longest one by refusing that one's newest (see `fairqueue`).

Everything here runs on the event loop; no locks are needed. This is the admission of one
gateway process; with `--admission-store redis://...` several gateways share one budget through
`kvwise.gateway.admission_redis` (`open_admission` picks).
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from kvwise.gateway.fairqueue import FairQueue, QueueFull, QueueShareFull
from kvwise.gateway.replicas import Replica
from kvwise.gateway.routing import Router

MIN_RETRY_AFTER_S = 1
MAX_RETRY_AFTER_S = 60


@dataclass(frozen=True)
class AdmissionConfig:
    max_queue: int
    queue_timeout_s: float
    store: str | None = None  # redis:// URL of a budget shared with other gateways; None: local
    # how long a crashed gateway's reservations outlive it in the shared store: three renewals
    # missed at one per second, as three probes missed make a replica down (health_failures)
    lease_ttl_s: float = 3.0


class NoReplica(Exception):
    """No healthy replica is left to try for this request."""


class AdmissionStoreUnavailable(NoReplica):
    """The shared budget cannot be read: nothing is admitted against an unknown budget (503)."""


class Overloaded(Exception):
    def __init__(self, reason: str, retry_after_s: int) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after_s = retry_after_s


class QueueShareExceeded(Overloaded):
    """The request's API key already has its share of the queue (keys file `queue_share`)."""


@dataclass(frozen=True)
class Ticket:
    """What admission needs to know about a request."""

    flow: str  # fairness key: session id, else API key, else client address
    affinity_key: str  # session id or system-prompt prefix, for the router
    cost_tokens: int  # prompt (upper bound) + max_tokens, per sequence, summed
    num_seqs: int = 1  # sequences vLLM runs for it: n choices x prompts
    group: str | None = None  # the fair queue's group: the API key (None: the flow itself)
    queue_share: float | None = None  # at most this share of the queue for the group
    weight: float = 1.0  # the group's share of KV tokens served, relative to others
    prompt_tokens: int = 0  # of cost_tokens, the prompts' (upper bound, all sequences)
    # what the engine prefills: each prompt once, whatever n (upper bound; None: not counted)
    prefill_tokens: int | None = None


@dataclass
class Lease:
    replica: Replica
    cost_tokens: int
    admission: Admission
    num_seqs: int = 1
    is_released: bool = False
    key: str = ""  # the reservation's id in a shared store

    def release(self) -> None:
        if not self.is_released:
            self.is_released = True
            self.admission.release(self)


@dataclass
class _Waiter:
    ticket: Ticket
    exclude: Sequence[Replica]
    future: asyncio.Future[Lease] = field(repr=False)


class Admission:
    def __init__(self, router: Router, config: AdmissionConfig) -> None:
        self.router = router
        self.config = config
        self.queue: FairQueue[_Waiter] = FairQueue(config.max_queue)
        self.num_admitted = 0
        self.num_queued = 0
        self.num_rejected = 0
        self.admitted_flows: deque[str] = deque(maxlen=10_000)  # admission order, for inspection
        self._recent_service_s: deque[float] = deque(maxlen=64)

    async def acquire(self, ticket: Ticket, exclude: Sequence[Replica] = ()) -> Lease:
        if not any(r.is_in_service and r not in exclude for r in self.router.replicas):
            raise NoReplica
        if len(self.queue) == 0:
            lease = self._try_reserve(ticket, exclude)
            if lease is not None:
                self.queue.serve_now(ticket.flow, ticket.cost_tokens, ticket.group, ticket.weight)
                return lease
        return await self._wait_in_queue(ticket, exclude)

    async def _wait_in_queue(self, ticket: Ticket, exclude: Sequence[Replica]) -> Lease:
        loop = asyncio.get_running_loop()
        waiter = _Waiter(ticket, exclude, loop.create_future())
        try:
            entry, pushed_out = self.queue.push(
                ticket.flow, ticket.cost_tokens, waiter, ticket.group,
                self._max_group_queued(ticket), ticket.weight,
            )  # fmt: skip
        except QueueShareFull:
            self.num_rejected += 1
            reason = "queue full for this API key: it has its share of the queue waiting"
            raise QueueShareExceeded(reason, self.retry_after_s()) from None
        except QueueFull:
            self.num_rejected += 1
            raise Overloaded("queue full", self.retry_after_s()) from None
        if pushed_out is not None:  # the longest flow's newest request made room for this one
            self.num_rejected += 1
            reason = "queue full; this client has more than its share queued"
            pushed_out.future.set_exception(Overloaded(reason, self.retry_after_s()))
        self.num_queued += 1
        self._on_queued()
        try:
            return await asyncio.wait_for(
                asyncio.shield(waiter.future), self.config.queue_timeout_s
            )
        except (asyncio.TimeoutError, asyncio.CancelledError) as exc:
            self.queue.cancel(entry)
            if waiter.future.done() and not waiter.future.cancelled():
                waiter.future.result().release()  # granted just as we gave up: hand it back
                self.refund(ticket)
            if isinstance(exc, asyncio.CancelledError):
                raise
            self.num_rejected += 1
            raise Overloaded("queue timeout", self.retry_after_s()) from None

    def _max_group_queued(self, ticket: Ticket) -> int | None:
        if ticket.queue_share is None:
            return None
        return max(1, math.floor(ticket.queue_share * self.config.max_queue))

    def refund(self, ticket: Ticket) -> None:
        """A grant not used (failover admits it again elsewhere; a waiter gone as it was
        granted): charged once per request, not per grant."""
        self.finish(ticket, 0)

    def finish(self, ticket: Ticket, served_tokens: int | None) -> None:
        """The request is done, having held `served_tokens` of KV (prompt + generated; None:
        not known, the reservation stays charged): the fair queue charged the reservation when
        the request left it, and is corrected now."""
        group = ticket.group or ticket.flow
        refund = ticket.cost_tokens - served_tokens if served_tokens is not None else 0
        if refund > 0:
            self.queue.charge(group, ticket.flow, -refund, ticket.weight)
        self.queue.finished(group)

    def _on_queued(self) -> None:
        """A request joined the queue (a shared store polls for room from here on)."""

    def _pick(self, ticket: Ticket, exclude: Sequence[Replica]) -> Replica | None:
        """The router's replica for this ticket, or None when none has room now."""
        return self.router.pick(
            ticket.affinity_key, ticket.cost_tokens, exclude, ticket.num_seqs,
            prompt_tokens=ticket.prefill_tokens, request_id=id(ticket),
        )  # fmt: skip

    def _try_reserve(self, ticket: Ticket, exclude: Sequence[Replica]) -> Lease | None:
        replica = self._pick(ticket, exclude)
        if replica is None:
            return None
        replica.reserve(ticket.cost_tokens, ticket.num_seqs)
        self.num_admitted += 1
        self.admitted_flows.append(ticket.flow)
        return Lease(replica, ticket.cost_tokens, self, ticket.num_seqs)

    def release(self, lease: Lease) -> None:
        lease.replica.release(lease.cost_tokens, lease.num_seqs)
        self.dispatch()

    def dispatch(self) -> None:
        """Grant leases to queued requests, head first, while the head finds room."""
        while (entry := self.queue.peek()) is not None:
            waiter = entry.item
            lease = self._try_reserve(waiter.ticket, waiter.exclude)
            if lease is None:
                return
            self.queue.pop()
            waiter.future.set_result(lease)

    async def start(self) -> None:
        """Inside the serving event loop, before the first request."""

    async def close(self) -> None:
        """At shutdown."""

    def record_service_time(self, seconds: float) -> None:
        self._recent_service_s.append(seconds)

    def retry_after_s(self) -> int:
        """When to come back: the queue drained at the recent pace of completions."""
        slots = max(1, sum(r.num_in_flight for r in self.router.replicas))
        mean_service_s = (
            sum(self._recent_service_s) / len(self._recent_service_s)
            if self._recent_service_s
            else 1.0
        )
        estimate = mean_service_s * (len(self.queue) + 1) / slots
        return int(min(MAX_RETRY_AFTER_S, max(MIN_RETRY_AFTER_S, math.ceil(estimate))))

    @property
    def reserved_tokens(self) -> int:
        return sum(r.reserved_tokens for r in self.router.replicas)


def open_admission(router: Router, config: AdmissionConfig) -> Admission:
    """In-process admission, or one shared with other gateways through `config.store`."""
    if config.store is None:
        return Admission(router, config)
    from kvwise.gateway.admission_redis import SharedAdmission

    return SharedAdmission(router, config)
