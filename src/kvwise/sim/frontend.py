"""The API server in front of the engine: a fixed latency, and a CPU that serves one request at
a time.

vLLM's OpenAI server (`vllm/entrypoints/openai/api_server.py`) parses each request, renders the
chat template and tokenizes the prompt on one process's event loop (tokenization goes through a
single-worker executor, `vllm/entrypoints/openai/serving_engine.py: OpenAIServing`), before it
hands the request to the engine core. Two coefficients model it:

    api_overhead_s       latency every request pays, however busy the server is: HTTP, the hop
                         to the engine core, and on the way back detokenizing and streaming
    frontend_request_s   CPU time the server's single event loop spends on each request: at a
                         burst (request rate inf, or many clients at once) requests queue here

A request sent at `sent_s` reaches the engine at

    arrival_s = busy_start_s + k x frontend_request_s + api_overhead_s

where the k-th request of a busy period (a run of requests each sent before the previous one
was done) waits for the k - 1 ahead of it. That is linear in both coefficients, with the offset
`busy_start_s - sent_s` (<= 0), which is how the fit reads it (`FrontEndQueue.queued`).

Requests are served in the order the clients send them. A request sent before the start of the
current busy period (a multi-turn client's think time can put a turn before one sent earlier)
is served at once, as if the server had been idle (not modelled: its place in that queue).
"""

from __future__ import annotations

import math


class FrontEndQueue:
    __slots__ = (
        "api_overhead_s",
        "busy_start_s",
        "free_s",
        "frontend_request_s",
        "num_busy",
        "queued",
    )

    def __init__(self, api_overhead_s: float, frontend_request_s: float) -> None:
        self.api_overhead_s = api_overhead_s
        self.frontend_request_s = frontend_request_s
        self.free_s = -math.inf  # when the server's CPU is done with the requests so far
        self.busy_start_s = -math.inf
        self.num_busy = 0  # requests served in the current busy period
        # per request, in the order sent: (k, busy_start_s - sent_s), for the fit
        self.queued: list[tuple[int, float]] = []

    def arrival_s(self, sent_s: float) -> float:
        """When a request sent now reaches the engine; call once per request, in send order."""
        if sent_s < self.busy_start_s:  # out of send order: served as if alone
            self.queued.append((1, 0.0))
            return sent_s + self.frontend_request_s + self.api_overhead_s
        if sent_s >= self.free_s:
            self.busy_start_s = sent_s
            self.num_busy = 0
        self.num_busy += 1
        self.free_s = self.busy_start_s + self.num_busy * self.frontend_request_s
        self.queued.append((self.num_busy, self.busy_start_s - sent_s))
        return self.free_s + self.api_overhead_s
