from __future__ import annotations

from kvwise.gateway.sse import (
    EventSplitter,
    ReplyCollector,
    carries_token,
    count_token_events,
    event_json,
    is_done,
)


def test_events_are_cut_at_blank_lines_whatever_the_read_boundaries() -> None:
    splitter = EventSplitter()
    assert splitter.feed(b'data: {"a": 1}\n') == []
    assert splitter.feed(b'\ndata: {"a": 2}\r\n\r\ndata: [DO') == [
        b'data: {"a": 1}\n\n',
        b'data: {"a": 2}\n\n',
    ]
    assert splitter.feed(b"NE]\n\n") == [b"data: [DONE]\n\n"]
    assert splitter.rest() == b""


def test_a_token_is_text_reasoning_a_tool_call_or_a_finish() -> None:
    role_only = {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}
    assert not carries_token(role_only)
    assert carries_token({"choices": [{"delta": {"content": "hi"}}]})
    assert carries_token({"choices": [{"delta": {"reasoning_content": "hm"}}]})
    assert carries_token({"choices": [{"delta": {"tool_calls": [{"index": 0}]}}]})
    assert carries_token({"choices": [{"text": "x", "finish_reason": None}]})
    assert carries_token({"choices": [{"delta": {}, "finish_reason": "stop"}]})
    assert event_json(b"data: [DONE]\n\n") is None and is_done(b"data: [DONE]\n\n")


def test_the_reply_is_rebuilt_from_deltas_including_tool_calls() -> None:
    collector = ReplyCollector()
    chunks = [
        {"choices": [{"index": 0, "delta": {"role": "assistant", "content": "Let me "}}]},
        {"choices": [{"index": 0, "delta": {"content": "look."}}]},
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "tool_calls": [
                            {
                                "index": 0,
                                "id": "call_1",
                                "type": "function",
                                "function": {"name": "read", "arguments": '{"pa'},
                            }
                        ]
                    },
                }
            ]
        },
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {"tool_calls": [{"index": 0, "function": {"arguments": 'th": "a"}'}}]},
                }
            ]
        },
        {"choices": [{"index": 1, "delta": {"content": "another choice, ignored"}}]},
    ]
    for chunk in chunks:
        collector.add_chunk(chunk)
    assert collector.message() == {
        "role": "assistant",
        "content": "Let me look.",
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "read", "arguments": '{"path": "a"}'},
            }
        ],
    }


def test_the_relay_path_passes_whole_events_and_counts_tokens_without_parsing() -> None:
    # What the relay sends past the first token: whole events only, whatever the read
    # boundaries; a token count that skips [DONE], comments and the usage-only chunk, and is
    # not fooled by `data: {` or the usage marker inside generated text.
    stream = (
        b'data: {"choices":[{"delta":{"content":"a"}}]}\r\n\r\n'
        b": keep-alive\n\n"
        b'data: {"choices":[{"delta":{"content":"data: {\\"choices\\":[]"}}]}\n\n'
        b'data: {"choices":[],"usage":{"completion_tokens":2}}\n\n'
        b"data: [DONE]\n\n"
    )
    for step in (1, 7, 50, len(stream)):
        splitter, relayed = EventSplitter(), []
        for start in range(0, len(stream), step):
            relayed.append(splitter.feed_joined(stream[start : start + step]))
        assert b"".join(relayed) == stream.replace(b"\r\n", b"\n")
        assert all(not part or part.endswith(b"\n\n") for part in relayed)
        assert sum(count_token_events(part) for part in relayed) == 2
        assert splitter.rest() == b""
