"""Rebuilding an agent's prompt from its stored history, trimmed to a token budget.

The conversation is cut into units that must stay whole: an assistant message that calls tools
together with the tool results that answer it (a tool result without its call, or a call without
its result, is an invalid OpenAI conversation), and every other message on its own. System
messages are always kept, in place. Units are dropped oldest first (with a low-water mark, see
`kvwise.core.trimming`); the newest unit is never dropped (if it alone does not fit, the request
is too long: a 400 follows).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kvwise.core.trimming import stable_cut

Message = dict[str, Any]


@dataclass(frozen=True)
class Trimmed:
    messages: list[Message]
    num_dropped_messages: int
    num_dropped_tokens: int


def split_units(messages: list[Message]) -> list[list[Message]]:
    """Non-system messages grouped so that no tool call is separated from its results."""
    units: list[list[Message]] = []
    for message in messages:
        if message.get("role") == "system":
            continue
        is_tool_result = message.get("role") == "tool"
        if is_tool_result and units and _expects_results(units[-1]):
            units[-1].append(message)
        else:
            units.append([message])
    return units


def _expects_results(unit: list[Message]) -> bool:
    return unit[0].get("role") == "assistant" and bool(unit[0].get("tool_calls"))


def trim_history(
    messages: list[Message],
    max_prompt_tokens: int,
    count_tokens: Callable[[list[Message]], int],
    low_water: float = 1.0,
) -> Trimmed:
    """Keep the system messages and the newest units within `max_prompt_tokens`, cut with
    `kvwise.core.trimming.stable_cut` (low_water < 1: prefix-stable cuts)."""
    system = [m for m in messages if m.get("role") == "system"]
    units = split_units(messages)
    budget = max_prompt_tokens - count_tokens(system)
    cut = stable_cut([count_tokens(unit) for unit in units], budget, low_water)
    kept, dropped = units[cut:], units[:cut]
    dropped_messages = [m for unit in dropped for m in unit]
    kept_ids = {id(m) for m in system} | {id(m) for unit in kept for m in unit}
    kept_messages = [m for m in messages if id(m) in kept_ids]  # original order
    return Trimmed(
        messages=kept_messages,
        num_dropped_messages=len(dropped_messages),
        num_dropped_tokens=count_tokens(dropped_messages) if dropped_messages else 0,
    )
