"""The replica launcher, with the fake upstream standing in for `vllm serve` (same flags
interface for what the launcher uses: --host, --port, /health)."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import httpx
import pytest

from kvwise.cli import main
from kvwise.core.flags import VllmFlags
from kvwise.gateway.launcher import Supervisor, flag_args, plan_launches

FAKE_ENGINE = f"{sys.executable} -m tests.fake_upstream --model {{model}}"


def test_flags_are_spelled_as_vllm_spells_them() -> None:
    flags = VllmFlags(
        max_model_len=-1,
        enforce_eager=True,
        enable_prefix_caching=False,
        kv_cache_memory_bytes=2**30,
    )
    assert flag_args(flags) == [
        "--max-model-len", "auto", "--enforce-eager", "--kv-cache-memory-bytes", "1073741824",
        "--no-enable-prefix-caching",
    ]  # fmt: skip


def test_each_replica_gets_its_port_and_its_tensor_parallel_group(tmp_path: Path) -> None:
    flags = VllmFlags(tensor_parallel_size=2, max_model_len=8192)
    launches = plan_launches(
        "Qwen/Qwen2.5-7B-Instruct", flags, 2, "vllm serve {model}", tmp_path, gpu_ids=[0, 1, 2, 3]
    )
    assert [dict(launch.env)["CUDA_VISIBLE_DEVICES"] for launch in launches] == ["0,1", "2,3"]
    assert launches[0].port != launches[1].port
    assert launches[1].command == (
        "vllm", "serve", "Qwen/Qwen2.5-7B-Instruct",
        "--host", "127.0.0.1", "--port", str(launches[1].port),
        "--max-model-len", "8192", "--tensor-parallel-size", "2",
    )  # fmt: skip
    assert launches[1].log_path == tmp_path / "r1.log"


def test_a_crashed_replica_is_restarted_after_a_growing_back_off(tmp_path: Path) -> None:
    supervisor = Supervisor(plan_launches("tiny", VllmFlags(), 2, FAKE_ENGINE, tmp_path))
    supervisor.start()
    try:
        supervisor.wait_ready(timeout_s=30)
        run = supervisor.running["r0"]
        os.kill(run.proc.pid, signal.SIGKILL)
        run.proc.wait()
        supervisor.tend(run, now_s=100.0)  # noticed: restart due in 1 s
        assert run.num_restarts == 0 and run.restart_at_s == 101.0
        supervisor.tend(run, now_s=101.0)
        assert (run.num_restarts, run.backoff_s) == (1, 2.0)
        supervisor.wait_ready(timeout_s=30)  # same port, healthy again
        assert httpx.get(f"{run.launch.url}/health").status_code == 200
        assert "fake upstream on" in run.launch.log_path.read_text()
    finally:
        supervisor.stop()
    assert all(run.proc.poll() is not None for run in supervisor.running.values())


def test_serve_launch_without_vllm_on_path_says_so_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """vLLM often lives in its own venv or a container: the command `plan` prints must not end
    in a traceback there."""
    monkeypatch.setenv("PATH", str(tmp_path))  # no `vllm` anywhere
    argv = ["serve", "Qwen/Qwen2.5-7B-Instruct", "--gpu", "rtx4090", "--launch",
            "--port", "0", "--log-dir", str(tmp_path / "logs")]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]  # after the progress line, the error, in one line
    assert last.startswith("kvwise serve: error:") and "not on PATH" in last
    assert "--engine-command" in last and "Traceback" not in err
