"""`kvwise deploy` as a user meets it: what it prints, what it refuses, what it writes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvwise.cli import COMMANDS, main

ARGV = ["deploy", "Qwen/Qwen2.5-7B-Instruct", "--gpu", "rtx4090", "--target", "k8s"]


def test_deploy_is_listed_among_the_commands(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 0
    assert "deploy" in capsys.readouterr().out
    assert "deploy" in COMMANDS


def test_it_writes_files_and_prints_what_to_run_next(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "k8s"
    assert main([*ARGV, "--replicas", "2", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"kubectl apply -f {out}" in printed
    assert "kubectl rollout status deployment/vllm-1" in printed
    assert sorted(p.name for p in out.iterdir()) == [
        "gateway.Dockerfile",
        "gateway.yaml",
        "redis.yaml",
        "vllm.yaml",
    ]


def test_a_plan_vllm_would_refuse_is_refused_in_vllms_words_and_nothing_is_written(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    low = ["--gpu-memory-utilization", "0.3"]
    assert main(["plan", "Qwen/Qwen2.5-7B-Instruct", "--gpu", "rtx4090", "--json", *low]) == 1
    error = json.loads(capsys.readouterr().out)["error"]
    out = tmp_path / "never"
    assert main([*ARGV, *low, "--out", str(out)]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert " ".join(error["message"].split()) in err
    assert not out.exists()


@pytest.mark.parametrize(
    ("argv", "word"),
    [
        (["--gateways", "1"], "--gateways"),
        (["--replicas", "0"], "--replicas"),
        (["--nodes", "2"], "--target ray"),
        (["--target", "swarm"], "swarm"),
    ],
)
def test_bad_options_get_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str], word: str
) -> None:
    assert main([*ARGV, "--out", str(tmp_path / "x"), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and word in err
    assert "Traceback" not in err


def test_the_startup_probe_waits_for_the_weights_at_the_stated_rate(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    budgets = {}
    for rate in ("50", "100"):
        argv = [*ARGV, "--out", str(tmp_path / rate), "--json", "--engine-init-s", "0"]
        assert main([*argv, "--load-rate-mb-s", rate]) == 0
        budgets[rate] = json.loads(capsys.readouterr().out)["startup_budget_s"]
    # Qwen2.5-7B-Instruct: 7.6 B parameters in bf16, 15.2 GB of safetensors (its model card)
    assert 15.0e9 / 50e6 <= budgets["50"] <= 15.5e9 / 50e6
    assert budgets["100"] == pytest.approx(budgets["50"] / 2, abs=1)
