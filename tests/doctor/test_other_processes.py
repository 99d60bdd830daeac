"""Memory other processes hold, as PyTorch's OOM message names it, is planned around.

PyTorch lists each process on the GPU: "Process 2291 has 1.62 GiB memory in use" for others and
"Including non-PyTorch memory, this process has X" for the one that failed (vLLM). The fix must
choose a utilization that fits beside what the others hold: the planner is given the free memory
(total less the others) and must say the prescribed configuration starts.
"""

from __future__ import annotations

from dataclasses import replace

from kvwise.core.catalog import load_model
from kvwise.core.flags import VllmFlags
from kvwise.core.gpus import GIB, find_gpu
from kvwise.doctor import kinds
from kvwise.doctor.diagnose import diagnose
from kvwise.doctor.torch_oom import others as torch_oom_others
from kvwise.planner import plan
from tests.doctor.cases import CORE
from tests.doctor.logs import MODEL, V1_CAPTURE, error, render, torch_oom, v1_kv, v1_start
from tests.doctor.test_output import CORPUS

TOTAL_GIB = 23.65  # "GPU 0 has a total capacity of 23.65 GiB" (torch_oom)


def _capture_oom(holders: str) -> bytes:
    lines = v1_start() + v1_kv() + V1_CAPTURE
    return render([*lines, error(CORE, torch_oom(tried="20.00 MiB", holders=holders))])


def test_another_process_named_beside_this_process_is_the_cause_and_is_planned_around() -> None:
    holders = (
        "Process 2291 has 1.62 GiB memory in use. Including non-PyTorch memory, this process "
        "has 21.99 GiB memory in use."
    )
    report = diagnose(_capture_oom(holders), gpu_hint="rtx4090")
    assert report.diagnosis.kind == kinds.ANOTHER_PROCESS
    assert report.diagnosis.stage == "cuda_graph_capture"
    assert "while capturing CUDA graphs" in report.diagnosis.summary
    assert "pid 2291" in report.diagnosis.summary and "1.62 GiB" in report.diagnosis.summary
    free_gib = TOTAL_GIB - 1.62
    assert report.resolved.gpu is not None
    assert abs(report.resolved.gpu.free_bytes / GIB - free_gib) < 0.01
    best = report.prescription.best
    util = best.changes["gpu_memory_utilization"]
    assert util * TOTAL_GIB <= free_gib  # the budget fits beside the other process
    assert "other processes hold 1.62 GiB" in best.reason
    # the real planner, told what is free, agrees it starts; at the logged 0.9 it does not
    gpu = replace(
        find_gpu("rtx4090"), memory_bytes=int(TOTAL_GIB * GIB), free_bytes=int(free_gib * GIB)
    )
    model = load_model(MODEL)
    fixed = VllmFlags(max_model_len=32768, gpu_memory_utilization=util).validate()
    logged = VllmFlags(max_model_len=32768, gpu_memory_utilization=0.9).validate()
    assert plan(model, gpu, fixed, vllm_version="0.10.1.1").starts
    assert not plan(model, gpu, logged, vllm_version="0.10.1.1").starts


def test_a_small_other_process_still_counts_in_the_fix_but_is_not_the_cause() -> None:
    holders = (
        "Process 1740 has 310.00 MiB memory in use. Including non-PyTorch memory, this process "
        "has 22.97 GiB memory in use."
    )
    report = diagnose(_capture_oom(holders), gpu_hint="rtx4090")
    assert report.diagnosis.kind == kinds.CUDA_OOM_CUDA_GRAPH_CAPTURE
    assert report.resolved.gpu is not None and report.resolved.gpu.free_bytes is not None
    assert abs(report.resolved.gpu.free_bytes / GIB - (TOTAL_GIB - 310 / 1024)) < 0.01
    for option in report.prescription.options:
        assert option.plan is not None and option.plan.starts
        assert option.plan.gpu.free_bytes == report.resolved.gpu.free_bytes


