"""Start-up figures in each wording vLLM used, V0 0.4 to V1 0.33, to the byte."""

from __future__ import annotations

import pytest

from kvwise.doctor.parse import parse_log
from kvwise.doctor.text import read_log

GIB = 2**30


def _figure(text: str, name: str) -> float | None:
    return parse_log(read_log(text.encode())).figure(name)


@pytest.mark.parametrize(
    ("line", "name", "value"),
    [
        ("Loading model weights took 14.9888 GB", "weights_bytes", 14.9888 * GIB),  # V0: GiB
        ("Model loading took 13.64 GiB memory and 14.749265 seconds", "weights_bytes", 13.64 * GIB),
        ("Model loading took 14.9889 GiB and 3.652170 seconds", "weights_bytes", 14.9889 * GIB),
        (
            "model weights take 20.64GiB; non_torch_memory takes 0.28GiB; PyTorch activation peak "
            "memory takes 1.52GiB; the rest of the memory reserved for KV Cache is 21.20GiB.",
            "kv_cache_bytes",
            21.20 * GIB,
        ),
        (
            "the rest of the memory reserved for KV Cache is -1.53GiB.",
            "kv_cache_bytes",
            -1.53 * GIB,
        ),
        (
            "the current vLLM instance can use total_gpu_memory (44.53GiB) x "
            "gpu_memory_utilization (0.98) = 43.64GiB",
            "budget_bytes",
            43.64 * GIB,
        ),
        ("total_gpu_memory     79.22GiB", "total_bytes", 79.22 * GIB),  # PR #10511's table
        ("PyTorch activation peak memory       1.26GiB", "activation_peak_bytes", 1.26 * GIB),
        (
            "Memory profiling results: total_gpu_memory=23.58GiB initial_memory_usage=15.34GiB "
            "peak_torch_memory=17.06GiB memory_usage_post_profile=15.35GiB non_torch_memory=0.35GiB "
            "kv_cache_size=3.81GiB gpu_memory_utilization=0.90",
            "peak_torch_bytes",
            17.06 * GIB,
        ),
        (
            "Memory profiling takes 21.74 seconds. Total non KV cache memory: 16.76GiB; torch peak "
            "memory increase: 2.87GiB; non-torch forward increase memory: 0.25GiB; weights memory: "
            "13.64GiB.",
            "activation_peak_bytes",
            2.87 * GIB,
        ),
        ("Available KV cache memory: 58.47 GiB", "kv_cache_bytes", 58.47 * GIB),
        ("Estimated CUDA graph memory: 1.30 GiB total", "cuda_graph_estimate_bytes", 1.30 * GIB),
        ("Graph capturing finished in 40 secs, took 1.84 GiB", "cuda_graph_bytes", 1.84 * GIB),
        ("# GPU blocks: 1952, # CPU blocks: 2048", "num_gpu_blocks", 1952),
        (
            "INFO 08-19 07:51:08 distributed_gpu_executor.py:56] # GPU blocks: 22982, # CPU blocks: 6241",
            "num_cpu_blocks",
            6241,
        ),
        (
            "vllm cache_config_info with initialization after num_gpu_blocks is: 68500",
            "num_gpu_blocks",
            68500,
        ),
        ("GPU KV cache size: 1,096,000 tokens", "kv_cache_tokens", 1096000),
        (
            "GPU KV cache size: 1,096,000 tokens, Maximum concurrency for 32,768 tokens per "
            "request: 33.45x",
            "max_concurrency",
            33.45,
        ),
        ("Maximum concurrency for 40000 tokens per request: 1.54x", "max_concurrency", 1.54),
        (
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 786.00 MiB. GPU 0 has a "
            "total capacity of 79.19 GiB of which 552.50 MiB is free.",
            "total_bytes",
            79.19 * GIB,
        ),
        (
            "ValueError: Free memory on device cuda:1 (60.87/79.19 GiB) on startup is less than "
            "desired GPU memory utilization (0.95, 75.23 GiB).",
            "free_at_startup_bytes",
            60.87 * GIB,
        ),
        (
            "max seq len (221000), (10.12 GiB KV cache is needed, which is larger",
            "kv_needed_bytes",
            10.12 * GIB,
        ),
        (
            "Based on the available memory, the estimated maximum model length is 190272.",
            "estimated_max_model_len",
            190272,
        ),
        (
            "CUDA graph pool memory: 0.87 GiB (actual), 0.61 GiB (estimated), difference: 0.26 GiB (42.6%).",
            "cuda_graph_bytes",
            0.87 * GIB,
        ),
    ],
)
def test_each_wording_gives_the_figure(line: str, name: str, value: float) -> None:
    assert _figure(line, name) == pytest.approx(value)


