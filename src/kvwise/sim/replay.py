"""`--workload replay FILE.jsonl`: requests from a log, at their own times.

One JSON object per line, either lengths or an OpenAI-style chat request:

    {"timestamp_s": 0.0, "input_len": 812, "output_len": 128}
    {"timestamp_s": 1.5, "messages": [{"role": "system", "content": "..."}, ...],
     "max_tokens": 256, "output_len": 90}

`timestamp_s` is when the request was sent (shifted so the first is at 0; omitted: all at
once). For message logs, each distinct message is one segment (its content is its identity),
so requests that repeat a conversation's earlier messages share that prefix in the cache, as
they do in vLLM. Without a tokenizer, a message counts len(content) / 4 tokens plus 4 for the
chat template (an estimate; give `input_len` for exact counts).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kvwise.errors import DataError
from kvwise.sim.request import Segment
from kvwise.sim.workloads import Session, Turn, Workload, WorkloadSpec

CHARS_PER_TOKEN = 4
TEMPLATE_TOKENS_PER_MESSAGE = 4


class _Message(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role: str
    content: str
    name: str | None = None


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid")
    timestamp_s: float = Field(default=0.0, ge=0)
    input_len: int | None = Field(default=None, ge=1)
    output_len: int | None = Field(default=None, ge=1)
    max_tokens: int | None = Field(default=None, ge=1)
    messages: list[_Message] | None = None
    session_id: str | None = None
    model: str | None = None
    stream: bool | None = None
    temperature: float | None = None


def _message_segment(message: _Message) -> Segment:
    digest = hashlib.sha256(f"{message.role}\0{message.content}".encode()).digest()
    seg_id = int.from_bytes(digest[:7], "big")  # below 2**56: never a generated output's id
    tokens = len(message.content) // CHARS_PER_TOKEN + TEMPLATE_TOKENS_PER_MESSAGE
    return (seg_id, tokens)


def _prompt(record: _Record, line_no: int) -> tuple[Segment, ...]:
    if record.messages:
        return tuple(_message_segment(m) for m in record.messages)
    if record.input_len is None:
        raise DataError(f"line {line_no}: give input_len or messages")
    return ((line_no, record.input_len),)  # a fresh segment per request


def load_replay(path: str, spec: WorkloadSpec) -> Workload:
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as exc:
        raise DataError(f"{path}: cannot read ({exc.strerror})") from exc
    sessions: list[Session] = []
    times: list[float] = []
    for line_no, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = _Record.model_validate(json.loads(line))
        except (json.JSONDecodeError, ValidationError) as exc:
            why = (
                str(exc).splitlines()[0]
                if isinstance(exc, json.JSONDecodeError)
                else _first_error(exc)
            )
            raise DataError(f"{path}:{line_no}: {why}") from exc
        output_len = record.output_len or record.max_tokens or spec.output_len
        max_tokens = max(record.max_tokens or output_len, output_len)
        turn = Turn(_prompt(record, line_no), max_tokens, output_len)
        sessions.append(Session((turn,), keeps_history=False))
        times.append(record.timestamp_s)
    if not sessions:
        raise DataError(f"{path}: no requests")
    order = sorted(range(len(sessions)), key=lambda i: (times[i], i))
    start_s = times[order[0]]
    return Workload(
        "replay",
        tuple(sessions[i] for i in order),
        tuple(times[i] - start_s for i in order),
        spec.max_concurrency,
        f"replay {path}: {len(sessions)} requests",
    )


def _first_error(exc: ValidationError) -> str:
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error["loc"]) or "record"
    return f"{where}: {error['msg']}"
