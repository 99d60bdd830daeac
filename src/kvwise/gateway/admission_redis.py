"""One KV budget for several gateway instances: reservations held in Redis under leases.

`kvwise serve --admission-store redis://HOST:PORT/DB`. Every reservation (prompt + max_tokens,
and its sequences against the running cap) is made and released by a Lua script that checks the
replica's totals over all instances and changes them in one step (`admission_scripts`), so
gateways together never admit past one budget. Each instance renews its lease once a second;
an instance that stops renewing (`kill -9`, a lost machine) loses its reservations at the first
script run after `lease_ttl_s`, and the others admit into that room.

What stays local: the fair queue (each instance serves its own queue in order; fairness is per
instance, not across instances) and the replicas' health and /metrics load. The local `Replica`
counters mirror the shared totals (every script reply carries them), so routing and Retry-After
see the whole cluster's load. While requests wait, the queue head asks Redis again every
`POLL_S`: another instance's release is seen within that time.

Redis unreachable: the request is answered 503 (OpenAI's error shape) and queued requests with
it; nothing is admitted until Redis answers again. A reservation whose release could not be
sent is released again at each renewal until Redis has it. If Redis comes back without this
instance's lease (expired meanwhile, or Redis restarted empty), the instance registers again
with what it still runs. Not modelled: requests of an instance cut off from Redis for longer
than its lease keep running on the engines while the others admit into their room.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import socket
import uuid
from collections.abc import Sequence
from typing import Any

from kvwise.gateway import admission_scripts
from kvwise.gateway.admission import (
    Admission,
    AdmissionConfig,
    AdmissionStoreUnavailable,
    Lease,
    NoReplica,
    Ticket,
)
from kvwise.gateway.replicas import Replica
from kvwise.gateway.routing import Router

log = logging.getLogger("kvwise.gateway")

KEY_PREFIX = "kvwise:admission:"
RENEWALS_PER_LEASE = 3  # lease_ttl_s / this = the renewal interval
POLL_S = 0.05  # how often a waiting queue head asks for room another instance may have freed
REDIS_TIMEOUT_S = 1.0  # a Redis that has not answered in this long is taken for down
STORE_DOWN = "admission store unavailable; retry later"


class SharedAdmission(Admission):
    def __init__(self, router: Router, config: AdmissionConfig) -> None:
        import redis.asyncio as redis_asyncio
        from redis.exceptions import RedisError

        super().__init__(router, config)
        assert config.store is not None
        self.instance_id = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._redis: Any = redis_asyncio.from_url(
            config.store, socket_timeout=REDIS_TIMEOUT_S, socket_connect_timeout=REDIS_TIMEOUT_S
        )
        self._errors = (RedisError, OSError, asyncio.TimeoutError)
        self._reserve = self._redis.register_script(admission_scripts.RESERVE)
        self._release = self._redis.register_script(admission_scripts.RELEASE)
        self._renew = self._redis.register_script(admission_scripts.RENEW)
        self._register = self._redis.register_script(admission_scripts.REGISTER)
        self._ttl_ms = int(config.lease_ttl_s * 1000)
        self._held: dict[str, Lease] = {}  # reservations granted and not yet released
        self._pending: dict[str, tuple[Replica, int, int]] = {}  # reserve calls on their way
        self._to_release: dict[str, Replica] = {}  # releases Redis has not confirmed
        self._num_registrations = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._wake: asyncio.Event | None = None
        self.is_store_reachable = True

    async def start(self) -> None:
        self._wake = asyncio.Event()
        with contextlib.suppress(AdmissionStoreUnavailable):  # requests will say it: 503
            await self._call(self._register_again)
        for loop in (self._renew_loop(), self._dispatch_loop()):
            self._spawn(loop)

    async def close(self) -> None:
        """Our share returns now, not at lease expiry: registering with nothing held takes this
        instance off the totals, and its zero-length lease is dropped by the next script run."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        with contextlib.suppress(*self._errors):
            await self._register(keys=[], args=[KEY_PREFIX, self.instance_id, 0])
        await self._redis.aclose()

    async def acquire(self, ticket: Ticket, exclude: Sequence[Replica] = ()) -> Lease:
        if not any(r.is_in_service and r not in exclude for r in self.router.replicas):
            raise NoReplica
        if len(self.queue) == 0:
            lease = await self._reserve_somewhere(ticket, exclude)
            if lease is not None:
                self.queue.serve_now(ticket.flow, ticket.cost_tokens, ticket.group, ticket.weight)
                return lease
        return await self._wait_in_queue(ticket, exclude)

    def _on_queued(self) -> None:
        self.dispatch()

    def dispatch(self) -> None:
        if self._wake is not None:
            self._wake.set()

    def release(self, lease: Lease) -> None:
        self._held.pop(lease.key, None)
        self._to_release[lease.key] = lease.replica
        self._spawn(self._send_release(lease.key, lease.replica))

    async def _reserve_somewhere(self, ticket: Ticket, exclude: Sequence[Replica]) -> Lease | None:
        """A lease on the router's pick; a replica Redis refuses (its totals were stale here)
        is picked again from the fresh totals, up to once per replica."""
        for _ in self.router.replicas:
            replica = self._pick(ticket, exclude)
            if replica is None:
                return None
            lease = await self._call(functools.partial(self._reserve_on, replica, ticket))
            if lease is not None:
                return lease
        return None

    async def _reserve_on(self, replica: Replica, ticket: Ticket) -> Lease | None:
        key = uuid.uuid4().hex
        self._pending[key] = (replica, ticket.cost_tokens, ticket.num_seqs)
        registrations = self._num_registrations
        budget = replica.effective_budget_tokens()
        args: list[str | int] = [KEY_PREFIX, self.instance_id, self._ttl_ms, key, replica.url,
                ticket.cost_tokens, ticket.num_seqs, budget, replica.max_num_seqs or 0]  # fmt: skip
        try:
            status, *totals = await self._reserve(keys=[], args=args)
            if status == -1:  # our lease had run out: count what we run, then ask again
                del self._pending[key]  # (not this one: it was not granted)
                await self._register_again()
                self._pending[key] = (replica, ticket.cost_tokens, ticket.num_seqs)
                status, *totals = await self._reserve(keys=[], args=args)
        except BaseException as exc:  # sent or not, cancelled or failed: make sure it is not held
            self._to_release[key] = replica
            if isinstance(exc, asyncio.CancelledError):  # the client left; Redis is up: now
                self._spawn(self._send_release(key, replica))
            raise
        finally:
            self._pending.pop(key, None)
        self._mirror(replica, totals)
        if status != 1:
            if registrations != self._num_registrations:  # a registration may have added it
                self._to_release[key] = replica
            return None
        lease = Lease(replica, ticket.cost_tokens, self, ticket.num_seqs, key=key)
        self._held[key] = lease
        self.num_admitted += 1
        self.admitted_flows.append(ticket.flow)
        return lease

    async def _call(self, make: Any) -> Any:
        """Run a store call; Redis down is `AdmissionStoreUnavailable`, logged once per outage."""
        try:
            result = await make()
        except self._errors as exc:
            if self.is_store_reachable:
                log.warning("admission store not answering: %s", exc)
            self.is_store_reachable = False
            raise AdmissionStoreUnavailable(STORE_DOWN) from None
        if not self.is_store_reachable:
            log.warning("admission store answering again")
            self.is_store_reachable = True
        return result

    async def _register_again(self) -> None:
        args: list[Any] = [KEY_PREFIX, self.instance_id, self._ttl_ms]
        entries = [(k, lease.replica, lease.cost_tokens, lease.num_seqs)
                   for k, lease in self._held.items()]  # fmt: skip
        entries += [(k, *held) for k, held in self._pending.items()]
        for key, replica, cost_tokens, num_seqs in entries:
            args += [key, replica.url, cost_tokens, num_seqs]
        self._num_registrations += 1
        await self._register(keys=[], args=args)
        self._to_release.clear()  # registering replaced whatever Redis held for us

    async def _send_release(self, key: str, replica: Replica) -> None:
        args = [KEY_PREFIX, self.instance_id, key]
        with contextlib.suppress(AdmissionStoreUnavailable):  # sent again at the next renewal
            status, *totals = await self._call(lambda: self._release(keys=[], args=args))
            self._to_release.pop(key, None)
            if status == 1:
                self._mirror(replica, totals)
            self.dispatch()

    def _mirror(self, replica: Replica, totals: Sequence[int]) -> None:
        """The replica's counters become the totals over every instance."""
        if len(totals) < 3:
            return
        replica.reserved_tokens, replica.num_in_flight, replica.num_seqs = map(int, totals[:3])
        replica.peak_reserved_tokens = max(replica.peak_reserved_tokens, replica.reserved_tokens)
        replica.peak_in_flight = max(replica.peak_in_flight, replica.num_in_flight)

    async def _renew_once(self) -> None:
        replicas = list(self.router.replicas)  # as they were asked for: joins may come meanwhile
        urls = [r.url for r in replicas]
        args: list[str | int] = [KEY_PREFIX, self.instance_id, self._ttl_ms, *urls]
        status, *totals = await self._call(lambda: self._renew(keys=[], args=args))
        if status == -1:
            log.warning("admission lease had expired: registering again what runs here")
            await self._call(self._register_again)
            return
        for i, replica in enumerate(replicas):
            self._mirror(replica, totals[3 * i : 3 * i + 3])
        for key, replica in list(self._to_release.items()):
            await self._send_release(key, replica)

    async def _renew_loop(self) -> None:
        while True:
            with contextlib.suppress(AdmissionStoreUnavailable):
                await self._renew_once()
            self.dispatch()  # room freed elsewhere, or Redis gone: the queue hears of it
            await asyncio.sleep(self.config.lease_ttl_s / RENEWALS_PER_LEASE)

    async def _dispatch_loop(self) -> None:
        assert self._wake is not None
        while True:
            timeout_s = POLL_S if len(self.queue) else None
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout_s)
            self._wake.clear()
            try:
                if not self.is_store_reachable and len(self.queue):  # a call failed: ask again
                    await self._renew_once()  # (Redis still down: the queue gets 503s)
                await self._dispatch_queue()
            except AdmissionStoreUnavailable as exc:
                self._fail_queued(exc)
            except Exception:  # the loop must outlive one bad turn
                log.exception("admission dispatch failed")

    async def _dispatch_queue(self) -> None:
        """Grant leases to queued requests, head first, while the head finds room. The totals
        seen here are refreshed once per turn before giving up: room another instance freed (or
        a dead one's, once its lease is out) shows within one poll."""
        is_fresh = False
        while (entry := self.queue.peek()) is not None:
            waiter = entry.item
            lease = await self._reserve_somewhere(waiter.ticket, waiter.exclude)
            if lease is None:
                if is_fresh:
                    return
                await self._renew_once()
                is_fresh = True
                continue
            if entry.is_removed or waiter.future.done():  # gone while Redis answered
                lease.release()
                continue
            if self.queue.peek() is entry:
                self.queue.pop()
            else:  # a request that goes before it arrived meanwhile: it goes next
                self.queue.cancel(entry)
                self.queue.serve_now(entry.flow, entry.cost_tokens, entry.group, entry.weight)
            waiter.future.set_result(lease)

    def _fail_queued(self, exc: Exception) -> None:
        while (entry := self.queue.peek()) is not None:
            self.queue.cancel(entry)
            if not entry.item.future.done():
                entry.item.future.set_exception(exc)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
