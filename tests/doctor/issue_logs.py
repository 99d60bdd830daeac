"""Out-of-memory tracebacks in the shapes public vLLM issues show, one per start-up stage.

Each log is rebuilt from the issue it cites (process tags, vLLM's header, file paths, the
frames of the traceback, PyTorch's message), trimmed to the lines that matter. PyTorch's figures
are the issue's where its excerpt shows them (#14095, #15598, #7593's banner lines); elsewhere
they are illustrative and consistent with vLLM alone on the card (total = free + this process).
The stage is what the traceback's frames (or the last progress line) show.
"""

from __future__ import annotations

from dataclasses import dataclass

OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {tried}. GPU {gpu} has a "
    "total capacity of {total} of which {free} is free. Including non-PyTorch memory, this "
    "process has {held} memory in use. Of the allocated memory {held} is allocated by PyTorch, "
    "and 20.00 MiB is reserved by PyTorch but unallocated."
)


@dataclass(frozen=True)
class IssueLog:
    url: str
    kind: str
    stage: str
    text: str


def _frames(prefix: str, frames: list[tuple[str, str]]) -> list[str]:
    lines = [f"{prefix} Traceback (most recent call last):"]
    for path, function in frames:
        lines.append(f'{prefix}   File "{path}", line 100, in {function}')
    return lines


def _v1_sampler() -> str:
    # https://github.com/vllm-project/vllm/issues/14452 (0.8, V1, multiproc workers): the OOM
    # inside the sampler warm-up, re-raised by vLLM with its own message
    p = "(VllmWorker rank=2 pid=10743) ERROR 03-16 06:12:38 [multiproc_executor.py:375]"
    site = "/workspace/vllm/vllm"
    lines = [
        "(VllmWorker rank=2 pid=10743) INFO 03-16 06:12:30 [gpu_model_runner.py:1434] Graph "
        "capturing finished in 22 secs, took 0.64 GiB",
        f"{p} WorkerProc hit an exception: %s",
        *_frames(
            p,
            [
                (f"{site}/v1/worker/gpu_model_runner.py", "_dummy_sampler_run"),
                (f"{site}/model_executor/models/llama.py", "sample"),
                (f"{site}/v1/sample/sampler.py", "forward"),
            ],
        ),
        p
        + " "
        + OOM.format(tried="1.16 GiB", gpu=2, total="31.36 GiB", free="1.02 GiB", held="30.33 GiB"),
        f"{p} The above exception was the direct cause of the following exception:",
        f"{p} RuntimeError: CUDA out of memory occurred when warming up sampler with 1024 dummy "
        "requests. Please try lowering `max_num_seqs` or `gpu_memory_utilization` when "
        "initializing the engine.",
    ]
    return "\n".join(lines)


def _v1_capture() -> str:
    # https://github.com/vllm-project/vllm/pull/30515 (V1, EngineCore_DP0): capture_model ->
    # _capture_cudagraphs -> _warmup_and_capture, OOM inside the capture
    p = "(EngineCore_DP0 pid=387) ERROR 03-08 16:44:32 [core.py:1111]"
    site = "/usr/local/lib/python3.12/dist-packages/vllm"
    lines = _frames(
        p,
        [
            (f"{site}/v1/engine/core.py", "run_engine_core"),
            (f"{site}/v1/engine/core.py", "_initialize_kv_caches"),
            (f"{site}/v1/worker/gpu_worker.py", "compile_or_warm_up_model"),
            (f"{site}/tracing/otel.py", "sync_wrapper"),
            (f"{site}/v1/worker/gpu_model_runner.py", "capture_model"),
            (f"{site}/v1/worker/gpu_model_runner.py", "_capture_cudagraphs"),
            (f"{site}/v1/worker/gpu_model_runner.py", "_warmup_and_capture"),
        ],
    )
    lines.append(
        p
        + " "
        + OOM.format(
            tried="64.00 MiB", gpu=0, total="119.70 GiB", free="38.19 MiB", held="119.65 GiB"
        )
    )
    return "\n".join(lines)


