"""`kvwise doctor` as a user runs it: file or stdin, --nvidia-smi, --json, exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kvwise.cli import main
from tests.doctor.logs import error, render, torch_oom, traceback, v1_frames, v1_start
from tests.doctor.records import by_id, pasted

SMI = """\
|   0  NVIDIA GeForce RTX 4090        Off |   00000000:01:00.0  On |                  Off |
|  0%   45C    P8             20W /  450W |   10844MiB /  24564MiB |      0%      Default |
|    0   N/A  N/A      5678      C   python3                                     10240MiB |
"""


def _write(tmp_path: Path, name: str, data: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def test_json_has_the_contract_keys(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = _write(tmp_path, "vllm.log", pasted(by_id("qwen-16-qwen15-7b-gptq-rtx3090-fail")))
    assert main(["doctor", str(log), "--json", "--gpu", "rtx3090"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["kind"] == "max_model_len_exceeds_kv_cache"
    assert data["summary"] and data["evidence"]
    assert data["parsed"]["flags"] == {"quantization": "gptq", "max_model_len": 32768}
    assert data["parsed"]["model"] == "qwen/Qwen1.5-7B-Chat-GPTQ-Int4"
    assert data["fix"]["flags"] == {"max_model_len": 24320}
    assert data["fix"]["command"].startswith("vllm serve qwen/Qwen1.5-7B-Chat-GPTQ-Int4")
    assert data["fix"]["plan"]["starts"] is True  # the planner's JSON contract


def test_nvidia_smi_file_names_the_other_process(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = v1_start() + traceback(
        "core.py:700", v1_frames("determine_available_memory", "profile_run"), torch_oom()
    )
    log = _write(tmp_path, "vllm.log", render(lines))
    smi = _write(tmp_path, "smi.txt", SMI.encode())
    assert main(["doctor", str(log), "--nvidia-smi", str(smi), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["kind"] == "another_process"
    assert "python3 (pid 5678)" in data["summary"]
    assert data["parsed"]["gpu"] == "RTX 4090"


def test_stdin_and_the_human_panel() -> None:
    log = render(
        [*v1_start(), error("core.py:700", "ValueError: No available memory for the cache blocks.")]
    )
    done = subprocess.run(
        [sys.executable, "-m", "kvwise.cli", "doctor", "-", "--gpu", "rtx4090"],
        input=log,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout.decode()
    assert "no_kv_cache_memory" in out and "Evidence" in out and "vllm serve" in out


def test_unknown_still_exits_zero(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = _write(tmp_path, "other.log", b"GET / 200\n" * 10)
    assert main(["doctor", str(log)]) == 0
    assert "unknown" in capsys.readouterr().out


def test_a_missing_file_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor", "/nonexistent/vllm.log"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no such file" in err
    assert main(["doctor", "--bogus-flag"]) == 2


def test_version_hint_fills_in_only_what_the_log_lacks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bare = _write(tmp_path, "bare.log", b"ValueError: No available memory for the cache blocks.")
    assert main(["doctor", str(bare), "--json", "--vllm-version", "0.8.1"]) == 0
    assert json.loads(capsys.readouterr().out)["parsed"]["vllm_version"] == "0.8.1"
    logged = _write(tmp_path, "v.log", render(v1_start("0.10.1.1")))
    assert main(["doctor", str(logged), "--json", "--vllm-version", "0.8.1"]) == 0
    assert json.loads(capsys.readouterr().out)["parsed"]["vllm_version"] == "0.10.1.1"


def test_a_runtime_400_as_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = _write(
        tmp_path,
        "agent.log",
        b"openai.BadRequestError: Error code: 400 - {'message': \"This model's maximum context "
        b"length is 32768 tokens. However, your request has 40000 input tokens. Please reduce "
        b'the length of the input messages."}\n',
    )
    assert main(["doctor", str(log), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["kind"] == "context_length_exceeded"
    assert data["fix"]["command"] is None  # no model named: no `vllm serve` line to print
    assert "--session-history" in data["fix"]["remedies"][0]
