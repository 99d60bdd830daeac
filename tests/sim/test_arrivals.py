import math

from kvwise.sim.arrivals import ArrivalQueue
from kvwise.sim.request import Request


def _request(request_id: int, arrival_s: float) -> Request:
    return Request(request_id, [(1, 10)], 5, output_seg_id=1000 + request_id, arrival_s=arrival_s)


def test_requests_leave_by_arrival_time_then_id_whatever_the_submission_order() -> None:
    queue = ArrivalQueue()
    submitted = [(0, 1.0), (1, 2.0), (2, 2.0), (3, 0.5), (4, 3.0), (5, 2.0), (6, 1.5), (7, 3.0)]
    for request_id, arrival_s in submitted:
        queue.push(_request(request_id, arrival_s))
    assert queue.next_s == 0.5
    taken = []
    while queue:
        taken.append(queue.pop().request_id)
    assert taken == [3, 0, 6, 1, 2, 5, 4, 7]
    assert queue.next_s == math.inf


def test_next_arrival_time_follows_pushes_and_pops() -> None:
    queue = ArrivalQueue()
    queue.push(_request(0, 2.0))
    queue.push(_request(1, 4.0))
    queue.push(_request(2, 1.0))  # earlier than the last one queued
    assert queue.next_s == 1.0
    assert queue.pop().request_id == 2
    assert queue.next_s == 2.0
    assert queue.pop().request_id == 0
    assert queue.next_s == 4.0
