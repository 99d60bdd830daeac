"""Properties of the history trim over any conversation hypothesis can build: system prompts
kept, tool calls never parted from their results, the oldest dropped first, within budget, and
a cut that stays put while the next turns still fit (what keeps vLLM's prefix cache hitting)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kvwise.gateway.history import Message, split_units, trim_history

SIZES = st.integers(min_value=0, max_value=60)


def cost(messages: list[Message]) -> int:
    """Tokens as the content's length plus a per-message allowance (a stand-in tokenizer)."""
    return sum(len(str(m.get("content") or "")) + 4 for m in messages)


@st.composite
def conversations(draw: st.DrawFn) -> list[Message]:
    """System prompts anywhere; user and assistant messages; assistant tool calls each followed
    by their results (0-3, as a client may send a call still unanswered last)."""
    messages: list[Message] = []
    for index in range(draw(st.integers(min_value=1, max_value=14))):
        kind = draw(st.sampled_from(["system", "user", "assistant", "tools"]))
        text = "x" * draw(SIZES)
        if kind != "tools":
            messages.append({"role": kind, "content": text})
            continue
        call = {"id": f"c{index}", "type": "function", "function": {"name": "ls"}}
        messages.append({"role": "assistant", "content": text, "tool_calls": [call]})
        for _ in range(draw(st.integers(min_value=0, max_value=3))):
            result = "y" * draw(SIZES)
            messages.append({"role": "tool", "tool_call_id": f"c{index}", "content": result})
    return messages


def _call(message: Message) -> str | None:
    calls = message.get("tool_calls")
    return calls[0]["id"] if calls else None


def ids(messages: list[Message]) -> list[int]:
    return [id(m) for m in messages]


@given(conversations(), st.integers(min_value=0, max_value=400), st.sampled_from([0.5, 1.0]))
def test_a_trimmed_history_is_a_valid_newest_suffix_within_budget(
    messages: list[Message], max_prompt_tokens: int, low_water: float
) -> None:
    trimmed = trim_history(messages, max_prompt_tokens, cost, low_water)
    kept = ids(trimmed.messages)
    assert kept == [i for i in ids(messages) if i in set(kept)]  # original order
    system = [m for m in messages if m["role"] == "system"]
    assert set(ids(system)) <= set(kept)  # system prompts always stay
    for call_id in {m["tool_call_id"] for m in messages if m["role"] == "tool"}:
        call_and_results = [m for m in messages if call_id in (m.get("tool_call_id"), _call(m))]
        is_kept = [id(m) in set(kept) for m in call_and_results]
        assert all(is_kept) or not any(is_kept), call_id  # a call with all its results, or none
    units = split_units(messages)
    kept_units = [u for u in units if id(u[0]) in set(kept)]
    assert kept_units == units[len(units) - len(kept_units) :]  # the oldest went first
    if units:
        assert kept_units and kept_units[-1] is units[-1]  # the newest unit never goes
    if len(kept_units) > 1:  # more than the newest unit alone: then within the budget
        assert cost(trimmed.messages) <= max_prompt_tokens
    dropped = [m for m in messages if id(m) not in set(kept)]
    assert trimmed.num_dropped_messages == len(dropped)
    assert trimmed.num_dropped_tokens == (cost(dropped) if dropped else 0)


@given(conversations(), st.integers(min_value=0, max_value=400))
def test_cutting_just_enough_keeps_everything_that_fits(
    messages: list[Message], max_prompt_tokens: int
) -> None:
    trimmed = trim_history(messages, max_prompt_tokens, cost, low_water=1.0)
    units = split_units(messages)
    num_kept = sum(1 for u in units if id(u[0]) in set(ids(trimmed.messages)))
    if num_kept < len(units):  # one more unit back would not fit
        system = [m for m in messages if m["role"] == "system"]
        one_more = [m for u in units[len(units) - num_kept - 1 :] for m in u]
        assert cost(system) + cost(one_more) > max_prompt_tokens


@given(conversations(), st.lists(SIZES, min_size=1, max_size=6), st.integers(50, 400))
def test_the_prompt_start_stays_put_while_new_turns_still_fit(
    messages: list[Message], new_sizes: list[int], max_prompt_tokens: int
) -> None:
    """Turn after turn, the kept history only loses its oldest units when the budget is
    passed: until then each prompt extends the last one (a prefix-cache hit on the engine)."""
    history: list[Message] = list(messages)
    previous = trim_history(history, max_prompt_tokens, cost, 0.5)
    for size in new_sizes:
        history.append({"role": "user", "content": "z" * size})
        trimmed = trim_history(history, max_prompt_tokens, cost, 0.5)
        old, new = ids(previous.messages), ids(trimmed.messages)
        if cost(previous.messages) + size + 4 <= max_prompt_tokens:
            assert new[: len(old)] == old  # the same start, the new turn appended
        assert trimmed.num_dropped_messages >= previous.num_dropped_messages  # never undone
        previous = trimmed
