"""Drive a real server with a simulator workload: the same sessions, turns and timing.

The clients behave as the simulator's (`kvwise.sim.runner`): sessions start at their start
times (open loop) or as soon as one of `max_concurrency` slots is free (closed loop); a session
sends its turns one after the other, each after the previous answer and the turn's think time.
A session that keeps history sends the whole conversation every turn: the system prompt, every
earlier user turn and every real answer the server gave, then the new segments, so that the
server's prefix cache sees what a real agent loop gives it. A failed turn ends its session (as
a rejected request does in the simulator); the run goes on. Each session sends its own
`X-Session-Id` (new for every run), so a gateway in front of the engines sees the sessions as
agents' sessions: session affinity, fairness per session and session features are exercised.
"""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import httpx

from kvwise.bench.client import Outcome, chat_body, stream_chat
from kvwise.bench.prompts import LocalTokenizer, SegmentTexts
from kvwise.bench.records import RequestRecord
from kvwise.sim.workloads import Session, Turn, Workload


@dataclass(frozen=True)
class Target:
    """The endpoint under test."""

    base_url: str  # without /v1
    model: str  # served model name
    api_key: str | None = None
    ignore_eos: bool = True  # generate exactly the workload's output lengths
    timeout_s: float = 600.0

    @property
    def chat_url(self) -> str:
        return f"{self.base_url}/v1/chat/completions"

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}


def turn_messages(turn: Turn, is_first: bool, texts: SegmentTexts) -> list[dict[str, str]]:
    """A turn's new messages: the first segment of a session's opening turn, when more follow,
    is its system prompt; the other new segments make one user message."""
    segments = list(turn.new_segments)
    messages = []
    if is_first and len(segments) > 1:
        seg_id, num_tokens = segments.pop(0)
        messages.append({"role": "system", "content": texts.text(seg_id, num_tokens)})
    user = "".join(texts.text(seg_id, num_tokens) for seg_id, num_tokens in segments)
    messages.append({"role": "user", "content": user})
    return messages


def _planned_tokens(segments: tuple[tuple[int, int], ...], texts: SegmentTexts) -> int:
    return sum(texts.num_tokens(seg_id, n) for seg_id, n in segments)


class _Run:
    def __init__(
        self,
        target: Target,
        workload: Workload,
        texts: SegmentTexts,
        on_record: Callable[[RequestRecord], None],
    ) -> None:
        self.target, self.workload, self.texts = target, workload, texts
        self.on_record = on_record
        self.records: list[RequestRecord] = []
        self.clock_start = 0.0
        self.run_token = uuid.uuid4().hex[:12]  # session ids of one run never meet another's
        limit = workload.max_concurrency
        self.slots = asyncio.Semaphore(limit) if limit else None

    async def run(self) -> list[RequestRecord]:
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
        timeout = httpx.Timeout(self.target.timeout_s, connect=10.0)
        async with httpx.AsyncClient(
            limits=limits, timeout=timeout, headers=self.target.headers()
        ) as client:
            self.clock_start = time.perf_counter()
            starts = self.workload.start_times_s or (0.0,) * len(self.workload.sessions)
            await asyncio.gather(
                *(
                    self._start_session(client, index, session, start_s)
                    for index, (session, start_s) in enumerate(
                        zip(self.workload.sessions, starts, strict=True)
                    )
                )
            )
        return sorted(self.records, key=lambda r: (r.sent_s, r.session, r.turn))

    async def _start_session(
        self, client: httpx.AsyncClient, index: int, session: Session, start_s: float
    ) -> None:
        await asyncio.sleep(max(0.0, start_s - (time.perf_counter() - self.clock_start)))
        if self.slots is None:
            await self._session(client, index, session)
            return
        async with self.slots:
            await self._session(client, index, session)

    async def _session(self, client: httpx.AsyncClient, index: int, session: Session) -> None:
        history: list[dict[str, str]] = []
        history_tokens = 0
        for turn_index, turn in enumerate(session.turns):
            if turn_index and turn.think_time_s:
                await asyncio.sleep(turn.think_time_s)
            new = turn_messages(turn, turn_index == 0, self.texts)
            messages = history + new if session.keeps_history else new
            # with ignore_eos the model generates exactly max_tokens: the turn's output length,
            # as the simulator assumes; without, the workload's max_tokens and the model decides
            max_tokens = turn.output_len if self.target.ignore_eos else turn.max_tokens
            body = chat_body(
                self.target.model, messages, max_tokens, ignore_eos=self.target.ignore_eos
            )
            headers = {"X-Session-Id": f"kvwise-bench-{self.run_token}-{index}"}
            outcome = await stream_chat(
                client, self.target.chat_url, body, self.clock_start, headers
            )
            new_tokens = _planned_tokens(turn.new_segments, self.texts)
            record = self._record(index, turn_index, turn, outcome, history_tokens + new_tokens)
            self.records.append(record)
            self.on_record(record)
            if not record.is_ok:
                return  # a failed turn ends the session, as a rejected request in the simulator
            if session.keeps_history:
                history = [*messages, {"role": "assistant", "content": outcome.text}]
                history_tokens += new_tokens + (record.output_tokens or 0)

    def _record(
        self, session: int, turn_index: int, turn: Turn, outcome: Outcome, planned_prompt: int
    ) -> RequestRecord:
        first = outcome.first_token_s
        chunks = outcome.chunk_times_s
        return RequestRecord(
            session=session,
            turn=turn_index,
            sent_s=outcome.sent_s,
            ttft_s=None if first is None else first - outcome.sent_s,
            itl_s=[b - a for a, b in itertools.pairwise(chunks)],
            e2el_s=outcome.finish_s - outcome.sent_s,
            prompt_tokens=outcome.prompt_tokens,
            output_tokens=self._output_tokens(outcome),
            cached_tokens=outcome.cached_tokens,
            planned_prompt_tokens=planned_prompt,
            planned_output_tokens=turn.output_len,
            new_segments=[
                (seg_id, self.texts.num_tokens(seg_id, n)) for seg_id, n in turn.new_segments
            ],
            finish_reason=outcome.finish_reason,
            error=outcome.error,
        )

    def _output_tokens(self, outcome: Outcome) -> int | None:
        """Usage when the server sends it; else the streamed text counted by a local tokenizer
        (in-process, microseconds); else the number of chunks (about one token each)."""
        if outcome.output_tokens is not None or outcome.error is not None:
            return outcome.output_tokens
        if isinstance(self.texts.counter, LocalTokenizer):
            return len(self.texts.counter.encode(outcome.text))
        return len(outcome.chunk_times_s)


async def run_workload(
    target: Target,
    workload: Workload,
    texts: SegmentTexts,
    on_record: Callable[[RequestRecord], None] = lambda record: None,
) -> list[RequestRecord]:
    """Send the workload; one record per request sent, in order of sending."""
    texts.prepare(seg for s in workload.sessions for t in s.turns for seg in t.new_segments)
    return await _Run(target, workload, texts, on_record).run()
