"""Failures while serving that end agent sessions: over-long requests, a dead engine, timeouts.

A request longer than max_model_len is rejected with HTTP 400 ("This model's maximum context
length is 32768 tokens. However, you requested 33000 tokens ..."); an agent whose history grew
past the limit gets that on every later turn. The remedies (`runtime_options.py`): a longer
max_model_len when the model and the GPU hold it (the planner says), else trimming each
session's history to the limit (`kvwise serve --session-history` in front of vLLM does it,
prefix-stable) or fewer tokens asked.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kvwise.doctor.parse import ParsedLog
from kvwise.doctor.text import LogLine

# (limit, requested) in each wording; `requested` is the whole request (prompt and completion)
_WORDINGS = (
    re.compile(
        r"maximum context length is (?P<limit>\d+) tokens\. However, you requested "
        r"(?P<requested>\d+) tokens"
    ),
    re.compile(
        r"maximum context length is (?P<limit>\d+) tokens\. However, you requested "
        r"\d+ output tokens and your prompt contains at least \d+ input tokens, for a "
        r"total of at least (?P<requested>\d+) tokens"
    ),
    re.compile(
        r"maximum context length is (?P<limit>\d+) tokens\. However, your request has "
        r"(?P<requested>\d+) input tokens"
    ),
    re.compile(
        r"is too large: (?P<completion>\d+)\. This model's maximum context length is "
        r"(?P<limit>\d+) tokens and your request has (?P<requested>\d+) input tokens"
    ),
    re.compile(
        r"prompt \(length (?P<requested>\d+)\) is longer than the maximum model length "
        r"of (?P<limit>\d+)"
    ),
    re.compile(
        r"Input prompt \((?P<requested>\d+) tokens\) is too long and exceeds limit of "
        r"(?P<limit>\d+)"
    ),
    re.compile(r"maximum context length is (?P<limit>\d+) tokens"),
)
DEFAULT_PORT = 8000  # `vllm serve`'s default
_PORT = re.compile(r"(?:Uvicorn running on|Starting vLLM API server \d* ?on) https?://[\w.]+:(\d+)")


@dataclass(frozen=True)
class OverLong:
    limit: int  # the model's max_model_len, as the error states it
    requested: int | None  # the longest request rejected (prompt + completion), when stated
    count: int  # how many rejections the log shows
    line: LogLine


def over_long(parsed: ParsedLog) -> OverLong | None:
    hits = parsed.signals.get("context_length", ())
    if not hits:
        return None
    limit, longest = 0, None
    for hit in hits:
        for wording in _WORDINGS:
            match = wording.search(hit.line.message)
            if match is None:
                continue
            limit = max(limit, int(match["limit"]))
            if "requested" in match.groupdict() and match["requested"]:
                asked = int(match["requested"]) + int(match.groupdict().get("completion") or 0)
                longest = max(longest or 0, asked)
            break
    return OverLong(limit, longest, len(hits), hits[0].line) if limit else None


def summarize_over_long(parsed: ParsedLog) -> str:
    found = over_long(parsed)
    if found is None:
        return "vLLM rejected requests longer than max_model_len (HTTP 400)."
    asked = "" if found.requested is None else f" (the longest asked for {found.requested:,})"
    times = f"{found.count:,} requests were" if found.count > 1 else "a request was"
    return (
        f"vLLM served, but {times} rejected with HTTP 400 for being longer than max_model_len="
        f"{found.limit:,} tokens{asked}: an agent whose history outgrew the limit gets this on "
        "every later turn, so its session ends."
    )


def gateway_remedy(parsed: ParsedLog) -> str:
    """`kvwise serve` in front of vLLM, trimming each session's history to fit max_model_len."""
    where = "" if _PORT.search(parsed.log.joined) else " (at vLLM's default port)"
    return (
        f"or put {_gateway(parsed)} --session-history in front of vLLM{where}: it stores each "
        "session's turns and trims the oldest (prefix-stable) so that every prompt fits "
        "max_model_len, instead of the session ending on this 400"
    )


def summarize_engine_dead(parsed: ParsedLog) -> str:
    return (
        "vLLM's engine died while serving (EngineDeadError): every request in flight and every "
        "later one failed. The log shows no memory error before it; the root cause is the "
        "first traceback above the first EngineDeadError line."
    )


def summarize_timeout(parsed: ParsedLog) -> str:
    hits = parsed.signals.get("request_timeout", ())
    engine = any("iteration timed out" in hit.text or "RPC call" in hit.text for hit in hits)
    if engine:
        return (
            "A step of vLLM's engine took longer than its watchdog allows (one forward pass "
            "stalled: a very long prefill, a hung collective between GPUs); the engine stops."
        )
    return (
        "Requests timed out at the client while vLLM served: they waited in vLLM's queue (or "
        "were preempted and recomputed) longer than the client's timeout."
    )


def admission_remedy(parsed: ParsedLog) -> str:
    """`kvwise serve` in front of vLLM, admitting requests by the KV tokens they need."""
    return (
        f"or put {_gateway(parsed)} in front of vLLM: it admits requests by the KV tokens they "
        "need, so the rest wait in its queue (a 429 past --max-queue or --queue-timeout) "
        "instead of being preempted or timing out"
    )


def _gateway(parsed: ParsedLog) -> str:
    match = _PORT.search(parsed.log.joined)
    port = int(match.group(1)) if match else DEFAULT_PORT
    return f"kvwise serve --upstream http://127.0.0.1:{port}"
