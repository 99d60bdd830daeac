"""The API server in front of the engine: a fixed latency, a CPU that takes in one request at
a time, and the same server's CPU streaming the answers back, token by token.

vLLM's OpenAI server (`vllm/entrypoints/openai/api_server.py`) parses each request, renders the
chat template and tokenizes the prompt on one process's event loop (tokenization goes through a
single-worker executor, `vllm/entrypoints/openai/serving_engine.py: OpenAIServing`), before it
hands the request to the engine core. Two coefficients model the way in:

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

The way back: every output token passes through the same process. In V1 the engine core is a
separate process that sends each step's outputs over ZMQ; the API server's output handler
(`vllm/v1/engine/async_llm.py: AsyncLLM._run_output_handler`) pulls them and runs
`OutputProcessor.process_outputs` (`vllm/v1/engine/output_processor.py`: incremental
detokenization, `detokenizer.update`, and a `RequestOutput` per request), in chunks of
VLLM_V1_OUTPUT_PROC_CHUNK_SIZE with `asyncio.sleep(0)` between them; each request's
`completion_stream_generator` (`entrypoints/openai/completion/serving.py`, the chat one likewise)
then renders one SSE chunk (`model_dump_json`) and uvicorn writes it to the socket. V0 behind
the multiprocessing front end (0.6-0.10, `vllm/engine/multiprocessing/client.py:
MQLLMEngineClient.run_output_handler_loop`) unpickles each step's `RequestOutput`s and streams
them the same way (its detokenization runs in the engine process, inside the step: not here).
The engine core does not wait for the API server: its outputs queue up. So one coefficient:

    frontend_token_s     CPU time of the API server per streamed output token

Each step's tokens join a first-in-first-out queue for that CPU when the step ends. The
client sees them once the server has caught up with the steps before:

    seen_k = max(free_(k-1), step_end_k)        free_k = seen_k + frontend_token_s x tokens_k

(`Engine.end_step`, `Engine.stream`, `pure_decode._decode_loop`): TTFT, TPOT, E2E and the
benchmark's duration count from there. The server's work on a step's own tokens at light load
is in `api_overhead_s` already (fitted with it), so only the wait behind earlier steps is
added: none below saturation, while above it output tokens/s cannot pass 1 / frontend_token_s,
whatever the GPU does, and the backlog delays every later token. When the API server falls
behind, vLLM's per-request collector (`RequestOutputCollector`) merges the outputs a stream
has not yet taken into one chunk, so the cost per token at the ceiling is below the cost per
chunk at light load: the constant is measured at saturation. Not modelled: the requests
coming in and the tokens going out compete for the same CPU (two separate queues here), and
--api-server-count > 1 (more CPUs).

The default (`FRONTEND_TOKEN_S`) is measured, not fitted to any serving benchmark:
`benchmarks/frontend_cost.py` runs vLLM's own API server (0.32.0, V1, the CPU engine with a tiny
model, so the API server and not the engine is the bottleneck) and reads that process's CPU time
(/proc utime + stime; the engine core is a child process, not counted) over 256 streamed
requests of 128 tokens against the same requests with 1 token. It is in line with what vLLM's
own reports allow: the V1 server came within 3 % of the offline `LLM` class at 56 req/s x 200
tokens, about 11,000 output tokens/s (github.com/vllm-project/vllm/pull/11636, so at most ~90 us
per token if that 3 % were all of it), the V0 front end streamed 8,475 tokens/s on one H100
(pull/8125), and the SSE render alone costs 7.5 us per chunk with pydantic (pull/52875).
The chat endpoint costs the same per token (69 us against 63-83 us on /v1/completions, same
script) and about 1 ms more per request (`serving_chat.py: _preprocess_chat`, the template):
not modelled apart, it is within the spread of the fitted `api_overhead_s`
(docs/simulator.md, "The API server at low load"). `kvwise bench` reads the server's own
figure (`process_cpu_seconds_total` of the API server on /metrics) and `kvwise calibrate`
stores it per deployment (`calibrated_token_s`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kvwise.sim.engine import Engine


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


# API-server CPU per streamed output token at saturation, vLLM 0.32.0 (module docstring):
# benchmarks/frontend_cost.py, see benchmarks/results/frontend_cost.txt
FRONTEND_TOKEN_S = 63e-6


def streamed_first_tokens(engine: Engine) -> None:
    """After a run with a per-token cost: a first token out of a step the API server was
    behind on is seen when the server caught up (`Engine.late_steps`), not at the step's end."""
    late = engine.late_steps
    for request in engine.finished:
        if request.first_token_s is not None and request.first_token_step in late:
            request.first_token_s = late[request.first_token_step]
