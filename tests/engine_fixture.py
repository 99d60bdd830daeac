"""Real servers for the end-to-end tests: the vLLM CPU engine and redis-server.

`tests/conftest.py` turns these into session fixtures, so one engine serves the whole test run
(it takes 45-60 s to start). Other code (benchmarks, the bench helper's tests) can use
`EngineProcess` directly. Everything binds 127.0.0.1 on a free port, logs to a file, and is
stopped by its PID.

The engine's python: $KVWISE_VLLM_PYTHON, else `.venv-vllm/bin/python` in the repository root
(`scripts/test.sh` creates it). The model: $KVWISE_TINY_MODEL, else `build/tiny-qwen2`
(built by `scripts/make_tiny_qwen2.py`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

REPO_ROOT = Path(__file__).resolve().parent.parent
SERVED_MODEL_NAME = "tiny"
MAX_MODEL_LEN = 2048
KV_CACHE_MEMORY_BYTES = 256 * 2**20  # 131,072 tokens of the tiny model (2,048 B/token)
ENGINE_START_TIMEOUT_S = 300.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def engine_python() -> Path:
    return Path(os.environ.get("KVWISE_VLLM_PYTHON", REPO_ROOT / ".venv-vllm" / "bin" / "python"))


def engine_vllm_version() -> str:
    """The vLLM release the engine's Python has installed ("" when it cannot be read)."""
    probe = [str(engine_python()), "-c", "import vllm; print(vllm.__version__)"]
    done = subprocess.run(probe, capture_output=True, text=True, check=False)
    return done.stdout.strip()


def tiny_model_dir() -> Path:
    return Path(os.environ.get("KVWISE_TINY_MODEL", REPO_ROOT / "build" / "tiny-qwen2"))


def _wait_ready(url: str, proc: subprocess.Popen[bytes], log_path: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log_path.read_text(errors="replace")[-3000:]
            raise RuntimeError(
                f"server exited with {proc.returncode} before ready; log tail:\n{tail}"
            )
        try:
            if httpx.get(url, timeout=2.0).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"server not ready at {url} after {timeout_s:.0f} s; log: {log_path}")


def _stop(proc: subprocess.Popen[bytes], timeout_s: float = 15.0) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=timeout_s)


@dataclass
class EngineProcess:
    """One `vllm.entrypoints.openai.api_server` serving the tiny model on CPU."""

    log_path: Path
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        return [
            str(engine_python()), "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(tiny_model_dir()), "--served-model-name", SERVED_MODEL_NAME,
            "--dtype", "float32", "--enforce-eager",
            "--max-model-len", str(MAX_MODEL_LEN),
            "--kv-cache-memory-bytes", str(KV_CACHE_MEMORY_BYTES),
            "--host", "127.0.0.1", "--port", str(self.port),
        ]  # fmt: skip

    def start(self, timeout_s: float = ENGINE_START_TIMEOUT_S) -> EngineProcess:
        if not engine_python().exists():
            raise RuntimeError(f"no vLLM engine python at {engine_python()}: run scripts/test.sh")
        if not (tiny_model_dir() / "config.json").exists():
            raise RuntimeError(f"no tiny model at {tiny_model_dir()}: run scripts/test.sh")
        self.port = self.port or free_port()
        log = self.log_path.open("wb")
        env = dict(os.environ, VLLM_LOGGING_LEVEL="INFO", HF_HUB_OFFLINE="1")
        self.proc = subprocess.Popen(
            self.command(), stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        log.close()
        _wait_ready(f"{self.url}/v1/models", self.proc, self.log_path, timeout_s)
        return self

    def engine_core_pids(self) -> list[int]:
        """The server's children (EngineCore and helpers): its process group, less the leader."""
        assert self.proc is not None
        pids = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            with contextlib.suppress(OSError):
                # after the ")" that closes the command name: state, ppid, pgrp, ...
                pgrp = int(stat.read_text().rsplit(")", 1)[1].split()[2])
                pid = int(stat.parent.name)
                if pgrp == self.proc.pid and pid != self.proc.pid:
                    pids.append(pid)
        assert pids, "the engine server has no child processes to pause"
        return pids

    def pause(self) -> list[int]:
        """Freeze the engine core (SIGSTOP) while the HTTP server keeps accepting requests.

        The tiny model generates thousands of tokens a second, so a test that needs requests to
        stay in flight (holding the gateway's budget, queued behind it, on a replica about to be
        killed) cannot rely on them being slow: while paused they take no step at all.
        """
        pids = self.engine_core_pids()
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        return pids

    @staticmethod
    def resume(pids: list[int]) -> None:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)

    @contextlib.contextmanager
    def paused(self) -> Iterator[PausedEngine]:
        """`pause()` for the block, resumed however it ends; `step()` lets it run a moment."""
        paused = PausedEngine(self.pause())
        try:
            yield paused
        finally:
            paused.close()
            self.resume(paused.pids)

    def kill(self) -> None:
        """SIGKILL the server and its engine children (its own process group): a crash."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=15)

    def stop(self) -> None:
        if self.proc is not None:
            _stop(self.proc)
            with contextlib.suppress(ProcessLookupError):  # its engine children, to be sure
                os.killpg(self.proc.pid, signal.SIGKILL)


# The stepping process: SIGCONT, sleep, SIGSTOP for each line read, no process started in
# between. It prints how long each step held the engine running.
_STEPPER = """
import os, signal, sys, time
try:  # woken on time however busy the engine keeps the CPUs (needs root or CAP_SYS_NICE)
    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
