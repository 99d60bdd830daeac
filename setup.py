"""Build step: compile the simulator's engine loop with mypyc when a C compiler is present.

Everything else about the package is declared in pyproject.toml. The simulator runs the same
Python source either way; compiled, a simulation takes 1.4-4x less CPU
(benchmarks/sim_speed.py). Without a compiler, or with KVWISE_PURE_PYTHON=1 set at install
time, the package installs as plain Python.

The digests of the compiled sources are recorded next to them (`kvwise/sim/_compiled.json`):
`kvwise.sim` loads the compiled modules only while those sources are unchanged, so an edited
.py file is never shadowed by a stale build (see `kvwise/sim/__init__.py`).
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import shutil
import sys
import sysconfig
from pathlib import Path

from setuptools import setup

SIM = Path("src/kvwise/sim")
RECORD = SIM / "_compiled.json"


def compiled_modules() -> tuple[str, ...]:
    """kvwise.sim.COMPILED_MODULES, read without importing the package into the build."""
    tree = ast.parse((SIM / "__init__.py").read_text())
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and getattr(node.targets[0], "id", "") == "COMPILED_MODULES"
        ):
            return tuple(ast.literal_eval(node.value))
    raise RuntimeError("src/kvwise/sim/__init__.py has no COMPILED_MODULES")


def can_compile() -> bool:
    if os.environ.get("KVWISE_PURE_PYTHON"):
        return False
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    header = Path(sysconfig.get_paths()["include"]) / "Python.h"
    return shutil.which(compiler) is not None and header.exists()


def mypyc_extensions() -> list:
    RECORD.unlink(missing_ok=True)
    if not can_compile():
        print("kvwise: no C compiler or Python headers: the simulator stays plain Python")
        return []
    from mypyc.build import mypycify

    sources = {name: SIM / f"{name}.py" for name in compiled_modules()}
    extensions = mypycify(
        [str(path) for path in sources.values()], group_name="kvwise_sim", opt_level="3"
    )
    for extension in extensions:  # a failed compile leaves plain Python, not a failed install
        extension.optional = True
    digests = {
        name: hashlib.sha256(path.read_bytes()).hexdigest() for name, path in sources.items()
    }
    RECORD.write_text(json.dumps(digests, indent=1) + "\n")
    return extensions


sys.path.insert(0, "src")  # mypyc type-checks the modules it compiles against the package
setup(ext_modules=mypyc_extensions())
