"""`kvwise deploy --target ray`: TP inside a node, PP across nodes, the Ray cluster commands."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest

from tests.deploy.helpers import assert_each_flag_once, deploy, expected_flag_values, plan_flags


def _serve_words(out: Path) -> list[str]:
    script = (out / "launch.sh").read_text()
    (line,) = [ln for ln in script.splitlines() if "vllm serve" in ln]
    return shlex.split(line[line.index("vllm serve") :].removesuffix(";;"))


def test_two_nodes_of_two_gpus_give_tp2_pp2_on_the_ray_backend(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    summary = deploy(capsys, tmp_path, "--target", "ray", "--nodes", "2", "--gpus-per-node", "2")
    words = _serve_words(tmp_path)
    wanted = expected_flag_values(plan_flags(capsys, "-tp", "2", "-pp", "2"))
    assert wanted["--tensor-parallel-size"] == 2 and wanted["--pipeline-parallel-size"] == 2
    assert_each_flag_once(words, wanted)
    backend = words.index("--distributed-executor-backend")
    assert words[backend + 1] == "ray"
    assert summary["gpus_per_replica"] == 4


def test_the_cluster_start_commands_give_each_node_its_gpus(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    deploy(capsys, tmp_path, "--target", "ray", "--nodes", "2", "--gpus-per-node", "2")
    script = tmp_path / "launch.sh"
    text = script.read_text()
    assert "ray start --head" in text and "ray start --address=" in text
    assert text.count("--num-gpus=2") == 2
    assert script.stat().st_mode & 0o111  # executable
    syntax = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert syntax.returncode == 0, syntax.stderr
    assert "vllm serve" in (tmp_path / "README.md").read_text()


def test_flags_override_the_node_layout(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    deploy(
        capsys,
        tmp_path,
        "--target",
        "ray",
        "--nodes",
        "2",
        "--gpus-per-node",
        "2",
        "-tp",
        "4",
        "-pp",
        "1",
    )
    words = _serve_words(tmp_path)
    assert words[words.index("--tensor-parallel-size") + 1] == "4"
    assert words[words.index("--pipeline-parallel-size") + 1] == "1"


def test_a_layout_larger_than_the_cluster_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from kvwise.cli import main

    argv = ["deploy", "Qwen/Qwen2.5-7B-Instruct", "--gpu", "rtx4090", "--target", "ray"]
    code = main([*argv, "--nodes", "1", "--gpus-per-node", "2", "-pp", "2", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and "4 GPUs" in err
    assert not list(tmp_path.iterdir())
