from __future__ import annotations

from typing import Any

from kvwise.gateway.history import split_units, trim_history

SYSTEM = {"role": "system", "content": "sys"}


def msg(role: str, content: str = "x", **extra: Any) -> dict[str, Any]:
    return {"role": role, "content": content, **extra}


def call(call_id: str) -> dict[str, Any]:
    return msg(
        "assistant",
        "",
        tool_calls=[{"id": call_id, "type": "function", "function": {"name": "ls"}}],
    )


def per_message(messages: list[dict[str, Any]]) -> int:
    return 10 * len(messages)  # every message costs 10 tokens


def test_a_tool_call_and_its_results_form_one_unit() -> None:
    conversation = [
        SYSTEM,
        msg("user"),
        call("1"),
        msg("tool", tool_call_id="1"),
        msg("tool", tool_call_id="1"),
        msg("assistant"),
        msg("user"),
    ]
    units = split_units(conversation)
    assert [len(u) for u in units] == [1, 3, 1, 1]


def test_keeps_the_system_prompt_and_the_newest_units_that_fit() -> None:
    conversation = [
        SYSTEM,
        msg("user", "u1"),
        msg("assistant", "a1"),
        msg("user", "u2"),
        msg("assistant", "a2"),
        msg("user", "u3"),
    ]
    trimmed = trim_history(conversation, max_prompt_tokens=40, count_tokens=per_message)
    assert [m["content"] for m in trimmed.messages] == ["sys", "u2", "a2", "u3"]
    assert (trimmed.num_dropped_messages, trimmed.num_dropped_tokens) == (2, 20)


def test_never_keeps_a_tool_result_without_its_call() -> None:
    conversation = [
        SYSTEM,
        msg("user", "u1"),
        call("1"),
        msg("tool", "r1", tool_call_id="1"),
        msg("tool", "r2", tool_call_id="1"),
        msg("user", "u2"),
    ]
    # 50 tokens of room: system + u2 = 20, the 3-message call unit (30) fits; u1 does not
    trimmed = trim_history(conversation, 50, per_message)
    assert [m["content"] for m in trimmed.messages] == ["sys", "", "r1", "r2", "u2"]
    # 40 tokens: the call unit does not fit whole, so neither the call nor its results stay
    trimmed = trim_history(conversation, 40, per_message)
    assert [m["content"] for m in trimmed.messages] == ["sys", "u2"]
    assert trimmed.num_dropped_messages == 4


def test_the_newest_unit_is_kept_even_when_it_alone_is_too_long() -> None:
    trimmed = trim_history([SYSTEM, msg("user", "old"), msg("user", "new")], 5, per_message)
    assert [m["content"] for m in trimmed.messages] == ["sys", "new"]


def test_prefix_stable_cut_keeps_the_prompt_start_until_the_budget_is_hit_again() -> None:
    # one user + assistant pair per turn, 20 tokens; 100 tokens of room besides the system prompt
    conversation = [SYSTEM]
    starts = []
    for turn in range(12):
        conversation += [msg("user", f"u{turn}"), msg("assistant", f"a{turn}")]
        trimmed = trim_history(conversation, 110, per_message, low_water=0.5)
        starts.append(trimmed.messages[1]["content"])
    # just-enough cuts (low_water 1) move the start every turn once full; half-budget cuts hold
    # it for several turns, so vLLM's prefix cache keeps hitting in between
    assert starts == ["u0"] * 5 + ["u3"] * 3 + ["u6"] * 3 + ["u9"]
    eager = [
        trim_history(conversation[: 1 + 2 * (t + 1)], 110, per_message).messages[1]["content"]
        for t in range(12)
    ]
    assert len(set(eager[5:])) == 7  # a new start at every turn past the budget
