"""Planning on a card vLLM's official builds have no kernels for (Pascal, compute capability
6.x): the memory figures as for any card, float16 (no bf16 there), and one line saying that
the official builds do not run there and a community (or patched source) build is needed."""

from __future__ import annotations

import json

import pytest

from kvwise.cli import main

OFFICIAL = "vLLM's official builds do not run on"


def _plan_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    assert main(["plan", *args, "--json"]) == 0
    return dict(json.loads(capsys.readouterr().out))


@pytest.mark.parametrize("gpu", ["Tesla P40", "NVIDIA GeForce GTX 1080 Ti", "Tesla P100-PCIE-16GB"])
def test_a_pascal_plan_gives_the_figures_float16_and_the_build_warning(
    capsys: pytest.CaptureFixture[str], gpu: str
) -> None:
    data = _plan_json(capsys, "Qwen/Qwen2.5-0.5B-Instruct", "--gpu", gpu)
    assert data["flags"]["dtype"] == "float16"  # a bf16 checkpoint, a card without bf16
    assert data["starts"] and data["memory_gib"]["kv_cache"] > 0
    lines = [w for w in data["warnings"] if w.startswith(OFFICIAL)]
    assert len(lines) == 1
    assert "compute capability 6." in lines[0] and "community build" in lines[0]
    assert any("6.x" in part for part in data["not_modelled"])


def test_a_7b_fp16_plan_on_a_p40_prints_the_warning_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["plan", "Qwen/Qwen2.5-7B-Instruct", "--gpu", "Tesla P40"]) == 0
    out = " ".join(capsys.readouterr().out.split())  # rich wraps at the terminal width
    assert "float16" in out and "bfloat16" not in out
    assert f"warning: {OFFICIAL} Tesla P40 (compute capability 6.1" in out
    assert "vLLM starts" in out  # the memory verdict is still given


@pytest.mark.parametrize("gpu", ["t4", "v100-32gb-sxm2", "rtx4090"])
def test_cards_the_official_builds_cover_get_no_build_warning(
    capsys: pytest.CaptureFixture[str], gpu: str
) -> None:
    data = _plan_json(capsys, "Qwen/Qwen2.5-0.5B-Instruct", "--gpu", gpu)
    assert not any(w.startswith(OFFICIAL) for w in data["warnings"])
    assert not any("6.x" in part for part in data["not_modelled"])


def test_a_p40_gets_the_same_memory_accounting_as_a_card_of_its_size(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # the build warning changes no figure: a P40 plans like any card of 22.38 GiB in float16
    p40 = _plan_json(capsys, "Qwen/Qwen2.5-7B-Instruct", "--gpu", "p40")
    same = _plan_json(
        capsys, "Qwen/Qwen2.5-7B-Instruct", "--gpu", "t4", "--gpu-memory-gib", "22.38"
    )
    assert p40["flags"]["dtype"] == same["flags"]["dtype"] == "float16"
    assert p40["memory_gib"] == same["memory_gib"]
    assert p40["kv"]["num_gpu_blocks"] == same["kv"]["num_gpu_blocks"]


def test_awq_on_a_p40_is_refused_in_vllms_words(capsys: pytest.CaptureFixture[str]) -> None:
    # AWQConfig.get_min_capability is 75: vLLM refuses AWQ on 6.1 whichever build runs
    assert main(["plan", "Qwen/Qwen2.5-7B-Instruct-AWQ", "--gpu", "Tesla P40"]) == 2
    err = capsys.readouterr().err
    assert "awq is not supported" in err and "Current capability: 61" in err


def test_bf16_asked_on_a_p40_is_refused_in_vllms_words(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = main(["plan", "Qwen/Qwen2.5-7B-Instruct", "--gpu", "p40", "--dtype", "bfloat16"])
    assert code == 2
    assert "compute capability 6.1" in capsys.readouterr().err
