"""Every printed fix starts when re-planned; no single change -> a combination; else what would.

The claims are checked against the real planner, independently of the doctor's search: the
combination starts, each of its parts alone does not; the "more GPUs" layout starts.
"""

from __future__ import annotations

import pytest

from kvwise.core.catalog import load_model
from kvwise.core.flags import VllmFlags
from kvwise.core.gpus import find_gpu
from kvwise.core.quant import parse_quantization
from kvwise.doctor.command import flags_text
from kvwise.doctor.diagnose import diagnose
from kvwise.planner import plan
from tests.doctor.test_output import CORPUS

NO_KV = (
    "ValueError: No available memory for the cache blocks. Try increasing "
    "`gpu_memory_utilization` when initializing the engine."
)


def _log(model: str, max_model_len: int, util: float) -> bytes:
    return (
        "INFO 08-29 02:00:00 [api_server.py:1805] vLLM API server version 0.10.1.1\n"
        f"INFO 08-29 02:00:01 [utils.py:326] non-default args: {{'model': '{model}', "
        f"'max_model_len': {max_model_len}, 'gpu_memory_utilization': {util}}}\n"
        f"ERROR 08-29 02:00:09 [core.py:700] {NO_KV}\n"
    ).encode()


def _starts(model: str, gpu: str, **flags: object) -> bool:
    tp = int(flags.get("tensor_parallel_size", 1))  # type: ignore[call-overload]
    result = plan(
        load_model(model),
        find_gpu(gpu),
        VllmFlags(**flags).validate(),  # type: ignore[arg-type]
        vllm_version="0.10.1.1",
        num_gpus=tp,
    )
    return result.starts


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_every_printed_option_starts_when_re_planned(name: str) -> None:
    report = diagnose(CORPUS[name], model_hint="Qwen/Qwen2.5-7B-Instruct", gpu_hint="rtx4090")
    if report.prescription is None:
        return
    for option in report.prescription.options:
        if option.changes == {"swap_space": 0}:
            continue  # host RAM: outside the planner's GPU verdict
        assert option.plan is not None and option.plan.starts, (option.changes, option.reason)


def test_when_no_single_change_starts_the_smallest_combination_is_prescribed() -> None:
    model = "meta-llama/Llama-3.1-8B-Instruct"
    report = diagnose(_log(model, 131072, 0.95), gpu_hint="rtx4090")
    best = report.prescription.best
    assert best is not None and len(best.changes) >= 2  # (enforce_eager, max_model_len) today
    logged = {"max_model_len": 131072, "gpu_memory_utilization": 0.95}
    assert _starts(model, "rtx4090", **(logged | best.changes))
    for name, value in best.changes.items():  # neither part alone starts
        assert not _starts(model, "rtx4090", **(logged | {name: value}))
    assert "no single change starts it" in best.reason
    assert report.prescription.command is not None
    for word in flags_text(best.changes).split():
        assert word in report.prescription.command


def test_when_nothing_within_the_knobs_starts_it_says_so_and_what_would() -> None:
    model = "meta-llama/Llama-3.1-70B-Instruct"
    report = diagnose(_log(model, 32768, 0.9), gpu_hint="rtx4090")
    prescription = report.prescription
    assert prescription.best is None and prescription.command is None
    assert "alone or combined, starts it on RTX 4090" in prescription.advice
    # TP 8 on GeForce cards (no P2P: NCCL in the graphs) at 0.9 leaves less room than vLLM's
    # own graph bound, so the verdict there is not modelled and the doctor adds what it needs
    assert "--tensor-parallel-size 8" in prescription.advice
    assert "over 8 such GPUs starts" in prescription.advice
    assert "quantized checkpoint" in prescription.advice
    assert _starts(
        model, "rtx4090", max_model_len=32768, tensor_parallel_size=8, enforce_eager=True
    )
    assert not _starts(model, "rtx4090", max_model_len=32768, tensor_parallel_size=4)


def test_more_gpus_come_with_the_knob_they_need() -> None:
    model = "Qwen/Qwen2.5-7B-Instruct"  # 14.2 GiB of weights on a 15.8 GiB V100 at 0.95
    report = diagnose(_log(model, 32768, 0.95), gpu_hint="v100-16gb")
    advice = report.prescription.advice
    assert report.resolved.gpu is not None
    assert f"starts it on {report.resolved.gpu.name}" in advice
    what = advice.split("what would: ", 1)[1].split(" over ", 1)[0].split()
    flags = {
        name.lstrip("-").replace("-", "_"): float(value) if "." in value else int(value)
        for name, value in zip(what[::2], what[1::2], strict=True)
    }
    assert flags["tensor_parallel_size"] == 2
    assert _starts(
        model, "v100-16gb", **({"max_model_len": 32768, "gpu_memory_utilization": 0.95} | flags)
    )


def test_a_smaller_checkpoint_is_planned_only_where_vllm_has_its_kernels() -> None:
    model = "Qwen/Qwen2.5-7B-Instruct"
    report = diagnose(_log(model, 32768, 0.95), gpu_hint="v100-16gb")
    advice = report.prescription.advice
    # a V100 (compute capability 7.0) runs GPTQ but not FP8 checkpoints (vLLM's hardware table)
    assert "FP8 checkpoint" not in advice
    assert "a 4-bit GPTQ checkpoint of this model starts on this GPU" in advice
    gptq = parse_quantization({"quant_method": "gptq", "bits": 4, "group_size": 128}, model)
    checked = plan(
        load_model(model).with_quant(gptq),
        find_gpu("v100-16gb"),
        VllmFlags(max_model_len=32768, gpu_memory_utilization=0.95).validate(),
        vllm_version="0.10.1.1",
    )
    assert checked.starts
    assert f"{checked.kv.tokens:,} tokens" in advice
