"""Sessions belong to the API key that made them, and `user` is not a session id by default.

The real `openai` client against the gateway with session history on; the upstream is a fake
(not an engine) that records the prompt it was sent, which is what tells one tenant's history
from another's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openai
import pytest

from kvwise.gateway.config import SecurityConfig
from tests.fake_upstream import Behaviour, FakeUpstream
from tests.gateway.servers import fake_upstreams, make_config, running_gateway, session_config


def ask(url: str, key: str, text: str, session: str | None = None, **extra: Any) -> None:
    with openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0) as api:
        api.chat.completions.create(
            model="fake", messages=[{"role": "user", "content": text}], max_tokens=2,
            extra_headers={"X-Session-Id": session} if session else None, **extra,
        )  # fmt: skip


def prompt_sent(upstream: FakeUpstream) -> list[str]:
    messages: Any = upstream.last_request["messages"]
    return [m["content"] for m in messages]


def test_one_session_id_under_two_keys_is_two_sessions(tmp_path: Path) -> None:
    with fake_upstreams(Behaviour()) as ups:
        config = make_config(
            [ups[0][0]],
            sessions=session_config(str(tmp_path / "s.sqlite3")),
            security=SecurityConfig(api_keys=("sk-alice", "sk-bob")),
        )
        upstream = ups[0][1]
        with running_gateway(config) as gw:
            ask(gw.url, "sk-alice", "alice's secret plan", session="shared-id")
            ask(gw.url, "sk-bob", "what was said before?", session="shared-id")
            assert prompt_sent(upstream) == ["what was said before?"]  # nothing of alice's
            ask(gw.url, "sk-alice", "go on", session="shared-id")
            assert prompt_sent(upstream) == ["alice's secret plan", "t0 t1 ", "go on"]
            ask(gw.url, "sk-bob", "and now?", session="shared-id")  # bob's own, unextended
            assert prompt_sent(upstream) == ["what was said before?", "t0 t1 ", "and now?"]
            with pytest.raises(openai.AuthenticationError):
                ask(gw.url, "sk-mallory", "let me in", session="shared-id")


def test_user_labels_an_end_user_and_names_a_session_only_when_configured(
    tmp_path: Path,
) -> None:
    with fake_upstreams(Behaviour()) as ups:
        upstream = ups[0][1]
        for from_user in (False, True):
            sessions = session_config(str(tmp_path / f"{from_user}.sqlite3"))
            sessions = type(sessions)(**{**sessions.__dict__, "is_user_session": from_user})
            with running_gateway(make_config([ups[0][0]], sessions=sessions)) as gw:
                ask(gw.url, "k", "first conversation", user="end-user-7")
                ask(gw.url, "k", "another conversation", user="end-user-7")
                merged = ["first conversation", "t0 t1 ", "another conversation"]
                expected = merged if from_user else ["another conversation"]
                assert prompt_sent(upstream) == expected


def test_a_client_resending_and_editing_its_history_is_followed_by_the_store(
    tmp_path: Path,
) -> None:
    def chat(url: str, messages: list[dict[str, str]]) -> str:
        with openai.OpenAI(base_url=f"{url}/v1", api_key="k", max_retries=0) as api:
            reply = api.chat.completions.create(
                model="fake", messages=messages, max_tokens=2,  # type: ignore[arg-type]
                extra_headers={"X-Session-Id": "conv"},
            )  # fmt: skip
        return reply.choices[0].message.content or ""

    def user(text: str) -> dict[str, str]:
        return {"role": "user", "content": text}

    with fake_upstreams(Behaviour()) as ups:
        upstream = ups[0][1]
        config = make_config([ups[0][0]], sessions=session_config(str(tmp_path / "s.sqlite3")))
        with running_gateway(config) as gw:
            history = [user("q1")]
            for question in ("q2", "q3"):  # the usual OpenAI client: the whole history each time
                history += [{"role": "assistant", "content": chat(gw.url, history)}, user(question)]
            chat(gw.url, history)
            assert prompt_sent(upstream) == ["q1", "t0 t1 ", "q2", "t0 t1 ", "q3"]  # no doubles
            edited = [*history[:2], user("q2, edited")]  # the user edits the second question
            chat(gw.url, edited)
            assert prompt_sent(upstream) == ["q1", "t0 t1 ", "q2, edited"]
            chat(gw.url, [user("q4")])  # and the store followed the edit
            assert prompt_sent(upstream) == ["q1", "t0 t1 ", "q2, edited", "t0 t1 ", "q4"]
