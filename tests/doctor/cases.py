"""The corpus of synthetic vLLM logs: one per root cause and wording, V0 and V1.

Each case is (expected kind, lines); `logs.render` prints it in any paste style. The classifier
tests name each case's cause; the output tests render every diagnosis of every case.
"""

from __future__ import annotations

from collections.abc import Callable

from kvwise.doctor import kinds
from tests.doctor.logs import (
    V0_CAPTURE,
    V0_CAPTURED,
    V0_SERVING,
    V1_CAPTURE,
    V1_CAPTURED,
    V1_SERVING,
    Line,
    error,
    info,
    torch_oom,
    traceback,
    v0_blocks,
    v0_frames,
    v0_profile,
    v0_start,
    v1_frames,
    v1_kv,
    v1_start,
    warning,
)

OLD_MAX_LEN = (
    "ValueError: The model's max seq len (32768) is larger than the maximum number of tokens "
    "that can be stored in KV cache (23776). Try increasing `gpu_memory_utilization` or "
    "decreasing `max_model_len` when initializing the engine."
)
NEW_MAX_LEN = (
    "ValueError: To serve at least one request with the models's max seq len (100000), (5.34 GiB "
    "KV cache is needed, which is larger than the available KV cache memory (4.71 GiB). Based on "
    "the available memory, the estimated maximum model length is 88176. Try increasing "
    "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine."
)
V033_MAX_LEN = (
    "ValueError: To serve at least one request with the model's max seq len (100000), (5.34 GiB "
    "KV cache is needed, which is larger than the available KV cache memory (4.71 GiB). Based on "
    "the available memory, the estimated maximum model length is 88176. Try increasing "
    "`gpu_memory_utilization` (which also controls CPU memory on the CPU backend) or decreasing "
    "`max_model_len` when initializing the engine. See "
    "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."
)
NO_BLOCKS = (
    "ValueError: No available memory for the cache blocks. Try increasing "
    "`gpu_memory_utilization` when initializing the engine."
)
V033_NO_BLOCKS = NO_BLOCKS[:-1] + (
    " (this flag also controls CPU memory reservation on the CPU backend, despite its name). "
    "See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."
)
SAMPLER = (
    "RuntimeError: CUDA out of memory occurred when warming up sampler with 256 dummy requests. "
    "Please try lowering `max_num_seqs` or `gpu_memory_utilization` when initializing the engine."
)
FREE = (
    "ValueError: Free memory on device (20.11/23.65 GiB) on startup is less than desired GPU "
    "memory utilization (0.9, 21.29 GiB). Decrease GPU memory utilization or reduce GPU memory "
    "used by other processes."
)
CORE = "core.py:700"
ENGINE = "engine.py:366"
ENGINE_FAILED = error(
    "api_server.py:1920",
    (
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core "
        "proc(s): {}"
    ),
)
NVIDIA_SMI = [
    info("-", "+-----------------------------------------------------------------------------+"),
    info("-", "| NVIDIA-SMI 550.54.15    Driver Version: 550.54.15    CUDA Version: 12.4     |"),
    info("-", "|   0  NVIDIA GeForce RTX 4090        Off |   00000000:01:00.0  On |   Off |"),
    info(
        "-", "|  0%   45C    P8             20W /  450W |   10844MiB /  24564MiB |  0%  Default |"
    ),
    info("-", "| Processes:                                                                  |"),
    info("-", "|    0   N/A  N/A      5678      C   python3                        10240MiB |"),
]


def v1_oom(*frames: str) -> list[Line]:
    return traceback(CORE, v1_frames(*frames), torch_oom())


