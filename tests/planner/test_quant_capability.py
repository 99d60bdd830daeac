"""vLLM refuses a quantized model on a card its kernels do not support, per release.

The minimum capabilities are QuantizationConfig.get_min_capability() in each release's
vllm/model_executor/layers/quantization/ (awq.py 75, gptq.py 60, fp8.py 90 in 0.4.1, 89 in
0.4.2-0.5.0, 80 in 0.5.3-0.13, 75 from 0.14).
"""

from __future__ import annotations

import pytest

from kvwise.cli import main
from kvwise.core.catalog import load_model
from kvwise.core.flags import VllmFlags
from kvwise.core.gpus import find_gpu
from kvwise.errors import UnsupportedHardwareError
from kvwise.planner import plan

AWQ = "Qwen/Qwen2.5-7B-Instruct-AWQ"
GPTQ = "Qwen/Qwen2.5-7B-Instruct-GPTQ-Int4"
BF16 = "Qwen/Qwen2.5-7B-Instruct"


def test_awq_on_a_v100_is_refused_in_vllms_words(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", AWQ, "--gpu", "v100-32gb-sxm2"]) == 2
    err = capsys.readouterr().err
    assert "The quantization method awq is not supported for the current GPU" in err
    assert "Minimum capability: 75. Current capability: 70." in err
    assert "Traceback" not in err


def test_gptq_runs_on_a_v100_and_awq_on_a_t4() -> None:
    # GPTQ's plain kernel needs 6.0; AWQ's 7.5 (Turing)
    assert plan(load_model(GPTQ), find_gpu("v100-32gb-sxm2"), VllmFlags(dtype="float16")).starts
    assert plan(load_model(AWQ), find_gpu("t4"), VllmFlags()).starts


@pytest.mark.parametrize(
    ("version", "is_refused"), [("0.10.0", True), ("0.13.0", True), ("0.14.0", False)]
)
def test_fp8_on_a_turing_card_depends_on_the_release(version: str, is_refused: bool) -> None:
    """Weight-only FP8 (Marlin) came to compute capability 7.5 in 0.14."""
    flags = VllmFlags(quantization="fp8", dtype="float16", max_model_len=4096)
    if is_refused:
        with pytest.raises(UnsupportedHardwareError, match="Minimum capability: 80"):
            plan(load_model(BF16), find_gpu("t4"), flags, vllm_version=version)
    else:
        assert (
            plan(load_model(BF16), find_gpu("t4"), flags, vllm_version=version).flags.quantization
            == "fp8"
        )


def test_an_ampere_card_takes_fp8_weights_on_every_release_that_has_them() -> None:
    for version in ("0.5.3", "0.10.0", "0.33.0"):
        flags = VllmFlags(quantization="fp8", max_model_len=4096)
        plan(load_model(BF16), find_gpu("rtx3090"), flags, vllm_version=version)
