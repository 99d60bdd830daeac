"""Doctor misses found by scoring the out-of-sample batches a-d (tests/doctor/out_of_sample.py):
the error texts and traceback shapes below are those public logs, each cited. Each test failed
before the fix beside it (doctor bugs: a vLLM or PyTorch wording not read, a stage not placed).
"""

from __future__ import annotations

from kvwise.doctor import kinds
from kvwise.doctor.diagnose import diagnose
from kvwise.doctor.parse import parse_log
from kvwise.doctor.text import read_log

GIB = 2**30

# https://github.com/vllm-project/vllm/issues/49064 (vLLM 0.28.0, H100, a hybrid Gated DeltaNet
# model at the default max_num_seqs): vLLM's own check that each decode sequence has its
# Mamba state block, raised before graph capture
MAMBA_BLOCKS = (
    "vllm serve Qwen/Qwen3-32B --max-model-len 132000 --gpu-memory-utilization 0.90\n"
    "ValueError: max_num_seqs (1024) exceeds available Mamba cache blocks (969).\n"
    "Each decode sequence requires one Mamba cache block, so CUDA graph capture cannot\n"
    "proceed. Please lower max_num_seqs to at most 969 or increase gpu_memory_utilization.\n"
)


def test_mamba_cache_blocks_below_max_num_seqs_is_no_room_for_the_cache() -> None:
    report = diagnose(MAMBA_BLOCKS.encode(), planner=None)
    assert report.diagnosis.kind == kinds.NO_KV_CACHE_MEMORY
    assert "Mamba cache blocks (969)" in report.diagnosis.evidence[0].message
    # vLLM's own figure gives the fix: at most as many sequences as state blocks
    assert report.prescription is not None and report.prescription.best is not None
    assert report.prescription.best.changes == {"max_num_seqs": 969}


# https://github.com/vllm-project/vllm/issues/17469 (0.8.5, 4x A10): the user says OOM; the
# traceback pasted shows CUDA-graph capture, the OOM line itself was not pasted
CAPTURE_TRACEBACK = (
    "Gives OOM, even i set max-model-len to 1024, with max-num-seq =1\n"
    "INFO 04-29 01:07:41 [gpu_model_runner.py:1347] Model loading took 14.2474 GiB\n"
    "INFO 04-29 01:09:49 [kv_cache_utils.py:634] GPU KV cache size: 198,784 tokens\n"
    "(VllmWorker rank=1 pid=106) ERROR 04-29 01:10:12 [multiproc_executor.py:470] "
    "WorkerProc hit an exception.\n"
    '(VllmWorker rank=1 pid=106) ERROR 04-29 01:10:12 [multiproc_executor.py:470]   File "/usr/'
    'local/lib/python3.12/dist-packages/vllm/v1/worker/gpu_worker.py", line 242, in '
    "compile_or_warm_up_model\n"
    "(VllmWorker rank=1 pid=106) ERROR 04-29 01:10:12 [multiproc_executor.py:470]     "
    "self.model_runner.capture_model()\n"
    '(VllmWorker rank=1 pid=106) ERROR 04-29 01:10:12 [multiproc_executor.py:470]   File "/usr/'
    'local/lib/python3.12/dist-packages/vllm/model_executor/layers/fused_moe/fused_moe.py", '
    "line 1295, in fused_experts_impl\n"
)

# https://github.com/vllm-project/vllm/issues/7593 (8x L4): the title says CUDA OOM; the log
# pasted ends at V0's capture line
LAST_LINE_CAPTURE = (
    "Gemma 2 9b on 8xL4(24gb) says cuda oom when capturing cuda graphs\n"
    "INFO 08-19 07:51:03 model_runner.py:732] Loading model weights took 2.3463 GB\n"
    "INFO 08-19 07:51:08 distributed_gpu_executor.py:56] # GPU blocks: 22982, # CPU blocks: 6241\n"
    "(VllmWorkerProcess pid=13109) INFO 08-19 07:51:12 model_runner.py:1024] Capturing the model "
    "for CUDA graphs. This may lead to unexpected consequences if the model is not static.\n"
)


def test_a_reported_oom_is_placed_by_the_traceback_pasted_with_it() -> None:
    diagnosis = diagnose(CAPTURE_TRACEBACK.encode(), planner=None).diagnosis
    assert diagnosis.kind == kinds.CUDA_OOM_CUDA_GRAPH_CAPTURE
    assert diagnosis.stage == "cuda_graph_capture"
    quoted = [line.message for line in diagnosis.evidence]
    assert any("OOM" in m for m in quoted) and any("capture_model" in m for m in quoted)


def test_a_reported_oom_is_placed_after_the_last_stage_the_log_reached() -> None:
    diagnosis = diagnose(LAST_LINE_CAPTURE.encode(), planner=None).diagnosis
    assert diagnosis.kind == kinds.CUDA_OOM_CUDA_GRAPH_CAPTURE
    assert any("Capturing the model" in line.message for line in diagnosis.evidence)


def test_a_reported_oom_without_any_stage_line_stays_unplaced() -> None:
    diagnosis = diagnose(b"vLLM OOMs on my 4090 with Qwen2-7B, any idea?", planner=None).diagnosis
    assert diagnosis.kind == kinds.CUDA_OOM
    assert diagnosis.stage is None


def test_pytorchs_allocation_failure_alone_is_an_oom() -> None:
    # https://github.com/vllm-project/vllm/issues/7590: the user pasted only the allocator's
    # "Tried to allocate 1024.00 GiB" (PyTorch's CUDA caching allocator, c10/cuda/CUDACachingAllocator.cpp)
    text = b"Memory error: Tried to allocate 1024.00 GiB\nvLLM Version: 0.5.4\n"
    diagnosis = diagnose(text, planner=None).diagnosis
    assert diagnosis.kind in (kinds.CUDA_OOM, *kinds.KIND_OF_STAGE.values())
    assert "Tried to allocate 1024.00 GiB" in diagnosis.evidence[0].message


def test_pytorch_21s_misspelt_capacity_is_read() -> None:
    # https://github.com/vllm-project/vllm/issues/2140 (PyTorch 2.1.2 prints "total capacty")
    text = (
        "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 518.00 MiB. GPU 0 has "
        "a total capacty of 21.67 GiB of which 4.06 MiB is free. Process 2417585 has 21.65 GiB "
        "memory in use. Of the allocated memory 21.32 GiB is allocated by PyTorch, and 1018.00 "
        "KiB is reserved by PyTorch but unallocated."
    )
    parsed = parse_log(read_log(text.encode()))
    totals = [o.value / GIB for o in parsed.figures.get("total_bytes", ())]
    assert any(abs(t - 21.67) < 0.01 for t in totals)


def test_an_oom_the_user_reports_in_an_sglang_launch_is_an_oom() -> None:
    # https://github.com/zai-org/GLM-4.5/issues/3 as the record quotes it: SGLang's launch
    # command and the user's words, no traceback
    from kvwise.doctor.sglang_log import is_sglang_log
    from kvwise.doctor.sglang_report import diagnose_sglang

    text = read_log(
        b"Using 4*H100 and FP8 start script in readme will result out of memory\n"
        b"python3 -m sglang.launch_server --model-path zai-org/GLM-4.5-Air-FP8 --tp-size 4 "
        b"--speculative-algorithm EAGLE --mem-fraction-static 0.7\n"
    )
    assert is_sglang_log(text)
    diagnosis = diagnose_sglang(text).diagnosis
    assert diagnosis.kind == kinds.CUDA_OOM
    assert "out of memory" in diagnosis.evidence[0].message
