"""From an HTTP body to what admission and the relay need: validated, counted, history applied.

Each request becomes a `Prepared`: the body to send upstream (the client's bytes untouched
unless the session history rewrote the messages), its KV cost, its fairness flow and affinity
key, and, for a session with history, the turn to store once the reply is complete.

KV cost per sequence: the prompt's upper-bound tokens plus `max_tokens`, or `max_model_len`
when the request sets no `max_tokens` (vLLM then lets the reply grow to the model's limit);
never more than `max_model_len`, the most one sequence can hold. `n` choices and batched prompts
are separate sequences in vLLM, so their costs add up.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ValidationError

from kvwise.gateway.admission import Ticket
from kvwise.gateway.asgi import HttpError
from kvwise.gateway.config import SessionConfig
from kvwise.gateway.history import Message, trim_history
from kvwise.gateway.merge import merge
from kvwise.gateway.schemas import ChatRequest, CompletionRequest, describe_validation_error
from kvwise.gateway.security import OPEN_TENANT, Caller
from kvwise.gateway.sessions import SessionStore, store_unavailable
from kvwise.gateway.tokens import (
    TEMPLATE_TOKENS_FOR_REPLY,
    TokenCount,
    Tokenizer,
    count_chat,
    count_messages,
    count_prompt,
    count_tools,
)

AFFINITY_PREFIX_CHARS = 2048  # enough to tell system prompts apart, cheap to hash

log = logging.getLogger("kvwise.gateway")


@dataclass(frozen=True)
class TurnToStore:
    session_id: str  # scoped by tenant: see `session_key`
    system: list[Message] | None  # None: keep the stored system prompt
    new_messages: list[Message]
    num_kept: int | None = None  # stored messages to keep before them; None: all


@dataclass(frozen=True)
class Prepared:
    path: str
    body: bytes
    is_stream: bool
    ticket: Ticket
    prompt_tokens: TokenCount
    turn: TurnToStore | None = None
    response_headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class PrepareContext:
    tokenizer: Tokenizer
    max_model_len: int
    sessions: SessionConfig | None
    store: SessionStore | None


# A \uD800-\uDFFF escape: a surrogate, paired (an emoji from an ASCII-only encoder) or not
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def _parse(raw: bytes, model: type[BaseModel]) -> tuple[dict[str, Any], Any]:
    try:
        body = json.loads(raw)
    except ValueError:
        raise HttpError(400, "request body is not valid JSON") from None
    except RecursionError:
        raise HttpError(400, "request body is nested too deeply") from None
    if not isinstance(body, dict):
        raise HttpError(400, "request body must be a JSON object")
    if _SURROGATE_ESCAPE.search(raw):
        _reject_lone_surrogates(body)
    try:
        return body, model.model_validate(body)
    except ValidationError as exc:
        message, param = describe_validation_error(exc)
        raise HttpError(400, message, param=param) from None


def _reject_lone_surrogates(body: dict[str, Any]) -> None:
    """A lone UTF-16 surrogate (`"\\ud800"`) parses in Python but is no Unicode text: no
    tokenizer, UTF-8 encoder or engine can take it."""
    try:
        json.dumps(body, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        message = "request body contains a lone UTF-16 surrogate escape; strings must be Unicode"
        raise HttpError(400, message) from None
    except RecursionError:  # parsed, but too deep for the encoder
        raise HttpError(400, "request body is nested too deeply") from None


def _check_length(prompt: TokenCount, reply_tokens: int | None, max_model_len: int) -> None:
    """The 400 vLLM would give, said before the engine is bothered (lower bounds only)."""
    if prompt.lower >= max_model_len:
        raise HttpError(
            400,
            f"prompt is {prompt.lower} tokens; this model's max_model_len is {max_model_len}",
            param="messages",
        )
    if reply_tokens is not None and prompt.lower + reply_tokens > max_model_len:
        message = f"prompt ({prompt.lower} tokens) + max_tokens ({reply_tokens})"
        raise HttpError(
            400, f"{message} exceeds max_model_len ({max_model_len})", param="max_tokens"
        )


def sequence_cost(prompt: TokenCount, reply_tokens: int | None, max_model_len: int) -> int:
    if reply_tokens is None:
        return max_model_len
    return min(max_model_len, prompt.upper + reply_tokens)


def session_key(caller: Caller, session_id: str) -> str:
    """A session id as stored: within its tenant, so one API key never reaches another's
    session, whatever id it sends (the tenant part has a fixed form the client cannot forge)."""
    return f"{caller.tenant}/{session_id}"


@dataclass(frozen=True)
class Identity:
    session: str | None  # the tenant-scoped session key
    flow: str  # the fair queue's flow: the session, else the end user, else the caller
    affinity: str | None  # routing key before the prompt prefix: the session, else the user


def identify(ctx: PrepareContext, caller: Caller, session_id: str | None, user: Any) -> Identity:
    """`user` is an end-user label (fairness, affinity), a session id only when configured so:
    two conversations of one end user are not one session."""
    end_user = session_key(caller, user) if isinstance(user, str) and user else None
    if not session_id and end_user and ctx.sessions is not None and ctx.sessions.is_user_session:
        session_id = user
    session = session_key(caller, session_id) if session_id else None
    if session is not None:
        return Identity(session, f"session:{session}", f"session:{session}")
    if end_user is not None:
        return Identity(None, f"user:{end_user}", f"user:{end_user}")
    return Identity(None, caller.flow, None)


def _fairness(caller: Caller) -> dict[str, Any]:
    """The fair queue's group: the API key (its sessions share its share), else the flow."""
    limits = caller.limits
    group = caller.tenant if caller.tenant != OPEN_TENANT else None
    return {"group": group, "queue_share": limits.queue_share, "weight": limits.weight}