def test_the_same_profiling_line_yields_all_its_parts() -> None:
    text = (
        "INFO 12-20 20:25:46 worker.py:241] the current vLLM instance can use total_gpu_memory "
        "(15.77GiB) x gpu_memory_utilization (0.90) = 14.20GiB\n"
        "INFO 12-20 20:25:46 worker.py:241] model weights take 7.51GiB; non_torch_memory takes "
        "0.39GiB; PyTorch activation peak memory takes 2.53GiB; the rest of the memory reserved "
        "for KV Cache is 3.76GiB.\n"
    )
    parsed = parse_log(read_log(text.encode()))
    figures = {
        name: parsed.figure(name)
        for name in (
            "total_bytes",
            "budget_bytes",
            "weights_bytes",
            "non_torch_bytes",
            "activation_peak_bytes",
            "kv_cache_bytes",
        )
    }
    assert figures == pytest.approx(
        {
            "total_bytes": 15.77 * GIB,
            "budget_bytes": 14.20 * GIB,
            "weights_bytes": 7.51 * GIB,
            "non_torch_bytes": 0.39 * GIB,
            "activation_peak_bytes": 2.53 * GIB,
            "kv_cache_bytes": 3.76 * GIB,
        }
    )
    assert parsed.flags()["gpu_memory_utilization"] == 0.90
    assert parsed.engine == "V0"


@pytest.mark.parametrize(
    ("text", "version", "engine"),
    [
        (
            "INFO 08-29 02:02:14 [api_server.py:1805] vLLM API server version 0.10.1.1",
            "0.10.1.1",
            "V1",
        ),
        (
            "Initializing a V0 LLM engine (v0.8.5.dev169+gce17db808.d20250423) with config: model='m'",
            "0.8.5.dev169+gce17db808.d20250423",
            "V0",
        ),
        (
            "INFO 06-20 16:09:23 llm_engine.py:164] Initializing an LLM engine (v0.5.0.post1) with config: model='m'",
            "0.5.0.post1",
            "V0",
        ),
        ("image: vllm/vllm-openai:v0.7.0", "0.7.0", "V0"),
        ("pip install vllm==0.6.4.post1", "0.6.4.post1", "V0"),
        (
            "(EngineCore_0 pid=1) INFO 01-01 00:00:00 [gpu_model_runner.py:1] Model loading took 1 GiB",
            None,
            "V1",
        ),
        (
            "ValueError: The model's max seq len (32768) is larger than the maximum number of tokens "
            "that can be stored in KV cache (24320). Try increasing `gpu_memory_utilization`",
            None,
            "V0",
        ),
    ],
)
def test_version_and_engine(text: str, version: str | None, engine: str) -> None:
    parsed = parse_log(read_log(text.encode()))
    assert (parsed.version, parsed.engine) == (version, engine)


def test_the_real_capture_is_read_after_0_30s_profiling_capture() -> None:
    # vLLM 0.30.0, Model Runner V2: v1/worker/gpu/cudagraph_utils.py:profile_cudagraph_memory runs
    # capture_model() before the KV pool, so its "took" line comes first; the real capture and
    # v1/worker/gpu_worker.py's comparison follow. Lines from batch f's f-llmlab T4 record.
    text = (
        "(EngineCore pid=1189) INFO 10-01 11:28:40 [model_runner.py:1066] Graph capturing "
        "finished in 9 secs, took 0.28 GiB\n"
        "(EngineCore pid=1189) INFO 10-01 11:28:40 [gpu_worker.py:640] Available KV cache "
        "memory: 8.67 GiB\n"
        "(EngineCore pid=1189) INFO 10-01 11:29:10 [model_runner.py:1066] Graph capturing "
        "finished in 6 secs, took 0.15 GiB\n"
        "(EngineCore pid=1189) INFO 10-01 11:29:10 [gpu_worker.py:825] CUDA graph pool memory: "
        "0.15 GiB (actual), 0.34 GiB (estimated), difference: 0.19 GiB (130.3%).\n"
    )
    assert _figure(text, "cuda_graph_bytes") == pytest.approx(0.15 * GIB)
