"""The first hour, as a newcomer walks it: every command from the README on a machine without a
GPU, run as a user runs it (a fresh process each), against the demo where a server is needed.

Each step must answer (no traceback), print nothing unfinished (no placeholder, no `None`, no cut
id), and `simulate` and `plan --workload` must tell the same story of the canonical agent case.
The demo start (model conversion, then the engine) takes a minute or two on 2 cores.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.engine_fixture import free_port
from tests.gateway.servers import wait_listening

CANONICAL = ["Qwen/Qwen2.5-7B-Instruct", "--gpu", "rtx4090"]
AGENTS = ["--workload", "agent", "--sessions", "10", "--turns", "30", "--system-prompt", "2000",
          "--tool-output", "800", "--max-tokens", "512"]  # fmt: skip
START_UP_LOG = """\
INFO 03-02 10:00:01 [config.py:1] Using max model len 32768
INFO 03-02 10:00:09 [gpu_model_runner.py:1] Model loading took 14.2487 GiB and 7.1 seconds
INFO 03-02 10:00:20 [gpu_worker.py:1] Available KV cache memory: 0.98 GiB
ValueError: To serve at least one request with the models's max seq len (32768), (1.75 GiB KV \
cache is needed, which is larger than the available KV cache memory (0.98 GiB). Based on the \
available memory, the estimated maximum model length is 18352. Try increasing \
`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.
"""
RUNTIME_LOG = """\
INFO 03-02 11:00:00 [api_server.py:1] vLLM API server version 0.11.0
INFO 03-02 11:00:00 [api_server.py:1] args: model='Qwen/Qwen2.5-7B-Instruct', max_model_len=32768
ERROR 03-02 11:42:17 [serving_chat.py:1] Error in preprocessing prompt inputs: This model's \
maximum context length is 32768 tokens. However, you requested 33012 tokens (32500 in the \
messages, 512 in the completion). Please reduce the length of the messages or completion.
"""
PLACEHOLDER = re.compile(r"<[A-Z_]+>|\bNone\b|\bnan\b|…|\?\?|\s\?\s")


def _kvwise(*args: str, ok: tuple[int, ...] = (0,), timeout_s: float = 300) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "kvwise.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    shown = f"kvwise {' '.join(args)}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    assert done.returncode in ok, shown
    assert "Traceback" not in done.stderr, shown
    unfinished = PLACEHOLDER.findall(done.stdout if "--json" in args else done.stdout + done.stderr)
    assert not unfinished, f"{unfinished} in {shown}"
    return done.stdout


def test_plan_simulate_doctor_and_the_catalogs_answer_as_the_readme_says(tmp_path: Path) -> None:
    assert "vLLM starts" in _kvwise("plan", *CANONICAL)
    _kvwise("plan", *CANONICAL, "--explain")
    planned = json.loads(_kvwise("plan", *CANONICAL, *AGENTS, "--json"))["baseline"]
    simulated = json.loads(_kvwise("simulate", *CANONICAL, *AGENTS, "--json"))
    # the same workload on the same deployment: the same turns served and the same preemptions
    assert simulated["rejected"] == planned["rejected"] == 0
    assert simulated["num_preemptions"] == planned["num_preemptions"]
    _kvwise("simulate", *CANONICAL, *AGENTS, "--compare", "--max-model-len 16384")
    for name, text in (("startup.log", START_UP_LOG), ("runtime.log", RUNTIME_LOG)):
        (tmp_path / name).write_text(text)
        diagnosis = json.loads(_kvwise("doctor", str(tmp_path / name), "--json", ok=(0, 1)))
        assert diagnosis["kind"] != "unknown", diagnosis
    assert "Qwen/Qwen2.5-7B-Instruct-AWQ" in _kvwise("models").split()
    assert "rtx4090" in _kvwise("gpus").split()


@pytest.mark.engine
def test_the_demo_is_benchmarked_with_bench_defaults_and_calibrated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KVWISE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    port = free_port()
    command = [sys.executable, "-m", "kvwise.cli", "serve", "--demo", "--port", str(port),
               "--json", "--log-dir", str(tmp_path / "logs"),
               "--session-store", str(tmp_path / "s.sqlite3")]  # fmt: skip
    with (tmp_path / "stderr.txt").open("w") as stderr:
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=stderr, text=True)
    assert proc.stdout is not None
    try:
        lines: list[str] = []
        while not lines or lines[-1] != "}":  # the limits it enforces, printed once it serves
            line = proc.stdout.readline()
            assert line, (tmp_path / "stderr.txt").read_text()
            lines.append(line.rstrip("\n"))
        url = f"http://127.0.0.1:{port}"
        assert wait_listening(url)
        results = tmp_path / "r.json"
        # the defaults (2,000-token system prompt, 30 turns) outgrow the demo's 2,048 tokens:
        # bench fits them and every request is served
        _kvwise("bench", url, "--workload", "agent", "--sessions", "2", "--think-time-s", "0",
                "--no-progress", "--out", str(results), timeout_s=600)  # fmt: skip
        (run,) = json.loads(results.read_text())["runs"]
        assert run["metrics"]["failed"] == 0 and run["metrics"]["completed"] > 0
        # calibrating needs the card the numbers are for; the demo has none, and says so in a line
        _kvwise("calibrate", str(results), "--dry-run", ok=(0, 2))
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
        proc.stdout.close()
