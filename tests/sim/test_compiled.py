"""The simulator compiled with mypyc (setup.py) answers exactly as its Python source does.

A user gets the compiled engine from an install on a machine with a C compiler, and the plain
source elsewhere; both must print the same figures. A developer who edits an engine module must
run the edit, not a stale build of the old source.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

import pytest

import kvwise.sim

SRC = Path(kvwise.sim.__file__).parents[2]

WORKLOADS = [
    # prefix-cache hits, evictions and history trimming across turns
    ["--workload", "agent", "--sessions", "6", "--turns", "12", "--max-model-len", "16384"],
    # open-loop chat: the whole-prompt admission and pure-decode fast paths
    ["--workload", "sharegpt", "--num-prompts", "600", "--request-rate", "12"],
    # an overloaded pool: preemption and recompute
    ["--workload", "random", "--num-prompts", "300", "--max-concurrency", "128",
     "--input-len", "3000", "--output-len", "1500"],
]  # fmt: skip


def simulate_json(args: list[str], *, pure: bool, pythonpath: Path = SRC) -> str:
    env = {k: v for k, v in os.environ.items() if k != "KVWISE_PURE_PYTHON"}
    env["PYTHONPATH"] = str(pythonpath)
    if pure:
        env["KVWISE_PURE_PYTHON"] = "1"
    command = [sys.executable, "-m", "kvwise.cli", "simulate", "Qwen/Qwen2.5-7B-Instruct"]
    done = subprocess.run(
        [*command, "--gpu", "rtx4090", *args, "--json"],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def loaded_from(module: str, *, pure: bool, pythonpath: Path = SRC) -> str:
    env = dict(os.environ, PYTHONPATH=str(pythonpath))
    env.pop("KVWISE_PURE_PYTHON", None)
    if pure:
        env["KVWISE_PURE_PYTHON"] = "1"
    code = f"import {module} as m; print(m.__file__)"
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def is_extension(path: str) -> bool:
    return any(path.endswith(suffix) for suffix in EXTENSION_SUFFIXES)


def test_the_install_compiled_the_engine_modules() -> None:
    if os.environ.get("KVWISE_PURE_PYTHON"):
        pytest.fail("KVWISE_PURE_PYTHON is set: unset it to test the compiled simulator")
    assert kvwise.sim.IS_COMPILED, (
        "the simulator is not compiled, or its sources changed since it was: reinstall with "
        "`.venv/bin/pip install -e .` (needs a C compiler and Python's headers)"
    )
    for name in kvwise.sim.COMPILED_MODULES:
        assert is_extension(loaded_from(f"kvwise.sim.{name}", pure=False)), name


@pytest.mark.parametrize("args", WORKLOADS, ids=["agent", "sharegpt", "preempting"])
def test_compiled_and_source_print_the_same_results(args: list[str]) -> None:
    compiled = simulate_json(args, pure=False)
    source = simulate_json(args, pure=True)
    assert '"completed"' in compiled
    assert compiled == source


def test_an_edited_source_runs_instead_of_its_stale_build(tmp_path: Path) -> None:
    copy = tmp_path / "src"
    shutil.copytree(SRC, copy, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    engine = copy / "kvwise" / "sim" / "block_pool.py"
    assert is_extension(loaded_from("kvwise.sim.block_pool", pure=False, pythonpath=copy))

    engine.write_text(engine.read_text() + "\n# edited after the build\n")

    for name in ("block_pool", "engine", "scheduler"):
        path = loaded_from(f"kvwise.sim.{name}", pure=False, pythonpath=copy)
        assert path == str(copy / "kvwise" / "sim" / f"{name}.py")