def _affinity(identity: Identity, prefix: str) -> str:
    return identity.affinity or f"prefix:{prefix[:AFFINITY_PREFIX_CHARS]}"


async def prepare_chat(
    ctx: PrepareContext, raw: bytes, session_id: str | None, caller: Caller
) -> Prepared:
    body, request = _parse(raw, ChatRequest)
    identity = identify(ctx, caller, session_id, request.user)
    session_id = identity.session
    reply_tokens = request.reply_tokens()
    headers: dict[str, str] = {}
    turn = None
    if (
        session_id
        and ctx.sessions is not None
        and ctx.sessions.is_history_enabled
        and ctx.store is not None
    ):
        turn, messages, headers = await _apply_history(ctx, session_id, body, reply_tokens)
        body = dict(body, messages=messages)
        raw = json.dumps(body).encode()
    messages = body["messages"]
    prompt = count_chat(ctx.tokenizer, messages, request.tools)
    _check_length(prompt, reply_tokens, ctx.max_model_len)
    system = next((m for m in messages if m.get("role") == "system"), None)
    ticket = Ticket(
        flow=identity.flow,
        affinity_key=_affinity(identity, str(system.get("content")) if system else ""),
        cost_tokens=request.n * sequence_cost(prompt, reply_tokens, ctx.max_model_len),
        num_seqs=request.n,
        prompt_tokens=request.n * prompt.upper,
        prefill_tokens=prompt.upper,
        **_fairness(caller),
    )
    return Prepared("/v1/chat/completions", raw, request.stream, ticket, prompt, turn, headers)


async def prepare_completion(
    ctx: PrepareContext, raw: bytes, session_id: str | None, caller: Caller
) -> Prepared:
    _, request = _parse(raw, CompletionRequest)
    prompts = request.prompts()
    if not prompts:
        raise HttpError(400, "prompt: at least one prompt is required", param="prompt")
    counts = [count_prompt(ctx.tokenizer, p) for p in prompts]
    for count in counts:
        _check_length(count, request.max_tokens, ctx.max_model_len)
    identity = identify(ctx, caller, session_id, request.user)
    first = prompts[0] if isinstance(prompts[0], str) else ""
    ticket = Ticket(
        flow=identity.flow,
        affinity_key=_affinity(identity, first),
        cost_tokens=request.n
        * sum(sequence_cost(c, request.max_tokens, ctx.max_model_len) for c in counts),
        num_seqs=request.n * len(counts),
        prompt_tokens=request.n * sum(c.upper for c in counts),
        prefill_tokens=sum(c.upper for c in counts),
        **_fairness(caller),
    )
    total = TokenCount(sum(c.lower for c in counts), sum(c.upper for c in counts))
    return Prepared("/v1/completions", raw, request.stream, ticket, total)


async def _apply_history(
    ctx: PrepareContext, session_id: str, body: dict[str, Any], reply_tokens: int | None
) -> tuple[TurnToStore, list[Message], dict[str, str]]:
    assert ctx.sessions is not None and ctx.store is not None
    try:
        stored = await ctx.store.load(session_id)
    except Exception as exc:
        log.warning("session store failed to load a session: %s", exc)
        raise store_unavailable("cannot load the session's history; retry later") from None
    sent_system = [m for m in body["messages"] if m.get("role") == "system"]
    incoming = [m for m in body["messages"] if m.get("role") != "system"]
    merged = merge(stored.messages, incoming)
    system = sent_system or stored.system
    reserve = reply_tokens or ctx.sessions.reply_reserve_tokens
    max_prompt = ctx.max_model_len - reserve - TEMPLATE_TOKENS_FOR_REPLY
    max_prompt -= count_tools(ctx.tokenizer, body.get("tools")).upper
    if ctx.sessions.max_prompt_tokens is not None:
        max_prompt = min(max_prompt, ctx.sessions.max_prompt_tokens)
    trimmed = trim_history(
        system + merged.history(stored.messages),
        max_prompt,
        lambda msgs: count_messages(ctx.tokenizer, msgs).upper,
        ctx.sessions.trim_low_water,
    )
    headers = {
        "x-kvwise-history-messages": str(len(trimmed.messages)),
        "x-kvwise-history-dropped-messages": str(trimmed.num_dropped_messages),
        "x-kvwise-history-dropped-tokens": str(trimmed.num_dropped_tokens),
    }
    is_rewound = merged.num_kept < len(stored.messages)
    num_kept = merged.num_kept if is_rewound else None
    turn = TurnToStore(session_id, sent_system or None, merged.new_messages, num_kept)
    return turn, trimmed.messages, headers
