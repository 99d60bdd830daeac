"""`kvwise serve` as a user runs it: a subprocess, limits printed, requests served, clean stop."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from kvwise.cli import main
from kvwise.gateway.demo import DEMO_MODEL_NAME, demo_command, ensure_model
from tests.engine_fixture import free_port
from tests.fake_upstream import Behaviour
from tests.gateway.servers import fake_upstreams, wait_listening


@contextmanager
def kvwise_serve(args: list[str], tmp_path: Path) -> Iterator[tuple[str, dict[str, object]]]:
    port = free_port()
    command = [sys.executable, "-m", "kvwise.cli", "serve", "--port", str(port), "--json",
               "--session-store", str(tmp_path / "s.sqlite3"), *args]  # fmt: skip
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        lines = []
        while not lines or lines[-1] != "}":
            line = proc.stdout.readline()
            assert line, proc.stderr.read() if proc.stderr else "no output"
            lines.append(line.rstrip("\n"))
        url = f"http://127.0.0.1:{port}"
        assert wait_listening(url), f"nothing listening on {url}"
        yield url, json.loads("\n".join(lines))
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


def test_attached_to_an_upstream_it_learns_the_limits_from_the_engine(tmp_path: Path) -> None:
    with fake_upstreams(Behaviour(max_model_len=3000, pool_tokens=48_000)) as ups:
        upstream = ups[0][0]
        with kvwise_serve(["--upstream", upstream], tmp_path) as (url, limits):
            assert limits["max_model_len"] == 3000
            assert limits["replicas"] == [
                {"name": "r0", "url": upstream, "kv_budget_tokens": 48_000}
            ]
            assert "/metrics" in str(limits["kv_budget_source"])
            assert limits["max_num_seqs"] is None  # the engine does not report it: said so
            assert "pass --max-num-seqs" in str(limits["max_num_seqs_source"])
            body = {
                "model": "fake",
                "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 3,
            }
            assert httpx.post(f"{url}/v1/chat/completions", json=body).status_code == 200


def test_max_num_seqs_caps_the_sequences_running_on_each_replica(tmp_path: Path) -> None:
    with fake_upstreams(Behaviour(ttft_s=0.3)) as ups:
        args = ["--upstream", ups[0][0], "--max-num-seqs", "2"]
        with kvwise_serve(args, tmp_path) as (url, limits):
            assert (limits["max_num_seqs"], limits["max_num_seqs_source"]) == (2, "--max-num-seqs")
            body = {
                "model": "fake",
                "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 2,
            }

            async def burst() -> list[int]:
                async with httpx.AsyncClient(base_url=url, timeout=30) as api:
                    replies = await asyncio.gather(
                        *(api.post("/v1/chat/completions", json=body) for _ in range(6))
                    )
                return [r.status_code for r in replies]

            assert asyncio.run(burst()) == [200] * 6
        assert ups[0][1].peak_running == 2  # the engine never saw more than its cap


def test_launched_replicas_serve_and_stop_with_the_gateway(tmp_path: Path) -> None:
    engine = f"{sys.executable} -m tests.fake_upstream --model {{model}}"
    args = ["tiny", "--launch", "--replicas", "2", "--engine-command", engine,
            "--log-dir", str(tmp_path / "logs"),
            "--kv-budget-tokens", "5000", "--max-model-len", "1024", "--admin-key", "sk-op"]  # fmt: skip
    with kvwise_serve(args, tmp_path) as (url, limits):
        replicas = limits["replicas"]
        assert isinstance(replicas, list) and len(replicas) == 2
        assert httpx.get(f"{url}/health").json() == {"status": "ok"}  # no addresses to anyone
        health = httpx.get(f"{url}/health", headers={"authorization": "Bearer sk-op"}).json()
        assert [r["healthy"] for r in health["replicas"].values()] == [True, True]
        replica_urls = [r["url"] for r in replicas]
    for replica_url in replica_urls:  # the gateway took its replicas down with it
        with pytest.raises(httpx.TransportError):
            httpx.get(f"{replica_url}/health")


def test_user_mistakes_are_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve"]) == 2
    assert "give --upstream URL" in capsys.readouterr().err
    assert main(["serve", "--upstream", "http://127.0.0.1:1", "--max-queue", "0"]) == 2
    assert "--max-queue must be positive" in capsys.readouterr().err
    assert main(["serve", "--upstream", "ftp://engine.internal"]) == 2
    assert "give an http:// or https:// URL" in capsys.readouterr().err
    assert main(["serve", "--upstream", "https://engine.internal", "--upstream-ca", "no.pem"]) == 2
    assert (
        capsys.readouterr().err.strip() == "kvwise serve: error: --upstream-ca no.pem: no such file"
    )


def test_demo_uses_the_cached_conversion_and_the_cpu_engine_flags(tmp_path: Path) -> None:
    cached = tmp_path / DEMO_MODEL_NAME
    cached.mkdir()
    (cached / "model.safetensors").write_bytes(b"")
    assert ensure_model(Path("/nonexistent/python"), cached) == cached  # no conversion, no install
    command = demo_command(Path("/venv/bin/python"), cached)
    assert command.startswith("/venv/bin/python -m vllm.entrypoints.openai.api_server")
    for flag in (
        "--dtype float32",
        "--enforce-eager",
        "--kv-cache-memory-bytes 536870912",
        "--max-model-len 2048",
    ):
        assert flag in command
    assert os.path.isdir(cached)


def test_a_model_and_a_gpu_make_the_plan_the_budget(tmp_path: Path) -> None:
    from kvwise.core.catalog import load_model
    from kvwise.core.flags import VllmFlags
    from kvwise.core.gpus import find_gpu
    from kvwise.planner import plan

    planned = plan(
        load_model("Qwen/Qwen2.5-7B-Instruct"), find_gpu("rtx4090"), VllmFlags(max_model_len=16384)
    )
    with fake_upstreams(Behaviour()) as ups:
        args = [
            "Qwen/Qwen2.5-7B-Instruct",
            "--gpu",
            "rtx4090",
            "--max-model-len",
            "16384",
            "--upstream",
            ups[0][0],
        ]
        with kvwise_serve(args, tmp_path) as (_, limits):
            assert limits["kv_budget_source"] == "the plan"
            assert limits["replicas"] == [
                {"name": "r0", "url": ups[0][0], "kv_budget_tokens": planned.kv.tokens}
            ]
            assert "Qwen/Qwen2.5-7B-Instruct on RTX 4090" in str(limits["plan"])


BLOCK_SERVE_EXTRA = """
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {"starlette", "uvicorn", "httpx", "redis", "tokenizers"}:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, Block())
from kvwise.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize("command", [["serve", "--upstream", "http://127.0.0.1:9"], ["bench"]])
def test_without_the_serve_extra_one_line_says_what_to_install(command: list[str]) -> None:
    """As after a plain `pip install -e .`: the extra's modules cannot be imported."""
    done = subprocess.run(
        [sys.executable, "-c", BLOCK_SERVE_EXTRA, *command],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "pip install 'kvwise[serve]'" in lines[0], done.stderr
