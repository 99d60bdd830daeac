"""Whatever is fed in, the doctor answers (`unknown` when nothing is recognised), never raises."""

from __future__ import annotations

import os
import time
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from kvwise.doctor import kinds
from kvwise.doctor.diagnose import diagnose
from tests.doctor.logs import error, render, v1_start

# pieces of real vLLM lines, to make the random inputs look like logs
FRAGMENTS = [
    "INFO 12-13 19:54:18 [gpu_worker.py:243] ",
    "(EngineCore_0 pid=62) ERROR 08-29 02:03:11 [core.py:700] ",
    "Available KV cache memory: ",
    "GPU KV cache size: 1,2",
    "# GPU blocks: ",
    "max seq len (",
    "is larger than the maximum number of tokens that can be stored in KV cache (",
    "estimated maximum model length is ",
    "non-default args: {'model': '",
    "with config: model='x', max_seq_len=",
    "vllm serve ",
    "--max-model-len ",
    "--gpu-memory-utilization ",
    "Free memory on device (",
    "/",
    " GiB",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate ",
    'File "/x/vllm/v1/worker/gpu_model_runner.py", line 1, in _dummy_run',
    "Traceback (most recent call last):",
    "Killed",
    "| 0  NVIDIA GeForce RTX 4090  Off |",
    "Running: 3 reqs, Waiting: 2 reqs, GPU KV cache usage: 100.0%",
    "\n",
    "\x1b[31m",
    "-1",
    "nan",
    "99999999999999999999",
    "\\",
    "'",
    "{",
    "vllm serve Qwen/Qwen2.5-7B-Instruct --max-model-len ",
    " --gpu-memory-utilization 0.",
    " --max-num-seqs ",
    "Available KV cache memory: -",
    "RuntimeError: CUDA out of memory occurred when warming up sampler with ",
    "No available memory for the cache blocks",
    "Free memory on device (2.0/23.5 GiB) on startup is less than desired GPU memory utilization",
    "Sequence group 3 is preempted by PreemptionMode.RECOMPUTE total_num_cumulative_preemption=",
    "Running: 9 reqs, Waiting: 1 reqs, GPU KV cache usage: 100.0%",
]


def test_non_finite_and_absurd_values_are_ignored() -> None:
    text = (
        b"vllm serve Qwen/Qwen2.5-7B-Instruct --gpu-memory-utilization nan --max-model-len inf\n"
        b"Available KV cache memory: 99999999999999999999 GiB\n"
        b"ValueError: To serve at least one request with the model's max seq len (32768), "
        b"(1e400 GiB KV cache is needed, which is larger than the available KV cache memory.\n"
    )
    report = diagnose(text, gpu_hint="rtx4090")
    assert report.diagnosis.kind == kinds.MAX_MODEL_LEN_EXCEEDS_KV_CACHE
    assert "gpu_memory_utilization" not in report.to_json()["parsed"]["flags"]


def test_empty_input() -> None:
    report = diagnose(b"")
    assert report.diagnosis.kind == kinds.UNKNOWN
    assert report.to_json()["fix"] is None


def test_binary_input() -> None:
    report = diagnose(os.urandom(200_000))
    assert report.diagnosis.kind == kinds.UNKNOWN
    assert "binary" in report.diagnosis.summary


def test_a_log_of_something_else() -> None:
    nginx = b'10.0.0.1 - - [10/Oct/2024:13:55:36 +0000] "GET / HTTP/1.1" 200 612 "-" "curl/8.0"\n'
    report = diagnose(nginx * 1000)
    assert report.diagnosis.kind == kinds.UNKNOWN
    assert "nothing vLLM-specific" in report.diagnosis.summary


def test_a_50_mb_log_with_the_error_at_the_end(tmp_path: Path) -> None:
    """A day of request logs, then the failure; the speed figure is benchmarks/doctor_speed.py."""
    access = b'INFO:     127.0.0.1:51234 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n'
    failing = render(
        [
            *v1_start(max_model_len=32768),
            error("core.py:700", "ValueError: No available memory for the cache blocks."),
        ]
    )
    data = access * (50 * 2**20 // len(access)) + failing
    started = time.perf_counter()
    report = diagnose(data)
    elapsed = time.perf_counter() - started
    assert report.diagnosis.kind == kinds.NO_KV_CACHE_MEMORY
    assert elapsed < 60  # a guard against a runaway scan, not a speed claim


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=20), max_size=40))
def test_random_log_like_text_never_raises(pieces: list[str]) -> None:
    # with a GPU named, the planner and the fix search run on whatever was parsed
    report = diagnose("".join(pieces).encode(), gpu_hint="rtx4090")
    assert report.diagnosis.kind in kinds.ALL_KINDS
    report.to_json()


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=4000))
def test_random_bytes_never_raise(data: bytes) -> None:
    assert diagnose(data).diagnosis.kind in kinds.ALL_KINDS
