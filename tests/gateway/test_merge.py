"""Lining up what a client sent with the stored session: resend, rewind, edit, new turn only."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kvwise.gateway.history import Message
from kvwise.gateway.merge import merge


def msg(role: str, content: str) -> Message:
    return {"role": role, "content": content}


def conversation(num_turns: int, tag: str = "") -> list[Message]:
    turns = [[msg("user", f"u{i}{tag}"), msg("assistant", f"a{i}{tag}")] for i in range(num_turns)]
    return [m for t in turns for m in t]


# Conversations of distinct messages (an agent's turns differ: tool ids, file contents, steps)
TURNS = st.integers(min_value=1, max_value=8)
NEW = st.lists(st.sampled_from(["new", "next", "more"]), min_size=1, max_size=3).map(
    lambda texts: [msg("user", f"{t}{i}") for i, t in enumerate(texts)]
)


@given(TURNS, NEW)
def test_a_client_resending_its_whole_history_gets_no_duplication(
    num_turns: int, new: list[Message]
) -> None:
    stored = conversation(num_turns)
    merged = merge(stored, stored + new)
    assert merged.history(stored) == stored + new
    assert merged.num_kept == len(stored)  # nothing stored is forgotten


@given(TURNS, NEW, st.integers(min_value=0, max_value=15))
def test_a_history_the_store_capped_still_lines_up(
    num_turns: int, new: list[Message], cut: int
) -> None:
    full = conversation(num_turns)
    stored = full[min(cut, len(full) - 1) :]  # the store forgot the oldest messages
    assert merge(stored, full + new).history(stored) == stored + new


@given(TURNS, NEW)
def test_an_agent_sending_only_its_new_turn_extends_the_history(
    num_turns: int, new: list[Message]
) -> None:
    stored = conversation(num_turns)
    assert merge(stored, new).history(stored) == stored + new


@given(TURNS, st.data())
def test_an_edit_or_a_rewind_wins_and_the_store_follows(
    num_turns: int, data: st.DataObject
) -> None:
    """The client agrees with the store on its first k >= 2 messages, then sends its own."""
    stored = conversation(num_turns)
    k = data.draw(st.integers(min_value=min(2, len(stored)), max_value=len(stored)))
    edit = data.draw(st.lists(st.sampled_from(["edited", "retry"]), max_size=3))
    sent = stored[:k] + [msg("user", f"{t}{i}") for i, t in enumerate(edit)]
    merged = merge(stored, sent)
    assert merged.history(stored) == sent
    assert merged.num_kept == k


def test_a_repeated_short_message_is_a_new_turn_not_a_rewind() -> None:
    stored = [
        msg("user", "yes"),
        msg("assistant", "done"),
        msg("user", "go"),
        msg("assistant", "ok"),
    ]
    merged = merge(stored, [msg("user", "yes")])
    assert merged.history(stored) == [*stored, msg("user", "yes")]


def test_a_regenerated_reply_replaces_the_stored_one() -> None:
    stored = conversation(2)  # u0 a0 u1 a1
    merged = merge(stored, stored[:3])  # the client drops a1 and asks again
    assert (merged.num_kept, merged.new_messages) == (3, [])
    assert merged.history(stored) == stored[:3]


def test_tool_calls_line_up_by_id_whatever_fields_the_client_adds() -> None:
    call = {"id": "call_1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
    stored = [
        msg("user", "list files"),
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "a.py"},
        msg("assistant", "one file"),
    ]
    resent = [dict(m) for m in stored]
    resent[1] = {"role": "assistant", "content": "", "tool_calls": [{**call, "index": 0}]}
    merged = merge(stored, [*resent, msg("user", "read it")])
    assert merged.num_kept == 4 and merged.new_messages == [msg("user", "read it")]
    other_call = {"role": "assistant", "content": None, "tool_calls": [{**call, "id": "call_9"}]}
    diverged = merge(stored, [*resent[:3], other_call])
    assert diverged.num_kept == 3  # a different call is a different conversation from there
