"""`kvwise doctor` on SGLang logs: the cause in SGLang's terms and a fix re-planned for SGLang."""

from __future__ import annotations

import json

import pytest

from kvwise.cli import main
from kvwise.core.catalog import load_model
from kvwise.core.flags import VllmFlags
from kvwise.core.gpus import resolve_gpu
from kvwise.doctor import kinds
from kvwise.doctor.sglang_report import diagnose_sglang
from kvwise.doctor.text import read_log
from kvwise.planner.sglang import SglangFlags, plan_sglang


def _doctor(log: str, **hints: str) -> dict:  # type: ignore[type-arg]
    return diagnose_sglang(read_log(log.encode()), **hints).to_json()


# the lines as public reports quote them (sources in tests/data/validation/sglang_startup_logs.jsonl)
NOT_ENOUGH_043 = "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."
NOT_ENOUGH_NEW = (
    "ValueError: Loaded weights leave no GPU memory for the KV cache under "
    "--mem-fraction-static=0.88."
)
CAPTURE_OOM = (
    "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 448.00 MiB. "
    "GPU 7 has a total capacity of 95.00"
)
TOO_LONG = (
    "[2025-03-03 06:49:28 TP5] Input length (160062 tokens) exceeds the maximum allowed length "
    "(59862 tokens). Use a shorter input or enable --allow-auto-truncate."
)


@pytest.mark.parametrize(
    ("line", "kind"),
    [
        (NOT_ENOUGH_043, kinds.NO_KV_CACHE_MEMORY),
        (NOT_ENOUGH_NEW, kinds.NO_KV_CACHE_MEMORY),
        (CAPTURE_OOM, kinds.CUDA_OOM_CUDA_GRAPH_CAPTURE),
        (TOO_LONG, kinds.CONTEXT_LENGTH),
        (
            "[2025-01-01 00:00:00 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 1",
            kinds.PREEMPTION,
        ),
    ],
)
def test_public_sglang_errors_get_their_kind(line: str, kind: str) -> None:
    report = _doctor("[2025-01-01 00:00:00 TP0] Load weight begin. avail mem=21.63 GB\n" + line)
    assert report["engine"] == "sglang"
    assert report["kind"] == kind
    assert report["evidence"]


def _log(model: str, fraction: float, gpu: str, error: str, version: str = "0.4.3") -> str:
    return (
        f"python3 -m sglang.launch_server --model-path {model} --mem-fraction-static {fraction}\n"
        f"GPU 0: {gpu}\nsglang: {version}\n{error}\n"
    )


def test_not_enough_memory_is_fixed_by_the_smallest_fraction_that_holds_a_full_request() -> None:
    report = _doctor(
        _log("Qwen/Qwen2.5-7B-Instruct", 0.6, "NVIDIA GeForce RTX 4090", NOT_ENOUGH_043)
    )
    fix = report["fix"]
    assert fix["starts"] and fix["change"].startswith("--mem-fraction-static ")
    after = fix["mem_fraction_static"]["after"]
    # re-planned: the fraction one step lower does not hold a full-length request, this one does
    model, gpu = load_model("Qwen/Qwen2.5-7B-Instruct"), resolve_gpu("rtx4090", None, None)
    lower = plan_sglang(model, gpu, VllmFlags(), SglangFlags("0.4.3", round(after - 0.01, 2)))
    at_fix = plan_sglang(model, gpu, VllmFlags(), SglangFlags("0.4.3", after))
    assert lower.max_total_num_tokens < lower.context_length <= at_fix.max_total_num_tokens
    assert f"--mem-fraction-static {after:g}" in fix["command"]


def test_weights_larger_than_the_card_need_more_gpus_not_a_fraction() -> None:
    report = _doctor(
        _log("Qwen/Qwen2.5-32B-Instruct", 0.88, "NVIDIA GeForce RTX 4090", NOT_ENOUGH_043)
    )
    fix = report["fix"]
    assert fix["change"].startswith("--tp ")
    assert fix["starts"] and " --tp " in fix["command"]


def test_graph_capture_oom_moves_the_fraction_back_to_the_release_default() -> None:
    log = _log("Qwen/Qwen2.5-7B-Instruct", 0.95, "NVIDIA H100 80GB HBM3", CAPTURE_OOM, "0.5.5")
    log = log.replace(
        CAPTURE_OOM,
        "Capture cuda graph begin. This can take up to several minutes.\n" + CAPTURE_OOM,
    )
    fix = _doctor(log)["fix"]
    assert fix["mem_fraction_static"]["after"] < fix["mem_fraction_static"]["before"] == 0.95
    assert "default" in fix["change"]


def test_a_capture_oom_the_plan_predicts_keeps_the_largest_fraction_that_leaves_start_up_room() -> (
    None
):
    # Gemma-3-4B-it on a 4090 at 0.99 (0.4.3 sizes the pool with 0.95 x that for a multimodal
    # model) and --context-length 131072 (SGLang's own derived context is 8 x that): the request
    # table, the attention buffers and the graphs no longer fit outside the pool; the fix is not
    # the release's default (0.88) but the largest fraction that leaves them room
    log = _log("google/gemma-3-4b-it", 0.99, "NVIDIA GeForce RTX 4090", CAPTURE_OOM)
    log = log.replace("--mem-fraction-static", "--context-length 131072 --mem-fraction-static")
    fix = _doctor(log)["fix"]
    after = fix["mem_fraction_static"]["after"]
    assert fix["starts"] and 0.88 < after < 0.99
    model, gpu = load_model("google/gemma-3-4b-it"), resolve_gpu("rtx4090", None, None)
    flags = VllmFlags(max_model_len=131072)
    higher = plan_sglang(model, gpu, flags, SglangFlags("0.4.3", round(after + 0.01, 2)))
    assert not higher.starts and "Capture cuda graph failed" in (higher.error or "")


def test_a_rejected_prompt_gets_a_pool_that_holds_it() -> None:
    line = TOO_LONG.replace("160062", "40000").replace("59862", "30000")
    log = _log("Qwen/Qwen2.5-7B-Instruct", 0.7, "NVIDIA GeForce RTX 4090", line)
    fix = _doctor(log)["fix"]
    assert fix["max_total_num_tokens"]["after"] >= 40000 + 6
    assert fix["max_total_num_tokens"]["before"] < 40000


def test_no_model_or_card_in_the_log_names_the_cause_without_a_made_up_fix() -> None:
    report = _doctor(NOT_ENOUGH_043)
    assert report["kind"] == kinds.NO_KV_CACHE_MEMORY
    assert report["fix"] is None
    assert any("--model" in note or "--gpu" in note for note in report["parsed"]["notes"])


def test_cli_routes_sglang_logs_and_leaves_vllm_logs_to_the_vllm_doctor(
    tmp_path, capsys: pytest.CaptureFixture[str]
) -> None:  # type: ignore[no-untyped-def]
    sglang_log = tmp_path / "sglang.log"
    sglang_log.write_text(
        _log("Qwen/Qwen2.5-7B-Instruct", 0.6, "NVIDIA GeForce RTX 4090", NOT_ENOUGH_043)
    )
    assert main(["doctor", str(sglang_log), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["engine"] == "sglang"
    vllm_log = tmp_path / "vllm.log"
    vllm_log.write_text(
        "ValueError: No available memory for the cache blocks. Try increasing "
        "`gpu_memory_utilization` when initializing the engine.\n"
    )
    assert main(["doctor", str(vllm_log), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert "engine" not in data and data["kind"] == kinds.NO_KV_CACHE_MEMORY
