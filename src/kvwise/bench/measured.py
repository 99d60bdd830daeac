"""A measured run, replayed: the requests bench sent, as a simulator workload at their own times.

Each successful request becomes a one-turn session sent at its measured time, with its measured
prompt and output lengths (the server's usage counts, chat template included), so the simulator
sees exactly the load the server saw. Prompts are rebuilt from segments so that the prefix
cache finds what vLLM's found:

* an opening turn: the turn's segments as sent (a shared system prompt keeps its id), then a
  fresh segment for the tokens the chat template added;
* a later turn of a session that keeps history: the previous turn's prompt, the previous
  answer (its measured length, named as the simulator names that request's output), then a
  fresh segment for the new messages and their template.

When the measured count is below what the segments say (an answer tokenised differently when
sent back), the prompt is cut to the measured count.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvwise.bench.records import RequestRecord
from kvwise.sim.request import Segment
from kvwise.sim.runner import OUTPUT_SEG_BASE
from kvwise.sim.workloads import Session, Turn, Workload

FRESH_SEG_BASE = 2**48  # template tokens and other text seen once (workload ids are small)


# No engine step is this short: chunks closer than this were read back to back from a buffer.
MIN_STEP_GAP_S = 2.5e-4
BURST_FRACTION = 0.2  # a request whose gaps are this far below the typical step was not timed


@dataclass(frozen=True)
class MeasuredRun:
    """The successful requests of one run, and the workload that replays them (same order)."""

    records: tuple[RequestRecord, ...]
    workload: Workload
    is_timed: tuple[bool, ...]  # per record: its tokens were seen as they came (see `timed`)
    typical_gap_s: float | None  # a typical step of the run, from its timed requests


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[int(q * (len(ordered) - 1))] if ordered else 0.0


def typical_gap(records: list[RequestRecord]) -> float | None:
    """The upper quartile of the requests' median gaps, bursts left out."""
    medians = [_quantile(r.itl_s, 0.5) for r in records if len(r.itl_s) >= 2]
    steps = [m for m in medians if m >= MIN_STEP_GAP_S]
    return _quantile(steps, 0.75) if steps else None


def timed(records: list[RequestRecord], typical_gap_s: float | None) -> list[bool]:
    """Which requests were timed token by token. On a busy machine the server's API process (or
    the client) may not get the CPU while the engine generates, and then streams a whole answer
    at once: its tokens seem to arrive microseconds apart and the first one late. Only the end
    of such a request is timed (its E2E); it still loaded the server (it stays in the replay)."""
    floor_s = max(MIN_STEP_GAP_S, BURST_FRACTION * (typical_gap_s or 0.0))
    return [len(r.itl_s) < 2 or _quantile(r.itl_s, 0.5) >= floor_s for r in records]


def cut_to(segments: list[Segment], num_tokens: int) -> list[Segment]:
    """The first `num_tokens` tokens of a segment list."""
    kept: list[Segment] = []
    left = num_tokens
    for seg_id, length in segments:
        if left <= 0:
            break
        kept.append((seg_id, min(length, left)))
        left -= length
    return kept


def _prompt(record: RequestRecord, base: list[Segment], index: int) -> list[Segment]:
    measured = record.input_tokens
    segments = base + [(seg_id, n) for seg_id, n in record.new_segments if n > 0]
    extra = measured - sum(n for _, n in segments)
    if extra > 0:
        return [*segments, (FRESH_SEG_BASE + index, extra)]
    return cut_to(segments, measured)


def measured_run(records: list[RequestRecord]) -> MeasuredRun:
    """Replay the successful requests of one run."""
    done = sorted((r for r in records if r.is_ok and r.output_tokens), key=lambda r: r.sent_s)
    # (session, turn) -> (its prompt, its answer's segment)
    sent: dict[tuple[int, int], tuple[list[Segment], Segment]] = {}
    sessions: list[Session] = []
    for index, record in enumerate(done):
        previous = sent.get((record.session, record.turn - 1))
        base = [*previous[0], previous[1]] if previous else []
        prompt = _prompt(record, base, index)
        output_len = record.output_tokens or 1
        # the simulator names request i's generated tokens OUTPUT_SEG_BASE + i (replayed
        # requests are numbered in sending order): the next turn's copy of the answer then hits
        # the blocks the answer filled, as the re-sent answer does in vLLM
        sent[(record.session, record.turn)] = (prompt, (OUTPUT_SEG_BASE + index, output_len))
        sessions.append(
            Session((Turn(tuple(prompt), output_len, output_len),), keeps_history=False)
        )
    start = done[0].sent_s if done else 0.0
    workload = Workload(
        "replay",
        tuple(sessions),
        tuple(r.sent_s - start for r in done),
        None,
        f"replay of {len(done)} measured requests",
    )
    typical_gap_s = typical_gap(done)
    return MeasuredRun(tuple(done), workload, tuple(timed(done, typical_gap_s)), typical_gap_s)
