from __future__ import annotations

import pytest

from kvwise.gateway.fairqueue import FairQueue, QueueFull


def drain(queue: FairQueue[str]) -> list[str]:
    return [queue.pop().item for _ in range(len(queue))]


def test_a_flow_arriving_late_is_interleaved_with_a_backlogged_one() -> None:
    queue: FairQueue[str] = FairQueue(max_queue=100)
    for i in range(4):
        queue.push("heavy", 100, f"h{i}")
    for flow in ("a", "b"):
        queue.push(flow, 100, flow)
    # start tags: h0..h3 = 0, 100, 200, 300; a = b = 0 (virtual time is still 0)
    assert drain(queue) == ["h0", "a", "b", "h1", "h2", "h3"]


def test_fairness_is_in_kv_tokens_not_requests() -> None:
    queue: FairQueue[str] = FairQueue(max_queue=100)
    for i in range(3):
        queue.push("big", 1000, f"big{i}")
    for i in range(6):
        queue.push("small", 250, f"small{i}")
    # big: 0, 1000, 2000; small: 0, 250, 500, 750, 1000, 1250
    assert drain(queue) == [
        "big0",
        "small0",
        "small1",
        "small2",
        "small3",
        "big1",
        "small4",
        "small5",
        "big2",
    ]


def test_newcomers_start_at_the_virtual_time_of_the_request_in_service() -> None:
    queue: FairQueue[str] = FairQueue(max_queue=100)
    for i in range(3):
        queue.push("heavy", 10, f"h{i}")
    assert queue.pop().item == "h0"
    assert queue.pop().item == "h1"  # virtual time is now 10
    queue.push("late", 10, "late")  # starts at 10, not 0: no credit for having been idle
    queue.push("heavy", 10, "h3")  # heavy's next start is 30
    assert drain(queue) == ["late", "h2", "h3"]


def test_bounded_and_cancellable() -> None:
    queue: FairQueue[str] = FairQueue(max_queue=2)
    first, _ = queue.push("a", 5, "a1")
    queue.push("b", 7, "b1")
    with pytest.raises(QueueFull):
        queue.push("c", 1, "c1")
    queue.cancel(first)
    queue.cancel(first)  # twice is harmless
    assert (len(queue), queue.queued_tokens) == (1, 7)
    queue.push("c", 1, "c1")
    assert drain(queue) == ["b1", "c1"]
    with pytest.raises(IndexError):
        queue.pop()


def test_a_full_queue_makes_room_for_a_newcomer_by_refusing_the_longest_flows_newest() -> None:
    queue: FairQueue[str] = FairQueue(max_queue=4)
    for i in range(4):
        assert queue.push("agent", 10, f"a{i}")[1] is None
    assert queue.push("newcomer", 10, "n0")[1] == "a3"  # the agent's newest is refused
    assert queue.push("other", 10, "o0")[1] == "a2"
    with pytest.raises(QueueFull):  # 2, 1, 1: pushing out one more would not be fairer
        queue.push("newcomer", 10, "n1")
    with pytest.raises(QueueFull):
        queue.push("agent", 10, "a4")  # the longest flow never pushes out others
    assert [queue.pop().item for _ in range(len(queue))] == ["a0", "n0", "o0", "a1"]