def _v0_capture_progress() -> str:
    # https://github.com/vllm-project/vllm/issues/7593 (0.5.4, V0, gemma-2-9b on 8x L4): the
    # capture banner, then the OOM without the frames
    tag = "(VllmWorkerProcess pid=13109)"
    return "\n".join(
        [
            "INFO 08-19 07:51:03 model_runner.py:732] Loading model weights took 2.3463 GB",
            "INFO 08-19 07:51:08 distributed_gpu_executor.py:56] # GPU blocks: 22982, # CPU "
            "blocks: 6241",
            f"{tag} INFO 08-19 07:51:12 model_runner.py:1024] Capturing the model for CUDA "
            "graphs. This may lead to unexpected consequences if the model is not static.",
            f"{tag} INFO 08-19 07:51:12 model_runner.py:1028] CUDA graphs can take additional "
            "1~3 GiB memory per GPU. If you are running out of memory, consider decreasing "
            "`gpu_memory_utilization` or enforcing eager mode.",
            f"{tag} ERROR 08-19 07:51:20 multiproc_worker_utils.py:226] "
            + OOM.format(
                tried="20.00 MiB", gpu=3, total="21.96 GiB", free="11.06 MiB", held="21.94 GiB"
            ),
        ]
    )


def _v0_capture_ray() -> str:
    # https://github.com/vllm-project/vllm/issues/15598 (0.8, V0 over Ray, 44.53 GiB cards at
    # utilization 0.98): "Capturing cudagraphs for decoding", then the worker's error
    tag = "(RayWorkerWrapper pid=206994, ip=192.168.10.25)"
    return "\n".join(
        [
            f"{tag} INFO 03-27 10:29:01 [worker.py:267] the current vLLM instance can use "
            "total_gpu_memory (44.53GiB) x gpu_memory_utilization (0.98) = 43.64GiB",
            f"{tag} INFO 03-27 10:29:01 [worker.py:267] model weights take 20.64GiB; "
            "non_torch_memory takes 0.28GiB; PyTorch activation peak memory takes 1.52GiB; the "
            "rest of the memory reserved for KV Cache is 21.20GiB.",
            f"{tag} INFO 03-27 10:29:03 [model_runner.py:1442] Capturing cudagraphs for "
            "decoding. This may lead to unexpected consequences if the model is not static.",
            f"{tag} ERROR 03-27 10:29:13 [worker_base.py:620] Error executing method "
            "'determine_num_available_blocks'. This might cause deadlock in distributed "
            "execution.",
            f"{tag} ERROR 03-27 10:29:13 [worker_base.py:620] torch.OutOfMemoryError: CUDA out "
            "of memory. Tried to allocate 2.00 MiB. GPU 6 has a total capacity of 44.53 GiB of "
            "which 448.00 KiB is free.",
        ]
    )


def _v0_kv_allocation() -> str:
    # https://github.com/gensyn-ai/rl-swarm/issues/314 (V0 through TRL's LLM(), [rank0]:)
    site = "/root/rl-swarm/.venv/lib/python3.10/site-packages/vllm"
    lines = _frames(
        "[rank0]:",
        [
            (
                "/root/rl-swarm/.venv/lib/python3.10/site-packages/trl/trainer/grpo_trainer.py",
                "__init__",
            ),
            (f"{site}/entrypoints/llm.py", "__init__"),
            (f"{site}/engine/llm_engine.py", "from_engine_args"),
            (f"{site}/engine/llm_engine.py", "_initialize_kv_caches"),
            (f"{site}/executor/executor_base.py", "initialize_cache"),
            (f"{site}/executor/executor_base.py", "collective_rpc"),
            (f"{site}/worker/worker.py", "initialize_cache"),
            (f"{site}/worker/worker.py", "_init_cache_engine"),
            (f"{site}/worker/cache_engine.py", "__init__"),
            (f"{site}/worker/cache_engine.py", "_allocate_kv_cache"),
        ],
    )
    lines.append(
        "[rank0]: "
        + OOM.format(tried="1.40 GiB", gpu=0, total="23.58 GiB", free="1.04 GiB", held="22.53 GiB")
    )
    return "\n".join(lines)


