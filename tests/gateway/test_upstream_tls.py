"""https:// upstreams: certificates verified (--upstream-ca, SSL_CERT_FILE), connections kept
alive, an untrusted certificate refused in one line.

The upstream is a FAKE engine (a few lines of ASGI served by uvicorn over real TLS, with
certificates from `trustme`): these tests measure the gateway's transport, not an engine's
answers. The client in front of the gateway is the real `openai` package.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import openai
import pytest
import trustme
import uvicorn

from tests.engine_fixture import free_port
from tests.gateway.servers import make_config, running_gateway

MODEL = "fake"
WORDS = ["Hello", " over", " TLS"]


class TlsEngine:
    """Answers /health, /metrics, /v1/models and chat completions; notes each request's client
    port, so a test can tell how many connections the gateway opened."""

    def __init__(self) -> None:
        self.client_ports: list[int] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        self.client_ports.append(scope["client"][1])
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        path = scope["path"]
        if path == "/v1/chat/completions":
            request = json.loads(body)
            if request.get("stream"):
                await self._stream(send)
                return
            reply = {"id": "c1", "object": "chat.completion", "model": MODEL,
                     "choices": [{"index": 0, "finish_reason": "stop",
                                  "message": {"role": "assistant", "content": "".join(WORDS)}}],
                     "usage": {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6}}  # fmt: skip
            await _send(send, 200, json.dumps(reply).encode(), b"application/json")
        elif path == "/v1/models":
            models = {"object": "list", "data": [{"id": MODEL, "max_model_len": 2048}]}
            await _send(send, 200, json.dumps(models).encode(), b"application/json")
        else:  # /health, /metrics: empty and fine
            await _send(send, 200, b"", b"text/plain")

    async def _stream(self, send: Any) -> None:
        headers = [(b"content-type", b"text/event-stream")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        for word in WORDS:
            chunk = {"id": "c1", "object": "chat.completion.chunk", "model": MODEL,
                     "choices": [{"index": 0, "delta": {"content": word}, "finish_reason": None}]}  # fmt: skip
            event = f"data: {json.dumps(chunk)}\n\n".encode()
            await send({"type": "http.response.body", "body": event, "more_body": True})
        await send({"type": "http.response.body", "body": b"data: [DONE]\n\n"})


async def _send(send: Any, status: int, body: bytes, content_type: bytes) -> None:
    headers = [(b"content-type", content_type)]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[trustme.CA, Path]]:
    folder = tmp_path_factory.mktemp("tls")
    authority = trustme.CA()
    ca_file = folder / "ca.pem"
    authority.cert_pem.write_to_path(str(ca_file))
    yield authority, ca_file


@contextmanager
def tls_engine(authority: trustme.CA, folder: Path) -> Iterator[tuple[str, TlsEngine]]:
    cert = authority.issue_cert("127.0.0.1", "localhost")
    pem = folder / "engine.pem"
    cert.private_key_and_cert_chain_pem.write_to_path(str(pem))
    engine, port = TlsEngine(), free_port()
    config = uvicorn.Config(engine, host="127.0.0.1", port=port, log_level="warning",
                            ssl_certfile=str(pem), ssl_keyfile=str(pem))  # fmt: skip
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "TLS engine did not start"
        time.sleep(0.02)
    try:
        yield f"https://127.0.0.1:{port}", engine
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def ask(base_url: str) -> tuple[str, str]:
    """A streamed and a whole answer through the gateway, with the real openai client."""
    client = openai.OpenAI(base_url=f"{base_url}/v1", api_key="none", max_retries=0)
    messages: Any = [{"role": "user", "content": "hi"}]
    stream = client.chat.completions.create(model=MODEL, messages=messages, stream=True)
    streamed = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    whole = client.chat.completions.create(model=MODEL, messages=messages)
    return streamed, whole.choices[0].message.content or ""


def test_an_https_upstream_verified_against_upstream_ca_serves_the_openai_client(
    ca: tuple[trustme.CA, Path], tmp_path: Path
) -> None:
    authority, ca_file = ca
    with tls_engine(authority, tmp_path) as (url, engine):
        with running_gateway(make_config([url], upstream_ca=str(ca_file))) as gw:
            assert ask(gw.url) == ("Hello over TLS", "Hello over TLS")
            models = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="none").models.list()
            assert [m.id for m in models.data] == [MODEL]
            num_before = len(engine.client_ports)
            for _ in range(5):
                ask(gw.url)
        # ten completions one after another: one kept-alive TLS connection carried them all
        completions = engine.client_ports[num_before:]
        assert len(completions) >= 10
        assert len(set(completions)) <= 2  # the health probes may share it, or hold a second


def test_ssl_cert_file_is_the_trust_store_when_no_ca_is_given(
    ca: tuple[trustme.CA, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    authority, ca_file = ca
    monkeypatch.setenv("SSL_CERT_FILE", str(ca_file))
    with tls_engine(authority, tmp_path) as (url, _), running_gateway(make_config([url])) as gw:
        assert ask(gw.url) == ("Hello over TLS", "Hello over TLS")


def test_a_self_signed_upstream_without_its_ca_is_refused_in_one_line(
    ca: tuple[trustme.CA, Path], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    authority, _ = ca
    with tls_engine(authority, tmp_path) as (url, engine):
        # at start, reading the engine's limits: one line, no traceback, nothing served
        done = subprocess.run(
            [sys.executable, "-m", "kvwise.cli", "serve", "--upstream", url, "--port", "1"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert done.returncode != 0
        assert "Traceback" not in done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1, done.stderr
        assert "not trusted" in lines[0] and "--upstream-ca" in lines[0], lines[0]
        # with the limits given, the gateway runs; the replica is down and says why, and no
        # request body ever left for the untrusted server
        caplog.set_level(logging.WARNING, logger="kvwise.gateway")
        with running_gateway(make_config([url])) as gw:
            client = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="none", max_retries=0)
            with pytest.raises(openai.APIStatusError) as refused:
                client.chat.completions.create(
                    model=MODEL, messages=[{"role": "user", "content": "hi"}]
                )
            assert refused.value.status_code in (502, 503)
        down = [r.getMessage() for r in caplog.records if "marked down" in r.getMessage()]
        assert down and "not trusted" in down[0] and "--upstream-ca" in down[0], down
        assert engine.client_ports == []  # no request got past the handshake
