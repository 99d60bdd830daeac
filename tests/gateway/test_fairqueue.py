from __future__ import annotations

import pytest

from kvwise.gateway.fairqueue import FairQueue, QueueFull, QueueShareFull


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


def test_a_newcomer_is_lifted_to_the_least_served_counter_no_credit_for_idling() -> None:
    queue: FairQueue[str] = FairQueue(max_queue=100)
    for i in range(3):
        queue.push("heavy", 10, f"h{i}")
    assert queue.pop().item == "h0"
    assert queue.pop().item == "h1"  # heavy has been served 20 tokens
    queue.push("late", 10, "late")  # counter 0 lifted to 20: ties with heavy, not 20 ahead
    queue.push("heavy", 10, "h3")
    assert queue.counter("late") == 20
    assert drain(queue) == ["h2", "late", "h3"]


def test_an_idle_groups_lead_is_not_kept_forever_but_its_debt_is() -> None:
    queue: FairQueue[str] = FairQueue(max_queue=100)
    queue.push("big", 1000, "big0")
    queue.pop()  # big: 1000 served; the queue is empty again
    queue.push("small", 100, "small0")  # lifted to the last served counter: 1000
    queue.push("big", 1000, "big1")
    assert [queue.counter("small"), queue.counter("big")] == [1000, 1000]
    assert drain(queue) == ["small0", "big1"]


def test_a_groups_sessions_share_its_share() -> None:
    """Key A's session s1 floods, its session s2 and key B send a little: B is served as
    often as all of A, and s2 goes before s1's backlog."""
    queue: FairQueue[str] = FairQueue(max_queue=100)
    for i in range(4):
        queue.push("s1", 10, f"a-s1-{i}", group="A")
    queue.push("s2", 10, "a-s2-0", group="A")
    queue.push("b", 10, "b0", group="B")
    queue.push("b", 10, "b1", group="B")
    assert drain(queue) == ["a-s1-0", "b0", "a-s2-0", "b1", "a-s1-1", "a-s1-2", "a-s1-3"]


def test_a_weight_two_group_is_served_twice_the_tokens() -> None:
    queue: FairQueue[str] = FairQueue(max_queue=100)
    for i in range(4):
        queue.push("gold", 10, f"g{i}", weight=2.0)
        queue.push("basic", 10, f"b{i}")
    # gold's counter grows by 5 per request, basic's by 10 (ties: the older request)
    assert drain(queue)[:6] == ["g0", "b0", "g1", "b1", "g2", "g3"]


def test_unused_reservation_is_refunded_so_short_replies_are_not_overcharged() -> None:
    queue: FairQueue[str] = FairQueue(max_queue=100)
    queue.push("a", 1000, "a0")  # reserved 1000 (prompt + max_tokens), held 200
    queue.push("b", 500, "b0")
    assert queue.pop().item == "a0"
    queue.charge("a", "a", -800)
    queue.push("a", 1000, "a1")
    assert queue.counter("a") == 200
    queue.push("b", 500, "b1")
    # b (0) goes first; then a at 200 before b at 500, where a charged 1000 would wait
    assert drain(queue) == ["b0", "a1", "b1"]


def test_a_key_over_its_queue_share_is_refused_others_are_not() -> None:
    queue: FairQueue[str] = FairQueue(max_queue=10)
    for i in range(2):
        queue.push(f"s{i}", 10, f"a{i}", group="A", max_group_queued=2)
    with pytest.raises(QueueShareFull):
        queue.push("s9", 10, "a2", group="A", max_group_queued=2)  # another session: same key
    queue.push("b", 10, "b0", group="B", max_group_queued=2)
    assert len(queue) == 3


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


def test_a_full_queue_makes_room_across_keys_first_then_across_a_keys_sessions() -> None:
    queue: FairQueue[str] = FairQueue(max_queue=4)
    for i in range(3):
        queue.push("a-agent", 10, f"a{i}", group="A")
    queue.push("b-1", 10, "b0", group="B")
    assert queue.push("c-1", 10, "c0", group="C")[1] == "a2"  # A holds most: its newest goes
    # A: 2 (one session), B: 1, C: 1. A second session of A takes from A's own agent
    assert queue.push("a-other", 10, "x0", group="A")[1] == "a1"
    with pytest.raises(QueueFull):  # B would hold 2 of 4 after taking one of A's 2
        queue.push("b-1", 10, "b1", group="B")


def test_a_key_with_a_request_running_is_not_idle_and_keeps_its_lead() -> None:
    queue: FairQueue[str] = FairQueue(max_queue=100)
    queue.push("heavy", 1000, "h0")
    queue.push("light", 10, "l0")
    assert [queue.pop().item, queue.pop().item] == ["h0", "l0"]  # heavy 1000, light 10
    queue.push("heavy", 1000, "h1")
    queue.push("light", 10, "l1")  # l0 still running: light keeps 10, not lifted to 1000
    assert queue.counter("light") == 10
    queue.finished("light")
    queue.finished("light")  # l1 never ran: the count stays at none, not below
    queue.push("light", 10, "l2")
    assert drain(queue) == ["l1", "l2", "h1"]
    queue.finished("light")
    queue.push("late", 10, "late")  # nothing of "late" running: lifted to the least served
    assert queue.counter("late") == queue.counter("light") == 30