CASES: dict[str, tuple[str, Callable[[], list[Line]]]] = {
    # --- max_model_len larger than the KV cache holds
    "v0 old wording": (
        kinds.MAX_MODEL_LEN_EXCEEDS_KV_CACHE,
        lambda: (
            v0_start() + v0_profile(kv_gib=1.27) + v0_blocks(1486) + [error(ENGINE, OLD_MAX_LEN)]
        ),
    ),
    "v0 old wording in a traceback": (
        kinds.MAX_MODEL_LEN_EXCEEDS_KV_CACHE,
        lambda: (
            v0_start("0.5.4")
            + v0_blocks(1486)
            + traceback(
                ENGINE,
                [("/vllm/worker/worker.py", "raise_if_cache_size_invalid", "raise ValueError(")],
                OLD_MAX_LEN,
            )
        ),
    ),
    "v1 new wording": (
        kinds.MAX_MODEL_LEN_EXCEEDS_KV_CACHE,
        lambda: (
            v1_start(max_model_len=100000) + v1_kv()[:2] + [error(CORE, NEW_MAX_LEN), ENGINE_FAILED]
        ),
    ),
    "v1 0.33 wording": (
        kinds.MAX_MODEL_LEN_EXCEEDS_KV_CACHE,
        lambda: (
            v1_start("0.33.0", max_model_len=100000) + v1_kv()[:2] + [error(CORE, V033_MAX_LEN)]
        ),
    ),
    "v1 without an estimate": (
        kinds.MAX_MODEL_LEN_EXCEEDS_KV_CACHE,
        lambda: (
            [*v1_start(max_model_len=100000), error(CORE, NEW_MAX_LEN.split(" Based on")[0] + ".")]
        ),
    ),
    # --- nothing left for the KV cache
    "v0 zero blocks": (
        kinds.NO_KV_CACHE_MEMORY,
        lambda: v0_start() + v0_blocks(0) + [error(ENGINE, NO_BLOCKS)],
    ),
    "v0 negative KV": (
        kinds.NO_KV_CACHE_MEMORY,
        lambda: (
            v0_start(util=0.6) + v0_profile(kv_gib=-4.41, util=0.6) + [error(ENGINE, NO_BLOCKS)]
        ),
    ),
    "v0 negative KV, error cut off": (
        kinds.NO_KV_CACHE_MEMORY,
        lambda: v0_start(util=0.6) + v0_profile(kv_gib=-4.41, util=0.6),
    ),
    "v1 0.33 wording no blocks": (
        kinds.NO_KV_CACHE_MEMORY,
        lambda: (
            [
                *v1_start("0.33.0", util=0.5),
                info("gpu_worker.py:276", "Available KV cache memory: -0.85 GiB"),
                error(CORE, V033_NO_BLOCKS),
            ]
        ),
    ),
    "v1 auto-fit impossible": (
        kinds.NO_KV_CACHE_MEMORY,
        lambda: (
            [
                *v1_start("0.33.0"),
                error(
                    CORE,
                    "ValueError: Cannot auto-fit max_model_len: not enough GPU memory available "
                    "to serve even a single token. Try increasing `gpu_memory_utilization`.",
                ),
            ]
        ),
    ),
    # --- free memory below the budget at start-up
    "v1 free memory": (
        kinds.INSUFFICIENT_FREE_MEMORY,
        lambda: [*v1_start("0.8.5"), error(CORE, FREE)],
    ),
    "v1 free memory on cuda:1": (
        kinds.INSUFFICIENT_FREE_MEMORY,
        lambda: (
            [*v1_start("0.19.0"), error(CORE, FREE.replace("on device (", "on device cuda:1 ("))]
        ),
    ),
    # --- sampler warm-up
    "v1 0.8 sampler in the profile run": (
        kinds.CUDA_OOM_SAMPLER_WARMUP,
        lambda: (
            v1_start("0.8.5")
            + v1_oom(
                "_initialize_kv_caches",
                "determine_available_memory",
                "profile_run",
                "_dummy_sampler_run",
            )
            + [
                error(CORE, "The above exception was the direct cause of the following exception:"),
                error(CORE, SAMPLER),
            ]
        ),
    ),
    "v1 0.19 sampler after capture": (
        kinds.CUDA_OOM_SAMPLER_WARMUP,
        lambda: v1_start("0.19.0") + v1_kv() + V1_CAPTURE + V1_CAPTURED + [error(CORE, SAMPLER)],
    ),
    "v1 sampler frames, message cut off": (
        kinds.CUDA_OOM_SAMPLER_WARMUP,
        lambda: v1_start() + v1_kv() + v1_oom("compile_or_warm_up_model", "_dummy_sampler_run"),
    ),
    # --- CUDA graph capture
    "v0 capture traceback": (
        kinds.CUDA_OOM_CUDA_GRAPH_CAPTURE,
        lambda: (
            v0_start()
            + v0_profile()
            + v0_blocks(2949)
            + V0_CAPTURE
            + traceback(
                ENGINE, v0_frames("capture_model", "capture"), torch_oom("20.00 MiB", "3.31 MiB")
            )
        ),
    ),
    "v1 capture_end CUDA error": (
        kinds.CUDA_OOM_CUDA_GRAPH_CAPTURE,
        lambda: (
            v1_start()
            + v1_kv()
            + V1_CAPTURE
            + traceback(
                CORE,
                v1_frames("compile_or_warm_up_model", "capture_model", "__call__", "capture_end"),
                "RuntimeError: CUDA error: out of memory",
            )
        ),
    ),
    "v0 capture, no traceback": (
        kinds.CUDA_OOM_CUDA_GRAPH_CAPTURE,
        lambda: v0_start() + v0_blocks(2949) + V0_CAPTURE + [error(ENGINE, torch_oom())],
    ),
    "v0 0.5 capture wording": (
        kinds.CUDA_OOM_CUDA_GRAPH_CAPTURE,
        lambda: (
            v0_start("0.5.4")
            + v0_blocks(2949)
            + [
                info(
                    "model_runner.py:1024",
                    (
                        "Capturing the model for CUDA graphs. This may lead to unexpected consequences if "
                        "the model is not static."
                    ),
                ),
                info(
                    "model_runner.py:1028",
                    (
                        "CUDA graphs can take additional 1~3 GiB memory per GPU. If you are running out of "
                        "memory, consider decreasing `gpu_memory_utilization` or enforcing eager mode."
                    ),
                ),
                error(ENGINE, torch_oom()),
            ]
        ),
    ),
    # --- profile run (activation peak)
    "v1 profile run": (
        kinds.CUDA_OOM_PROFILE_RUN,
        lambda: (
            v1_start()
            + v1_oom(
                "_initialize_kv_caches", "determine_available_memory", "profile_run", "_dummy_run"
            )
        ),
    ),
    "v0 profile run": (
        kinds.CUDA_OOM_PROFILE_RUN,
        lambda: (
            v0_start()
            + traceback(
                ENGINE,
                v0_frames("_initialize_kv_caches", "determine_num_available_blocks", "profile_run"),
                torch_oom(),
            )
        ),
    ),
    "v1 weights loaded, then OOM": (
        kinds.CUDA_OOM_PROFILE_RUN,
        lambda: [*v1_start(), error(CORE, torch_oom())],
    ),
    # --- weights
    "v1 OOM in load_model": (
        kinds.WEIGHTS_EXCEED_MEMORY,
        lambda: v1_start()[:6] + v1_oom("load_model", "initialize_model", "create_weights"),
    ),
    "v1 linear weights message": (
        kinds.WEIGHTS_EXCEED_MEMORY,
        lambda: (
            [
                *v1_start()[:6],
                error(
                    "linear.py:210",
                    "Failed to create unquantized linear weights: " + torch_oom().split(": ", 1)[1],
                ),
                *traceback(
                    CORE,
                    v1_frames("load_model", "create_weights"),
                    "torch.OutOfMemoryError: CUDA out of memory.",
                ),
            ]
        ),
    ),
    "v0 OOM while loading shards": (
        kinds.WEIGHTS_EXCEED_MEMORY,
        lambda: (
            [
                *v0_start()[:5],
                info(
                    "-",
                    (
                        "Loading safetensors checkpoint shards:  50% Completed | 2/4 [00:03<00:03,  1.63s/it]"
                    ),
                ),
                error(ENGINE, torch_oom()),
            ]
        ),
    ),
    # --- KV cache allocation
    "v0 KV allocation": (
        kinds.CUDA_OOM_KV_CACHE_ALLOCATION,
        lambda: (
            v0_start()
            + v0_blocks(2949)
            + traceback(
                ENGINE,
                v0_frames("initialize_cache", "_init_cache_engine", "_allocate_kv_cache"),
                torch_oom("642.00 MiB", "201.00 MiB"),
            )
        ),
    ),
    "v1 KV allocation": (
        kinds.CUDA_OOM_KV_CACHE_ALLOCATION,
        lambda: (
            v1_start()
            + v1_kv()
            + v1_oom("initialize_from_config", "initialize_kv_cache", "_allocate_kv_cache_tensors")
        ),
    ),
    "v1 KV sized, then OOM": (
        kinds.CUDA_OOM_KV_CACHE_ALLOCATION,
        lambda: v1_start() + v1_kv() + [error(CORE, torch_oom())],
    ),
    # --- while serving
    "v1 OOM while serving": (
        kinds.CUDA_OOM_RUNTIME,
        lambda: v1_start() + v1_kv() + V1_CAPTURED + V1_SERVING + v1_oom("execute_model"),
    ),
    "v0 OOM after start-up": (
        kinds.CUDA_OOM_RUNTIME,
        lambda: (
            v0_start()
            + v0_blocks(2949)
            + V0_CAPTURE
            + V0_CAPTURED
            + V0_SERVING
            + [error(ENGINE, torch_oom())]
        ),
    ),
    # --- another process on the GPU
    "torch lists two processes": (
        kinds.ANOTHER_PROCESS,
        lambda: (
            [
                *v1_start(),
                error(
                    CORE,
                    torch_oom(
                        holders="Process 1234 has 10.50 GiB memory in use. Process 5678 has 12.40 GiB memory in use."
                    ),
                ),
            ]
        ),
    ),
    "nvidia-smi pasted with the OOM": (
        kinds.ANOTHER_PROCESS,
        lambda: v1_start() + v1_oom("determine_available_memory", "profile_run") + NVIDIA_SMI,
    ),
    "memory profiling disturbed": (
        kinds.ANOTHER_PROCESS,
        lambda: (
            [
                *v1_start(),
                error(
                    CORE,
                    (
                        "AssertionError: Error in memory profiling. Initial free memory 20.1 GiB, current "
                        "free memory 15.2 GiB. This happens when other processes sharing the same container "
                        "release GPU memory while vLLM is profiling during initialization."
                    ),
                ),
            ]
        ),
    ),
    "free-memory line shows others, then OOM": (
        kinds.ANOTHER_PROCESS,
        lambda: (
            [
                *v1_start("0.33.0"),
                info(
                    "gpu_worker.py:301",
                    (
                        "Free memory on device (12.01/23.65 GiB) on startup. Desired GPU memory utilization "
                        "is (0.5, 11.83 GiB)."
                    ),
                ),
                *V1_CAPTURE,
                error(CORE, torch_oom()),
            ]
        ),
    ),
    # --- host RAM
    "Killed while loading shards": (
        kinds.HOST_RAM,
        lambda: (
            [
                *v0_start()[:5],
                info(
                    "-",
                    (
                        "Loading safetensors checkpoint shards:  75% Completed | 3/4 [00:08<00:02,  "
                        "2.83s/it]Killed"
                    ),
                ),
            ]
        ),
    ),
    "docker exit 137": (
        kinds.HOST_RAM,
        lambda: [*v1_start()[:6], info("-", "vllm-1 exited with code 137")],
    ),
    "kernel OOM killer": (
        kinds.HOST_RAM,
        lambda: (
            [
                *v1_start()[:6],
                info(
                    "-",
                    (
                        "[26002.109061] Out of memory: Killed process 576419 (python) total-vm:78521468kB, "
                        "anon-rss:54398260kB"
                    ),
                ),
            ]
        ),
    ),
    "kubernetes OOMKilled": (
        kinds.HOST_RAM,
        lambda: [
            info("-", "Last State:     Terminated"),
            info("-", "  Reason:       OOMKilled"),
            info("-", "  Exit Code:    137"),
        ],
    ),
    "ray node out of memory": (
        kinds.HOST_RAM,
        lambda: (
            [
                *v0_start()[:3],
                error(
                    "-",
                    (
                        "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on "
                        "memory."
                    ),
                ),
            ]
        ),
    ),
    "v0 swap space too large": (
        kinds.HOST_RAM,
        lambda: [
            error(
                ENGINE,
                (
                    "ValueError: Too large swap space. 64.00 GiB out of the 62.70 GiB total CPU memory "
                    "is allocated for the swap space."
                ),
            )
        ],
    ),
    "engine core killed by signal 9": (
        kinds.HOST_RAM,
        lambda: (
            [
                *v1_start()[:6],
                error(
                    "api_server.py:1920",
                    (
                        "RuntimeError: Engine core initialization failed. See root cause above. Failed core "
                        "proc(s): {'EngineCore_0': -9}"
                    ),
                ),
            ]
        ),
    ),
    "shared memory full": (
        kinds.HOST_RAM,
        lambda: (
            [
                *v1_start()[:6],
                error(
                    CORE,
                    (
                        "RuntimeError: unable to write to file </torch_1234_567_0>: No space left on device "
                        "(28)"
                    ),
                ),
            ]
        ),
    ),
    # --- preemption while serving
    "v0 preemption warnings": (
        kinds.PREEMPTION,
        lambda: (
            v0_start()
            + v0_blocks(2949)
            + V0_SERVING
            + [
                warning(
                    "scheduler.py:1800",
                    (
                        f"Sequence group cmpl-{n} is preempted by PreemptionMode.RECOMPUTE mode because there "
                        f"is not enough KV cache space. This can affect the end-to-end performance. Increase "
                        f"gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory. "
                        f"total_num_cumulative_preemption={n}"
                    ),
                )
                for n in (1, 51, 101)
            ]
        ),
    ),
    "v0 stats, KV full": (
        kinds.PREEMPTION,
        lambda: (
            v0_start()
            + V0_SERVING
            + [
                info(
                    "metrics.py:351",
                    (
                        "Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 230.1 tokens/s, "
                        "Running: 12 reqs, Swapped: 0 reqs, Pending: 7 reqs, GPU KV cache usage: 99.9%, CPU "
                        "KV cache usage: 0.0%."
                    ),
                )
            ]
        ),
    ),
    "v1 stats, KV full": (
        kinds.PREEMPTION,
        lambda: (
            v1_start()
            + V1_SERVING
            + [
                info(
                    "loggers.py:118",
                    (
                        "Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 239.2 "
                        "tokens/s, Running: 8 reqs, Waiting: 5 reqs, GPU KV cache usage: 100.0%, Prefix "
                        "cache hit rate: 35.0%"
                    ),
                )
            ]
        ),
    ),
    "v1 metrics dump": (
        kinds.PREEMPTION,
        lambda: [
            info("-", "# TYPE vllm:num_preemptions_total counter"),
            info(
                "-",
                'vllm:num_preemptions_total{engine="0",model_name="Qwen/Qwen2.5-7B-Instruct"} 42.0',
            ),
        ],
    ),
    "v0 swap space exhausted": (
        kinds.PREEMPTION,
        lambda: (
            v0_start()
            + V0_SERVING
            + [
                error(
                    ENGINE,
                    (
                        "RuntimeError: Aborted due to the lack of CPU swap space. Please increase the swap "
                        "space to avoid this error."
                    ),
                )
            ]
        ),
    ),
    # --- over-long requests while serving (HTTP 400), in each release's words
    "v0 chat request over max_model_len": (
        kinds.CONTEXT_LENGTH,
        lambda: (
            v0_start()
            + V0_SERVING
            + [
                error(
                    "serving_chat.py:183",
                    "Error in preprocessing prompt inputs: This model's maximum context length "
                    "is 32768 tokens. However, you requested 33000 tokens (32000 in the "
                    "messages, 1000 in the completion). Please reduce the length of the "
                    "messages or completion.",
                ),
                info("-", 'INFO:     127.0.0.1:51234 - "POST /v1/chat/completions HTTP/1.1" 400'),
            ]
        ),
    ),
    "v1 input tokens over max_model_len": (
        kinds.CONTEXT_LENGTH,
        lambda: (
            v1_start()
            + V1_SERVING
            + [
                error(
                    "serving_chat.py:222",
                    "Error in preprocessing prompt inputs: This model's maximum context length "
                    "is 32768 tokens. However, your request has 40000 input tokens. Please "
                    "reduce the length of the input messages.",
                )
            ]
        ),
    ),
    "v1 max_tokens too large": (
        kinds.CONTEXT_LENGTH,
        lambda: (
            v1_start()
            + V1_SERVING
            + [
                error(
                    "serving_engine.py:680",
                    "'max_tokens' or 'max_completion_tokens' is too large: 2000. This model's "
                    "maximum context length is 32768 tokens and your request has 31500 input "
                    "tokens (2000 > 32768 - 31500).",
                )
            ]
        ),
    ),
    "v1 engine input check": (
        kinds.CONTEXT_LENGTH,
        lambda: (
            v1_start()
            + V1_SERVING
            + [
                error(
                    "serving_chat.py:300",
                    "ValueError: The decoder prompt (length 33000) is longer than the maximum "
                    "model length of 32768. Make sure that `max_model_len` is no smaller than "
                    "the number of text tokens.",
                )
            ]
        ),
    ),
    "agent client's 400": (
        kinds.CONTEXT_LENGTH,
        lambda: [
            error(
                "-",
                "openai.BadRequestError: Error code: 400 - {'object': 'error', 'message': "
                "\"This model's maximum context length is 32768 tokens. However, you requested "
                "33000 tokens (32000 in the messages, 1000 in the completion). Please reduce the "
                "length of the messages or completion.\", 'type': 'BadRequestError', 'param': "
                "None, 'code': 400}",
            )
        ],
    ),
    # --- the engine died or stalled while serving
    "v1 engine dead": (
        kinds.ENGINE_DEAD,
        lambda: (
            v1_start()
            + V1_SERVING
            + [
                error("async_llm.py:480", "AsyncLLM output_handler failed."),
                error(
                    "async_llm.py:480",
                    "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an "
                    "issue. See stack trace (above) for the root cause.",
                ),
            ]
        ),
    ),
    "v0 background loop died": (
        kinds.ENGINE_DEAD,
        lambda: (
            v0_start()
            + V0_SERVING
            + [
                error(
                    "serving_chat.py:521",
                    "vllm.engine.async_llm_engine.AsyncEngineDeadError: Background loop has "
                    "errored already.",
                )
            ]
        ),
    ),
    "v0 engine iteration timeout": (
        kinds.REQUEST_TIMEOUT,
        lambda: (
            v0_start()
            + V0_SERVING
            + [
                error(
                    "async_llm_engine.py:656",
                    "Engine iteration timed out. This should never happen!",
                )
            ]
        ),
    ),
    "client timeouts": (
        kinds.REQUEST_TIMEOUT,
        lambda: (
            v1_start() + V1_SERVING + [error("-", "openai.APITimeoutError: Request timed out.")]
        ),
    ),
    # --- nothing recognised
    "healthy V1 start": (
        kinds.UNKNOWN,
        lambda: v1_start() + v1_kv() + V1_CAPTURE + V1_CAPTURED + V1_SERVING,
    ),
    "healthy V0 0.5 start with its OOM hint": (
        kinds.UNKNOWN,
        lambda: (
            v0_start("0.5.4")
            + v0_blocks(2949)
            + [
                info(
                    "model_runner.py:1028",
                    (
                        "CUDA graphs can take additional 1~3 GiB memory per GPU. If you are running out of "
                        "memory, consider decreasing `gpu_memory_utilization` or enforcing eager mode."
                    ),
                )
            ]
            + V0_CAPTURED
            + V0_SERVING
        ),
    ),
    "v1 stats, KV half full": (
        kinds.UNKNOWN,
        lambda: (
            v1_start()
            + V1_SERVING
            + [
                info(
                    "loggers.py:118",
                    (
                        "Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 239.2 "
                        "tokens/s, Running: 8 reqs, Waiting: 0 reqs, GPU KV cache usage: 51.2%, Prefix cache "
                        "hit rate: 35.0%"
                    ),
                )
            ]
        ),
    ),
    "unrelated python error": (
        kinds.UNKNOWN,
        lambda: (
            [
                *v1_start()[:2],
                error(
                    CORE,
                    (
                        "ImportError: libcudart.so.12: cannot open shared object file: No such file or "
                        "directory"
                    ),
                ),
            ]
        ),
    ),
}
