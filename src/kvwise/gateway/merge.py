"""Which of a client's messages are new to a stored session, and what the store keeps.

Clients of a session gateway come in two kinds: agents that send only their new turn, and
OpenAI-style clients that resend the whole conversation every time (and may edit or regenerate
part of it). Both are recognised by lining up what the client sent with what is stored:

- nothing lines up: the client sent only new messages; they are appended;
- the stored history is found whole in what was sent (from its start, or from where the store's
  caps cut it): only the messages after it are new;
- what was sent lines up with the stored history and then departs from it (an edited message, a
  regenerated reply, a conversation taken back a few turns): the client's messages win; the
  store keeps the part both agree on and drops the rest.

A line-up counts when at least two messages agree, or when it reaches the end of the stored
history: a single message that happens to repeat an old one ("yes", "continue") is new, not a
rewind, so an agent's history is never cut by an echo.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvwise.gateway.history import Message

MIN_AGREEING_MESSAGES = 2  # fewer, and a line-up that departs could be a repeated short message


@dataclass(frozen=True)
class Merge:
    num_kept: int  # stored messages kept, oldest first (all of them unless the client diverged)
    new_messages: list[Message]  # the client's messages after those

    def history(self, stored: list[Message]) -> list[Message]:
        return stored[: self.num_kept] + self.new_messages


def same_message(a: Message, b: Message) -> bool:
    keys = ("role", "content", "tool_call_id", "name")
    same = all((a.get(k) or None) == (b.get(k) or None) for k in keys)  # "" and null alike
    return same and _call_ids(a) == _call_ids(b)


def _call_ids(message: Message) -> list[object]:
    """Tool calls by id only: clients send them back with fields of their own (`index`...)."""
    calls = message.get("tool_calls")
    if not isinstance(calls, list):
        return []
    return [call.get("id") if isinstance(call, dict) else call for call in calls]


def _agreeing(stored: list[Message], sent: list[Message], at_stored: int, at_sent: int) -> int:
    """How many messages agree from stored[at_stored] and sent[at_sent] on."""
    n = 0
    while (
        at_stored + n < len(stored)
        and at_sent + n < len(sent)
        and same_message(stored[at_stored + n], sent[at_sent + n])
    ):
        n += 1
    return n


def _line_ups(stored: list[Message], sent: list[Message]) -> list[tuple[int, int]]:
    """(stored index, sent index) pairs where one of the two lists starts: the client resent
    the conversation from its start (its oldest messages perhaps cut by the store's caps), or
    from a later point (the client trimmed its own copy)."""
    pairs = [(0, i) for i, m in enumerate(sent) if same_message(stored[0], m)]
    pairs += [(i, 0) for i, m in enumerate(stored) if i > 0 and same_message(m, sent[0])]
    return pairs


def merge(stored: list[Message], sent: list[Message]) -> Merge:
    if not stored or not sent:
        return Merge(len(stored), list(sent))
    best: tuple[int, int, int] | None = None  # (agreeing, stored index, sent index)
    for at_stored, at_sent in _line_ups(stored, sent):
        n = _agreeing(stored, sent, at_stored, at_sent)
        reaches_end = at_stored + n == len(stored)
        if (n >= MIN_AGREEING_MESSAGES or reaches_end) and (best is None or n > best[0]):
            best = (n, at_stored, at_sent)
    if best is None:
        return Merge(len(stored), list(sent))  # only new messages
    n, at_stored, at_sent = best
    return Merge(at_stored + n, sent[at_sent + n :])
