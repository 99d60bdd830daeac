from __future__ import annotations

import asyncio

import pytest

from kvwise.gateway.admission import (
    Admission,
    AdmissionConfig,
    Lease,
    NoReplica,
    Overloaded,
    Ticket,
)
from kvwise.gateway.replicas import Replica
from kvwise.gateway.routing import Router

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def admission(budget: int = 300, max_queue: int = 10, timeout_s: float = 5.0) -> Admission:
    return Admission(
        Router([Replica("r0", "http://r0", budget)]), AdmissionConfig(max_queue, timeout_s)
    )


def ticket(flow: str, cost: int = 100) -> Ticket:
    return Ticket(flow=flow, affinity_key=flow, cost_tokens=cost)


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_admits_while_the_budget_has_room_then_queues() -> None:
    adm = admission(budget=300)
    leases = [await adm.acquire(ticket("a")) for _ in range(3)]
    waiting = asyncio.create_task(adm.acquire(ticket("b")))
    await settle()
    assert not waiting.done() and len(adm.queue) == 1
    leases[0].release()
    lease = await waiting
    assert lease.replica.reserved_tokens == 300
    assert (adm.num_admitted, adm.num_queued) == (4, 1)


async def test_the_head_of_the_queue_is_never_overtaken_by_a_smaller_request() -> None:
    adm = admission(budget=300)
    held = await adm.acquire(ticket("a", 250))
    big = asyncio.create_task(adm.acquire(ticket("b", 200)))
    await settle()
    small = asyncio.create_task(adm.acquire(ticket("c", 50)))  # would fit now, but b is first
    await settle()
    assert not big.done() and not small.done()
    held.release()
    await settle()
    assert big.done() and small.done()
    assert list(adm.admitted_flows) == ["a", "b", "c"]


async def test_queue_full_and_queue_timeout_are_overloaded_with_a_retry_hint() -> None:
    adm = admission(budget=100, max_queue=1, timeout_s=0.05)
    held = await adm.acquire(ticket("a"))
    queued = asyncio.create_task(adm.acquire(ticket("b")))
    await settle()
    with pytest.raises(Overloaded) as full:
        await adm.acquire(ticket("c"))
    assert full.value.reason == "queue full" and full.value.retry_after_s >= 1
    with pytest.raises(Overloaded) as late:
        await queued
    assert late.value.reason == "queue timeout"
    assert len(adm.queue) == 0 and adm.num_rejected == 2
    assert held.replica.reserved_tokens == 100  # only the lease still held


async def test_a_cancelled_waiter_leaves_nothing_reserved() -> None:
    adm = admission(budget=100)
    held = await adm.acquire(ticket("a"))
    waiter = asyncio.create_task(adm.acquire(ticket("b")))
    await settle()
    waiter.cancel()
    await settle()
    held.release()
    assert held.replica.reserved_tokens == 0 and len(adm.queue) == 0


async def test_a_request_larger_than_the_budget_runs_alone() -> None:
    adm = admission(budget=100)
    lease = await adm.acquire(ticket("a", 500))
    assert isinstance(lease, Lease) and lease.replica.reserved_tokens == 500
    second = asyncio.create_task(adm.acquire(ticket("b", 10)))
    await settle()
    assert not second.done()
    lease.release()
    lease.release()  # idempotent
    assert (await second).replica.reserved_tokens == 10


async def test_no_replica_left_to_try_fails_at_once() -> None:
    adm = admission()
    replica = adm.router.replicas[0]
    with pytest.raises(NoReplica):
        await adm.acquire(ticket("a"), exclude=[replica])
    replica.is_healthy = False
    with pytest.raises(NoReplica):
        await adm.acquire(ticket("a"))
