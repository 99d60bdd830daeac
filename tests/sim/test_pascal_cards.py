"""`kvwise simulate` on a Pascal card (no measurements, no official vLLM build): it runs, says
where its step times come from and that vLLM's official builds do not run there."""

from __future__ import annotations

import json

import pytest

from kvwise.cli import main

SMALL = ["--workload", "random", "--num-prompts", "20", "--input-len", "200", "--output-len", "30"]


@pytest.mark.parametrize("gpu", ["Tesla P40", "NVIDIA GeForce GTX 1080 Ti", "p100-16gb-pcie"])
def test_simulate_on_a_pascal_card_runs_and_says_what_it_rests_on(
    capsys: pytest.CaptureFixture[str], gpu: str
) -> None:
    args = ["simulate", "Qwen/Qwen2.5-0.5B-Instruct", "--gpu", gpu, "--max-model-len", "4096"]
    assert main([*args, *SMALL]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "vLLM's official builds do not run on" in out
    assert "no measurements of" in out and "Pascal" in out  # its family, named
    assert main([*args, *SMALL, "--json"]) == 0
    metrics = json.loads(capsys.readouterr().out)
    assert metrics["completed"] == 20 and metrics["output_throughput"] > 0


def test_a_pascal_card_decodes_slower_than_a_turing_card_of_more_bandwidth(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # step times come from the card's own datasheet: a P4 (192 GB/s) decodes slower than a
    # T4 (320 GB/s) with the same shipped coefficients
    tpot = {}
    for gpu in ("p4", "t4"):
        args = ["simulate", "Qwen/Qwen2.5-0.5B-Instruct", "--gpu", gpu, "--max-model-len", "4096"]
        assert main([*args, "--max-num-seqs", "32", *SMALL, "--json"]) == 0
        tpot[gpu] = json.loads(capsys.readouterr().out)["median_tpot_ms"]
    assert tpot["p4"] > tpot["t4"]