def test_who_is_another_process_in_pytorch_s_message() -> None:
    # https://github.com/vllm-project/vllm/pull/9045 (a second vLLM on GPU 2, 0.6.x)
    both = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 60.00 MiB. GPU 2 has a "
        "total capacity of 79.22 GiB of which 2.06 MiB is free. Process 3888866 has 71.11 GiB "
        "memory in use. Including non-PyTorch memory, this process has 8.08 GiB memory in use."
    )
    assert torch_oom_others(both) == {3888866: 71.11 * GIB}
    # https://github.com/vllm-project/vllm/issues/15105 (0.8.0 in a container: vLLM's own pid)
    alone = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.74 GiB. GPU 1 has a "
        "total capacity of 23.57 GiB of which 605.88 MiB is free. Process 133288 has 22.97 GiB "
        "memory in use."
    )
    assert torch_oom_others(alone) == {}
    two = "Process 1234 has 10.50 GiB memory in use. Process 5678 has 12.40 GiB memory in use."
    assert torch_oom_others(two) == {1234: 10.5 * GIB}  # the larger one is taken to be vLLM


def test_a_second_vllm_on_the_card_is_named_as_the_cause() -> None:
    # the shape of https://github.com/vllm-project/vllm/pull/9045: worker OOM while loading
    lines = [
        *v1_start(),
        error(
            "multiproc_worker_utils.py:231",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 60.00 MiB. GPU 2 has "
            "a total capacity of 79.22 GiB of which 2.06 MiB is free. Process 3888866 has 71.11 "
            "GiB memory in use. Including non-PyTorch memory, this process has 8.08 GiB memory "
            "in use. Of the allocated memory 4.90 GiB is allocated by PyTorch, and 66.39 MiB is "
            "reserved by PyTorch but unallocated.",
        ),
    ]
    report = diagnose(render(lines, "v0_header"), gpu_hint="a100-80gb")
    assert report.diagnosis.kind == kinds.ANOTHER_PROCESS
    assert "71.11 GiB" in report.diagnosis.summary
    assert report.resolved.gpu is not None
    assert abs(report.resolved.gpu.free_bytes / GIB - (79.22 - 71.11)) < 0.01


def test_memory_no_listed_process_accounts_for_is_another_process() -> None:
    # inside a container PyTorch cannot list the host's other processes; what the message
    # leaves unaccounted (23.65 total - 0.59 free - 21.99 this process = 1.07 GiB) is theirs
    report = diagnose(
        _capture_oom("Including non-PyTorch memory, this process has 21.99 GiB memory in use."),
        gpu_hint="rtx4090",
    )
    assert report.diagnosis.kind == kinds.ANOTHER_PROCESS
    assert "no listed process accounts for" in report.diagnosis.summary
    assert report.resolved.gpu is not None and report.resolved.gpu.free_bytes is not None
    held_gib = TOTAL_GIB - report.resolved.gpu.free_bytes / GIB
    assert abs(held_gib - (TOTAL_GIB - 605.88 / 1024 - 21.99)) < 0.01
    util = report.prescription.best.changes["gpu_memory_utilization"]
    assert util * TOTAL_GIB <= TOTAL_GIB - held_gib


def test_the_fix_for_another_process_never_raises_the_utilization() -> None:
    checked = 0
    for data in CORPUS.values():
        report = diagnose(data, model_hint=MODEL, gpu_hint="rtx4090")
        if report.diagnosis.kind != kinds.ANOTHER_PROCESS or report.prescription is None:
            continue
        logged = report.parsed.flags(report.diagnosis.anchor).get("gpu_memory_utilization", 0.9)
        for option in report.prescription.options:
            new = option.changes.get("gpu_memory_utilization")
            assert new is None or new < logged, (option.reason, logged)
        checked += 1
    assert checked >= 4