def _v1_profile_run() -> str:
    # https://github.com/vllm-project/vllm/issues/17631 (0.8.5, V1, Llama 3.3 on A10s)
    p = "(VllmWorker rank=4 pid=555) ERROR 05-04 12:38:38 [multiproc_executor.py:380]"
    site = "/opt/conda/lib/python3.11/site-packages/vllm"
    lines = [f"{p} WorkerProc hit an exception."]
    lines += _frames(
        p,
        [
            (f"{site}/v1/executor/multiproc_executor.py", "worker_busy_loop"),
            (
                "/opt/conda/lib/python3.11/site-packages/torch/utils/_contextlib.py",
                "decorate_context",
            ),
            (f"{site}/v1/worker/gpu_worker.py", "determine_available_memory"),
            (f"{site}/v1/worker/gpu_model_runner.py", "profile_run"),
            (f"{site}/v1/worker/gpu_model_runner.py", "_dummy_run"),
            (f"{site}/model_executor/models/llama.py", "forward"),
        ],
    )
    lines.append(
        p
        + " "
        + OOM.format(tried="1.96 GiB", gpu=4, total="22.07 GiB", free="1.06 GiB", held="20.99 GiB")
    )
    return "\n".join(lines)


def _v1_profile_uniproc() -> str:
    # https://github.com/vllm-project/vllm/issues/12529 (0.7.x, V1, uniproc executor)
    p = "ERROR 03-13 09:00:43 [core.py:330]"
    site = "/home/gaocegege/code/vllm/vllm"
    lines = _frames(
        p,
        [
            (f"{site}/v1/engine/core.py", "_initialize_kv_caches"),
            (f"{site}/v1/executor/abstract.py", "determine_available_memory"),
            (f"{site}/executor/uniproc_executor.py", "collective_rpc"),
            (f"{site}/utils.py", "run_method"),
            (f"{site}/v1/worker/gpu_worker.py", "determine_available_memory"),
            (f"{site}/v1/worker/gpu_model_runner.py", "profile_run"),
        ],
    )
    lines.append(
        p
        + " "
        + OOM.format(tried="3.71 GiB", gpu=0, total="79.10 GiB", free="2.93 GiB", held="76.16 GiB")
    )
    return "\n".join(lines)


def _v0_load_model() -> str:
    # https://github.com/vllm-project/vllm/issues/14095 (0.7.x, V0 multiproc workers, 14.62
    # GiB cards): "Exception in worker VllmWorkerProcess while processing method load_model."
    tag = "(VllmWorkerProcess pid=195297) ERROR 03-02 19:49:43 [multiproc_worker_utils.py:242]"
    site = "/home/uefi/vllm/source/vllm/vllm"
    lines = [f"{tag} Exception in worker VllmWorkerProcess while processing method load_model."]
    lines += _frames(
        tag,
        [
            (f"{site}/executor/multiproc_worker_utils.py", "_run_worker_process"),
            (f"{site}/utils.py", "run_method"),
            (f"{site}/worker/worker.py", "load_model"),
            (f"{site}/worker/model_runner.py", "load_model"),
            (f"{site}/model_executor/model_loader/__init__.py", "get_model"),
            (f"{site}/model_executor/model_loader/loader.py", "load_model"),
            (f"{site}/model_executor/model_loader/loader.py", "_initialize_model"),
        ],
    )
    lines.append(
        tag
        + " "
        + OOM.format(tried="20.00 MiB", gpu=2, total="14.62 GiB", free="3.31 MiB", held="14.61 GiB")
    )
    return "\n".join(lines)


