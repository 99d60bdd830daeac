"""A measured run replayed: prompts rebuilt so the prefix cache sees what vLLM saw."""

from __future__ import annotations

from kvwise.bench.measured import FRESH_SEG_BASE, measured_run, timed, typical_gap
from kvwise.sim.runner import OUTPUT_SEG_BASE
from tests.bench.test_summary import record


def test_later_turns_extend_the_previous_prompt_and_answer() -> None:
    records = [
        record(
            0.0,
            0.1,
            [0.01] * 7,
            session=0,
            turn=0,
            prompt_tokens=130,
            new_segments=[(1, 100), (2, 20)],
        ),
        record(1.0, 0.1, [0.01] * 7, session=0, turn=1, prompt_tokens=180, new_segments=[(3, 30)]),
        record(
            0.5,
            0.1,
            [0.01] * 7,
            session=1,
            turn=0,
            prompt_tokens=131,
            new_segments=[(1, 100), (4, 20)],
        ),
    ]
    run = measured_run(records)
    prompts = [session.turns[0].new_segments for session in run.workload.sessions]
    # in sending order: s0t0, s1t0, s0t1; template tokens become a fresh segment each
    assert prompts[0] == ((1, 100), (2, 20), (FRESH_SEG_BASE + 0, 10))
    assert prompts[1] == ((1, 100), (4, 20), (FRESH_SEG_BASE + 1, 11))
    # the previous prompt, then the answer as the simulator names request 0's output, then new
    assert prompts[2] == (*prompts[0], (OUTPUT_SEG_BASE + 0, 8), (3, 30), (FRESH_SEG_BASE + 2, 12))
    assert run.workload.start_times_s == (0.0, 0.5, 1.0)
    assert [s.turns[0].output_len for s in run.workload.sessions] == [8, 8, 8]


def test_prompt_is_cut_to_the_measured_count() -> None:
    records = [record(0.0, 0.1, [0.01], prompt_tokens=50, new_segments=[(1, 40), (2, 40)])]
    assert measured_run(records).workload.sessions[0].turns[0].new_segments == ((1, 40), (2, 10))


def test_failed_requests_are_not_replayed() -> None:
    records = [
        record(0.0, 0.1, [0.01]),
        record(0.1, None, [], output_tokens=None, error="HTTP 400"),
    ]
    assert len(measured_run(records).records) == 1


def test_an_answer_streamed_in_one_burst_is_not_timed() -> None:
    steady = [record(float(i), 0.05, [0.008, 0.009, 0.008, 0.007]) for i in range(3)]
    burst = record(3.0, 0.2, [0.00004, 0.00003, 0.00005, 0.00004])
    records = [*steady, burst]
    assert typical_gap(records) == 0.008
    assert timed(records, typical_gap(records)) == [True, True, True, False]
    # even when every answer came in a burst: no engine step is 40 microseconds
    assert timed([burst, burst], typical_gap([burst, burst])) == [False, False]