except OSError:
    pass
pids = [int(arg) for arg in sys.argv[1:]]
def send(sig):
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
for line in sys.stdin:
    started = time.monotonic()
    send(signal.SIGCONT)
    time.sleep(float(line))
    send(signal.SIGSTOP)
    print(time.monotonic() - started, flush=True)
"""


class PausedEngine:
    """A paused engine, run a moment at a time by `step()`."""

    def __init__(self, pids: list[int]) -> None:
        self.pids = pids
        self.longest_step_s = 0.0  # SIGCONT to SIGSTOP, the longest so far (for failure messages)
        self._stepper: subprocess.Popen[str] | None = None

    def step(self, run_s: float = 0.02) -> None:
        """Let the engine run for about `run_s`: a few tokens, not a whole reply.

        A client sees a token only after the engine, the API server, the gateway and its own
        event loop have all had the CPU; on a loaded 2-core machine that lag can exceed the
        time a tiny model needs for a 200-token reply. Stepping bounds what the engine does
        while the test waits for the client to see it.

        The SIGCONT-sleep-SIGSTOP runs in a process of its own, started once, with a real-time
        scheduling policy. Run from this process, the SIGSTOP waited for the GIL that the
        in-process gateway and client hold. Run by a shell, it came seconds late: while the vLLM
        CPU engine runs, a process of normal priority on this 2-core VM can wait seconds for the
        CPU (a loop starting `/bin/true` every 20 ms saw stalls of 1.8, 2.1 and 6.7 s during one
        7 s reply), so the engine generated a whole 1,500-token reply in one 20 ms step.
        """
        stepper = self._stepper or self._start_stepper()
        assert stepper.stdin is not None and stepper.stdout is not None
        stepper.stdin.write(f"{run_s}\n")
        stepper.stdin.flush()
        self.longest_step_s = max(self.longest_step_s, float(stepper.stdout.readline()))

    def _start_stepper(self) -> subprocess.Popen[str]:
        command = [sys.executable, "-c", _STEPPER, *map(str, self.pids)]
        self._stepper = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            start_new_session=True,
        )  # fmt: skip
        return self._stepper

    def close(self) -> None:
        """Stop the stepping process (the engine stays as it is: paused, or gone)."""
        if self._stepper is not None:
            self._stepper.kill()
            self._stepper.wait(timeout=10)
            assert self._stepper.stdin is not None and self._stepper.stdout is not None
            self._stepper.stdin.close()
            self._stepper.stdout.close()
            self._stepper = None

    def step_until(self, is_done: Callable[[], bool], timeout_s: float = 60.0) -> None:
        """Step, then give the client 0.1 s to see the result, until `is_done()`."""
        deadline = time.monotonic() + timeout_s
        while not is_done():
            if time.monotonic() > deadline:
                raise TimeoutError(f"not done after {timeout_s:.0f} s of stepping the engine")
            self.step()
            time.sleep(0.1)


@dataclass
class RedisProcess:
    log_path: Path
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisProcess:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed: run scripts/test.sh")
        self.port = self.port or free_port()
        args = [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                "--appendonly", "no", "--dir", str(self.log_path.parent)]  # fmt: skip
        log = self.log_path.open("wb")
        self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(16).startswith(b"+PONG"):
                        return self
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"redis-server not ready on port {self.port}; log: {self.log_path}")

    def stop(self) -> None:
        if self.proc is not None:
            _stop(self.proc)
