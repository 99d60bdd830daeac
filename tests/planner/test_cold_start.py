"""What `kvwise plan` loads from a cold process: only the modules its answer needs.

`kvwise plan` must answer fast from a cold process (benchmarks/plan_latency.py times it against
kvfit and llmfit), and most of a cold start is importing. Modules for other models (MoE, hybrid,
vision), other flags (LoRA), the other engine (SGLang) and the other commands are imported where
they are used; these tests fail when a change brings one of them back into a plain plan. They
check which modules a real `kvwise plan` process ends with, not its timing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from kvwise.core.command_parser import CommandParser

# the process plans through the CLI as a user's would, then reports the modules it ended with
_PROBE = """
import contextlib, io, json, sys
from kvwise.cli import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    code = main(sys.argv[1:])
print(json.dumps({"code": code, "stdout": out.getvalue(), "modules": sorted(sys.modules)}))
"""

# modules no plan of a dense text model needs, by why they exist
_OTHER_MODELS = (
    "kvwise.core.models_moe",  # MoE readers
    "kvwise.core.models_hybrid",  # hybrid / linear-attention readers
    "kvwise.core.vision",  # vision towers
    "kvwise.core.vision_qwen25",
    "kvwise.planner.vision_profile",  # the encoder's profile pass
    "kvwise.planner.moe_memory",  # fused-MoE buffers
    "kvwise.planner.kv_mamba",  # mamba state pages
)
_OTHER_FLAGS = ("kvwise.planner.lora",)
_SGLANG = ("kvwise.planner.sglang",)
_OTHER_COMMANDS = (
    "kvwise.advisor",  # --workload
    "kvwise.sim",
    "kvwise.gateway",
    "kvwise.bench",
    "kvwise.doctor",
    "kvwise.deploy",
    "kvwise.top",
    "kvwise.live",
    "kvwise.core.hub",  # a catalog model is planned offline
    "kvwise.core.gpu_names",  # a catalog GPU key needs no driver-name index
    "kvwise.core.safetensors_meta",  # a catalog model has no local checkpoint to read
)
# third-party and standard-library packages a JSON plan has no use for (shutil: argparse's
# terminal width, which only help and usage text need; see core/command_parser.py)
_HEAVY = ("rich", "pydantic", "yaml", "numpy", "httpx", "starlette", "http.client", "ssl", "shutil")


def _plan(*args: str) -> tuple[dict, set[str]]:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, "plan", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["code"] == 0, report["stdout"]
    return json.loads(report["stdout"]), set(report["modules"])


def _loaded(modules: set[str], names: tuple[str, ...]) -> list[str]:
    """Those of `names` (or a submodule of one) among the imported `modules`."""
    return sorted(m for m in modules for n in names if m == n or m.startswith(n + "."))


def test_a_dense_text_plan_loads_no_module_for_other_models_engines_or_commands() -> None:
    result, modules = _plan("Qwen/Qwen2.5-7B-Instruct", "--gpu", "rtx4090", "--json")
    assert result["starts"] is True and result["model"] == "Qwen/Qwen2.5-7B-Instruct"
    unwanted = _OTHER_MODELS + _OTHER_FLAGS + _SGLANG + _OTHER_COMMANDS + _HEAVY
    assert _loaded(modules, unwanted) == []


def test_an_sglang_plan_of_a_dense_model_loads_no_module_for_other_models_or_commands() -> None:
    result, modules = _plan(
        "Qwen/Qwen2.5-7B-Instruct", "--gpu", "rtx4090", "--engine", "sglang", "--json"
    )
    assert result["engine"] == "sglang" and result["starts"] is True
    assert _loaded(modules, _OTHER_MODELS + _OTHER_FLAGS + _OTHER_COMMANDS + _HEAVY) == []


def test_the_modules_left_out_are_loaded_for_the_models_and_flags_that_need_them() -> None:
    """The other side: a vision model with LoRA plans through the modules the plain plan skips
    (so the checks above see imports, and the lazy ones are wired in)."""
    result, modules = _plan(
        "Qwen/Qwen2.5-VL-7B-Instruct",
        "--gpu",
        "h100-sxm",
        "--limit-mm-per-prompt",
        '{"image": 2, "video": 0}',
        "--enable-lora",
        "--json",
    )
    assert any(line.startswith("vision tower") for line in result["warnings"])
    needed = ("kvwise.core.vision_qwen25", "kvwise.planner.vision_profile", "kvwise.planner.lora")
    assert _loaded(modules, needed) == sorted(needed)


def _help(columns: int) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-m", "kvwise.cli", "plan", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=os.environ | {"COLUMNS": str(columns)},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_help_is_laid_out_at_the_terminal_width() -> None:
    """Help still asks for the terminal's width when it prints (only argparse's metavar check
    in add_argument gets a fixed one, to keep shutil out of a plan)."""
    wide, narrow = _help(200), _help(60)
    assert 120 < max(len(line) for line in wide) <= 198  # argparse leaves 2 columns
    assert len(narrow) > len(_help(80)) > len(wide)


def test_a_metavar_that_does_not_match_nargs_is_still_refused() -> None:
    parser = CommandParser(prog="kvwise test")
    with pytest.raises(ValueError, match="metavar"):
        parser.add_argument("--pair", nargs=2, metavar=("A", "B", "C"))