def _v1_kv_allocation_rocm() -> str:
    # https://github.com/lemonade-sdk/vllm-rocm/issues/5 (V1 on ROCm, gfx1151, its launcher's
    # own prefix): initialize_from_config -> initialize_kv_cache -> initialize_kv_cache_tensors
    p = "2026-05-08 11:50:14.753 [Info] (Process) (EngineCore pid=3043)"
    site = "/var/lib/lemonade/.cache/lemonade/bin/vllm/rocm/lib/python3.12/site-packages/vllm"
    lines = _frames(
        p,
        [
            (f"{site}/v1/engine/core.py", "_initialize_kv_caches"),
            (f"{site}/v1/executor/abstract.py", "initialize_from_config"),
            (f"{site}/tracing/otel.py", "sync_wrapper"),
            (f"{site}/v1/worker/gpu_worker.py", "initialize_from_config"),
            (f"{site}/v1/worker/gpu_model_runner.py", "initialize_kv_cache"),
            (f"{site}/v1/worker/gpu_model_runner.py", "initialize_kv_cache_tensors"),
        ],
    )
    lines.append(
        f"{p} torch.OutOfMemoryError: HIP out of memory. Tried to allocate 24.00 GiB. GPU 0 has "
        "a total capacity of 64.00 GiB of which 20.12 GiB is free. Including non-PyTorch "
        "memory, this process has 43.87 GiB memory in use."
    )
    return "\n".join(lines)


def _v0_capture_from_initialize_cache() -> str:
    # https://github.com/vllm-project/vllm/issues/22624 (V0, speculative decoding on an A800):
    # initialize_cache -> _warm_up_model -> capture_model; the capture is the stage
    p = "ERROR 08-11 15:39:04 [engine.py:448]"
    site = "/root/miniforge3/envs/vllm_infer/lib/python3.9/site-packages/vllm"
    lines = _frames(
        p,
        [
            (f"{site}/utils.py", "run_method"),
            (f"{site}/spec_decode/spec_decode_worker.py", "initialize_cache"),
            (f"{site}/worker/worker_base.py", "initialize_cache"),
            (f"{site}/worker/worker.py", "initialize_cache"),
            (f"{site}/worker/worker.py", "_warm_up_model"),
            (f"{site}/worker/model_runner.py", "capture_model"),
        ],
    )
    lines.append(
        p
        + " "
        + OOM.format(
            tried="64.00 MiB", gpu=0, total="79.33 GiB", free="10.81 MiB", held="79.31 GiB"
        )
    )
    return "\n".join(lines)


ISSUE_LOGS = (
    IssueLog(
        "https://github.com/vllm-project/vllm/issues/14452",
        "cuda_oom_sampler_warmup",
        "sampler_warmup",
        _v1_sampler(),
    ),
    IssueLog(
        "https://github.com/vllm-project/vllm/pull/30515",
        "cuda_oom_cuda_graph_capture",
        "cuda_graph_capture",
        _v1_capture(),
    ),
    IssueLog(
        "https://github.com/vllm-project/vllm/issues/7593",
        "cuda_oom_cuda_graph_capture",
        "cuda_graph_capture",
        _v0_capture_progress(),
    ),
    IssueLog(
        "https://github.com/vllm-project/vllm/issues/15598",
        "cuda_oom_cuda_graph_capture",
        "cuda_graph_capture",
        _v0_capture_ray(),
    ),
    IssueLog(
        "https://github.com/gensyn-ai/rl-swarm/issues/314",
        "cuda_oom_kv_cache_allocation",
        "kv_cache_allocation",
        _v0_kv_allocation(),
    ),
    IssueLog(
        "https://github.com/lemonade-sdk/vllm-rocm/issues/5",
        "cuda_oom_kv_cache_allocation",
        "kv_cache_allocation",
        _v1_kv_allocation_rocm(),
    ),
    IssueLog(
        "https://github.com/vllm-project/vllm/issues/22624",
        "cuda_oom_cuda_graph_capture",
        "cuda_graph_capture",
        _v0_capture_from_initialize_cache(),
    ),
    IssueLog(
        "https://github.com/vllm-project/vllm/issues/17631",
        "cuda_oom_profile_run",
        "profile_run",
        _v1_profile_run(),
    ),
    IssueLog(
        "https://github.com/vllm-project/vllm/issues/12529",
        "cuda_oom_profile_run",
        "profile_run",
        _v1_profile_uniproc(),
    ),
    IssueLog(
        "https://github.com/vllm-project/vllm/issues/14095",
        "weights_exceed_memory",
        "weights",
        _v0_load_model(),
    ),
)
