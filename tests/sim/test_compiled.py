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


def run_python(args: list[str], *, pure: bool, pythonpath: Path = SRC) -> str:
    """stdout of `python ARGS` on the package under `pythonpath`, compiled engine or source."""
    env = {k: v for k, v in os.environ.items() if k != "KVWISE_PURE_PYTHON"}
    env["PYTHONPATH"] = str(pythonpath)
    if pure:
        env["KVWISE_PURE_PYTHON"] = "1"
    done = subprocess.run(
        [sys.executable, *args], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def simulate_json(args: list[str], *, pure: bool) -> str:
    command = ["-m", "kvwise.cli", "simulate", "Qwen/Qwen2.5-7B-Instruct", "--gpu", "rtx4090"]
    return run_python([*command, *args, "--json"], pure=pure)


def loaded_from(modules: list[str], *, pythonpath: Path = SRC) -> list[str]:
    """The files these modules load from, in a fresh process without KVWISE_PURE_PYTHON."""
    code = (
        "import importlib, sys; print(*(importlib.import_module(m).__file__ for m in sys.argv[1:]))"
    )
    return run_python(["-c", code, *modules], pure=False, pythonpath=pythonpath).split()


def is_extension(path: str) -> bool:
    return any(path.endswith(suffix) for suffix in EXTENSION_SUFFIXES)


def test_the_install_compiled_the_engine_modules() -> None:
    if os.environ.get("KVWISE_PURE_PYTHON"):
        pytest.fail("KVWISE_PURE_PYTHON is set: unset it to test the compiled simulator")
    assert kvwise.sim.IS_COMPILED, (
        "the simulator is not compiled, or its sources changed since it was: reinstall with "
        "`.venv/bin/pip install -e .` (needs a C compiler and Python's headers)"
    )
    modules = [f"kvwise.sim.{name}" for name in kvwise.sim.COMPILED_MODULES]
    files = loaded_from(modules)
    assert len(files) == len(modules)
    assert all(is_extension(path) for path in files), files


@pytest.mark.parametrize("args", WORKLOADS, ids=["agent", "sharegpt", "preempting"])
def test_compiled_and_source_print_the_same_results(args: list[str]) -> None:
    compiled = simulate_json(args, pure=False)
    source = simulate_json(args, pure=True)
    assert '"completed"' in compiled
    assert compiled == source


def test_an_edited_source_runs_instead_of_its_stale_build(tmp_path: Path) -> None:
    copy = tmp_path / "src"
    shutil.copytree(SRC, copy, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    edited = copy / "kvwise" / "sim" / "block_pool.py"
    names = ["block_pool", "engine", "scheduler"]
    modules = [f"kvwise.sim.{name}" for name in names]
    assert all(is_extension(path) for path in loaded_from(modules, pythonpath=copy))

    edited.write_text(edited.read_text() + "\n# edited after the build\n")

    sources = [str(copy / "kvwise" / "sim" / f"{name}.py") for name in names]
    assert loaded_from(modules, pythonpath=copy) == sources
