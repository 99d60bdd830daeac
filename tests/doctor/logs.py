"""Synthetic vLLM logs, written from the formats real logs show (vLLM issues and committed logs).

A log is a list of `Line`s (level, the file vLLM names in its header, message); `render` prints
it the way a user pastes it: bare messages, V0 headers (`INFO 12-20 20:25:46 worker.py:241]`),
V1 headers with process tags (`(EngineCore_0 pid=62) INFO 08-29 02:03:11 [core.py:700]`),
docker compose or Kubernetes prefixes, ANSI colours, CRLF, or every newline lost.

Numbers are those of Qwen2.5-7B-Instruct in bf16 on an RTX 4090 (56 KiB of KV per token).
"""

from __future__ import annotations

from collections.abc import Callable

Line = tuple[str, str, str]  # (level, source file, message)
MODEL = "Qwen/Qwen2.5-7B-Instruct"


def info(source: str, message: str) -> Line:
    return ("INFO", source, message)


def error(source: str, message: str) -> Line:
    return ("ERROR", source, message)


def warning(source: str, message: str) -> Line:
    return ("WARNING", source, message)


# --- start-up lines, V0 (0.6.x) ---------------------------------------------------------


def v0_start(
    version: str = "0.6.4.post1", max_model_len: int = 32768, util: float = 0.9
) -> list[Line]:
    return [
        info("api_server.py:585", f"vLLM API server version {version}"),
        info(
            "api_server.py:586",
            f"args: Namespace(host=None, port=8000, model='{MODEL}', tokenizer=None, "
            f"max_model_len={max_model_len}, gpu_memory_utilization={util}, max_num_seqs=256, "
            "swap_space=4, tensor_parallel_size=1, enforce_eager=False, kv_cache_dtype='auto')",
        ),
        info(
            "llm_engine.py:249",
            f"Initializing an LLM engine (v{version}) with config: model='{MODEL}', "
            f"speculative_config=None, tokenizer='{MODEL}', skip_tokenizer_init=False, "
            "tokenizer_mode=auto, revision=None, trust_remote_code=False, dtype=torch.bfloat16, "
            f"max_seq_len={max_model_len}, download_dir=None, load_format=LoadFormat.AUTO, "
            "tensor_parallel_size=1, pipeline_parallel_size=1, disable_custom_all_reduce=False, "
            "quantization=None, enforce_eager=False, kv_cache_dtype=auto, device_config=cuda, "
            f"seed=0, served_model_name={MODEL}, num_scheduler_steps=1, "
            "chunked_prefill_enabled=False multi_step_stream_outputs=True, "
            "enable_prefix_caching=False, use_async_output_proc=True",
        ),
        info("selector.py:135", "Using Flash Attention backend."),
        info("model_runner.py:1072", f"Starting to load model {MODEL}..."),
        info("model_runner.py:1077", "Loading model weights took 14.2487 GB"),
    ]


def v0_profile(kv_gib: float = 2.52, act_gib: float = 4.35, util: float = 0.9) -> list[Line]:
    budget = 23.65 * util
    return [
        info("worker.py:241", "Memory profiling takes 1.46 seconds"),
        info(
            "worker.py:241",
            f"the current vLLM instance can use total_gpu_memory (23.65GiB) x "
            f"gpu_memory_utilization ({util:.2f}) = {budget:.2f}GiB",
        ),
        info(
            "worker.py:241",
            f"model weights take 14.25GiB; non_torch_memory takes 0.16GiB; PyTorch activation "
            f"peak memory takes {act_gib:.2f}GiB; the rest of the memory reserved for KV Cache "
            f"is {kv_gib:.2f}GiB.",
        ),
    ]


def v0_blocks(num_blocks: int, max_model_len: int = 32768) -> list[Line]:
    lines = [info("gpu_executor.py:76", f"# GPU blocks: {num_blocks}, # CPU blocks: 4681")]
    if num_blocks:
        concurrency = num_blocks * 16 / max_model_len
        lines.append(
            info(
                "gpu_executor.py:80",
                f"Maximum concurrency for {max_model_len} tokens per request: {concurrency:.2f}x",
            )
        )
    return lines


V0_CAPTURE = [
    info(
        "model_runner.py:1404",
        "Capturing cudagraphs for decoding. This may lead to unexpected consequences if the "
        "model is not static. To run the model in eager mode, set 'enforce_eager=True' or use "
        "'--enforce-eager' in the CLI.",
    ),
    info(
        "model_runner.py:1408",
        "If out-of-memory error occurs during cudagraph capture, consider decreasing "
        "`gpu_memory_utilization` or switching to eager mode. You can also reduce the "
        "`max_num_seqs` as needed to decrease memory usage.",
    ),
]
V0_CAPTURED = [info("model_runner.py:1535", "Graph capturing finished in 14 secs, took 0.42 GiB")]
V0_SERVING = [
    info("api_server.py:640", "Using supplied chat template:"),
    info("launcher.py:19", "Available routes are:"),
    info("on.py:62", "Application startup complete."),
]

# --- start-up lines, V1 (0.8 - 0.19) ------------------------------------------------------


def v1_start(
    version: str = "0.10.1.1", max_model_len: int = 32768, util: float = 0.9
) -> list[Line]:
    return [
        info("api_server.py:1805", f"vLLM API server version {version}"),
        info(
            "utils.py:326",
            f"non-default args: {{'model_tag': '{MODEL}', 'model': '{MODEL}', "
            f"'max_model_len': {max_model_len}, 'gpu_memory_utilization': {util}}}",
        ),
        info("__init__.py:1750", f"Using max model len {max_model_len}"),
        info("scheduler.py:222", "Chunked prefill is enabled with max_num_batched_tokens=2048."),
        info(
            "core.py:74",
            f"Initializing a V1 LLM engine (v{version}) with config: model='{MODEL}', "
            f"speculative_config=None, tokenizer='{MODEL}', skip_tokenizer_init=False, "
            "tokenizer_mode=auto, revision=None, trust_remote_code=False, dtype=torch.bfloat16, "
            f"max_seq_len={max_model_len}, download_dir=None, load_format=auto, "
            "tensor_parallel_size=1, pipeline_parallel_size=1, data_parallel_size=1, "
            "disable_custom_all_reduce=False, quantization=None, enforce_eager=False, "
            "kv_cache_dtype=auto, device_config=cuda, enable_prefix_caching=True, "
            'chunked_prefill_enabled=True, compilation_config={"level":3,"cudagraph_mode":1}',
        ),
        info("gpu_model_runner.py:1953", f"Starting to load model {MODEL}..."),
        info("default_loader.py:262", "Loading weights took 3.21 seconds"),
        info("gpu_model_runner.py:2007", "Model loading took 14.2487 GiB and 4.013641 seconds"),
    ]


def v1_kv(kv_gib: float = 4.71, tokens: int = 88192, max_model_len: int = 32768) -> list[Line]:
    return [
        info("backends.py:548", "Dynamo bytecode transform time: 6.41 s"),
        info("gpu_worker.py:276", f"Available KV cache memory: {kv_gib:.2f} GiB"),
        info("kv_cache_utils.py:849", f"GPU KV cache size: {tokens:,} tokens"),
        info(
            "kv_cache_utils.py:853",
            f"Maximum concurrency for {max_model_len:,} tokens per request: "
            f"{tokens / max_model_len:.2f}x",
        ),
    ]


V1_CAPTURE = [
    info(
        "gpu_model_runner.py:2630",
        "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): 100%|##########| 67/67",
    ),
]
V1_CAPTURED = [
    info("gpu_model_runner.py:2708", "Graph capturing finished in 6 secs, took 0.52 GiB")
]
V1_SERVING = [
    info("core.py:214", "init engine (profile, create kv cache, warmup model) took 25.77 seconds"),
    info("api_server.py:1880", "Starting vLLM API server 0 on http://0.0.0.0:8000"),
    info("launcher.py:36", "Available routes are:"),
]

# --- errors and tracebacks ----------------------------------------------------------------

V1_PREFIX = "/usr/local/lib/python3.12/dist-packages/vllm"
V0_PREFIX = "/usr/local/lib/python3.10/dist-packages/vllm"


def traceback(source: str, frames: list[tuple[str, str, str]], *exception: str) -> list[Line]:
    """(path under vllm/, function, code line) frames, outermost first, then the exception."""
    lines = [error(source, "Traceback (most recent call last):")]
    for path, function, code in frames:
        lines.append(error(source, f'  File "{path}", line 123, in {function}'))
        lines.append(error(source, f"    {code}"))
    return lines + [error(source, text) for text in exception]


def torch_oom(tried: str = "1.74 GiB", free: str = "605.88 MiB", holders: str = "") -> str:
    process = holders or "Including non-PyTorch memory, this process has 22.97 GiB memory in use."
    return (
        f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {tried}. GPU 0 has a "
        f"total capacity of 23.65 GiB of which {free} is free. {process} Of the allocated memory "
        "20.21 GiB is allocated by PyTorch, and 185.98 MiB is reserved by PyTorch but "
        "unallocated. If reserved but unallocated memory is large try setting "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation."
    )


def v1_frames(*names: str) -> list[tuple[str, str, str]]:
    table = {
        "run_engine_core": (
            f"{V1_PREFIX}/v1/engine/core.py",
            "engine_core = EngineCoreProc(*args, **kwargs)",
        ),
        "__init__": (f"{V1_PREFIX}/v1/engine/core.py", "self._initialize_kv_caches(vllm_config)"),
        "_initialize_kv_caches": (
            f"{V1_PREFIX}/v1/engine/core.py",
            "available_gpu_memory = self.model_executor.determine_available_memory()",
        ),
        "determine_available_memory": (
            f"{V1_PREFIX}/v1/worker/gpu_worker.py",
            "self.model_runner.profile_run()",
        ),
        "profile_run": (
            f"{V1_PREFIX}/v1/worker/gpu_model_runner.py",
            "hidden_states = self._dummy_run(self.max_num_tokens)",
        ),
        "_dummy_run": (
            f"{V1_PREFIX}/v1/worker/gpu_model_runner.py",
            "outputs = self.model(input_ids=input_ids)",
        ),
        "_dummy_sampler_run": (
            f"{V1_PREFIX}/v1/worker/gpu_model_runner.py",
            "sampler_output = self.sampler(logits=logits)",
        ),
        "compile_or_warm_up_model": (
            f"{V1_PREFIX}/v1/worker/gpu_worker.py",
            "self.model_runner.capture_model()",
        ),
        "capture_model": (
            f"{V1_PREFIX}/v1/worker/gpu_model_runner.py",
            "self._capture_cudagraphs(compilation_cases)",
        ),
        "__call__": (
            f"{V1_PREFIX}/compilation/cuda_graph.py",
            "with torch.cuda.graph(cudagraph, pool=self.graph_pool):",
        ),
        "capture_end": (
            "/usr/local/lib/python3.12/dist-packages/torch/cuda/graphs.py",
            "super().capture_end()",
        ),
        "load_model": (
            f"{V1_PREFIX}/v1/worker/gpu_model_runner.py",
            "self.model = model_loader.load_model(",
        ),
        "initialize_model": (
            f"{V1_PREFIX}/model_executor/model_loader/utils.py",
            "return model_class(vllm_config=vllm_config, prefix=prefix)",
        ),
        "create_weights": (
            f"{V1_PREFIX}/model_executor/layers/linear.py",
            "weight = ModelWeightParameter(data=torch.empty(",
        ),
        "initialize_from_config": (
            f"{V1_PREFIX}/v1/worker/gpu_worker.py",
            "self.model_runner.initialize_kv_cache(kv_cache_config)",
        ),
        "initialize_kv_cache": (
            f"{V1_PREFIX}/v1/worker/gpu_model_runner.py",
            "kv_caches = self._allocate_kv_cache_tensors(kv_cache_config)",
        ),
        "_allocate_kv_cache_tensors": (
            f"{V1_PREFIX}/v1/worker/gpu_model_runner.py",
            "tensor = torch.zeros(kv_cache_tensor.size, dtype=torch.int8, device=self.device)",
        ),
        "execute_model": (
            f"{V1_PREFIX}/v1/worker/gpu_model_runner.py",
            "model_output = self.model(input_ids=input_ids)",
        ),
    }
    return [(table[n][0], n, table[n][1]) for n in names]


def v0_frames(*names: str) -> list[tuple[str, str, str]]:
    table = {
        "from_engine_args": (f"{V0_PREFIX}/engine/llm_engine.py", "engine = cls("),
        "_initialize_kv_caches": (
            f"{V0_PREFIX}/engine/llm_engine.py",
            "num_gpu_blocks, num_cpu_blocks = (self.model_executor.determine_num_available_blocks())",
        ),
        "determine_num_available_blocks": (
            f"{V0_PREFIX}/worker/worker.py",
            "self.model_runner.profile_run()",
        ),
        "profile_run": (
            f"{V0_PREFIX}/worker/model_runner.py",
            "self.execute_model(model_input, kv_caches, intermediate_tensors)",
        ),
        "initialize_cache": (f"{V0_PREFIX}/worker/worker.py", "self._init_cache_engine()"),
        "_init_cache_engine": (
            f"{V0_PREFIX}/worker/worker.py",
            "CacheEngine(self.cache_config, self.model_config,",
        ),
        "_allocate_kv_cache": (
            f"{V0_PREFIX}/worker/cache_engine.py",
            "torch.zeros(kv_cache_shape, dtype=self.dtype, pin_memory=pin_memory, device=device))",
        ),
        "capture_model": (
            f"{V0_PREFIX}/worker/model_runner.py",
            "graph_runner.capture(**capture_inputs)",
        ),
        "capture": (
            f"{V0_PREFIX}/worker/model_runner.py",
            "with torch.cuda.graph(self._graph, pool=memory_pool, stream=stream):",
        ),
        "load_model": (
            f"{V0_PREFIX}/worker/model_runner.py",
            "self.model = get_model(vllm_config=self.vllm_config)",
        ),
        "load_weights": (
            f"{V0_PREFIX}/model_executor/models/qwen2.py",
            "weight_loader(param, loaded_weight)",
        ),
    }
    return [(table[n][0], n, table[n][1]) for n in names]


# --- rendering ------------------------------------------------------------------------------


def _v0_header(index: int, line: Line) -> str:
    level, source, message = line
    return f"{level} 12-20 20:{index // 60 % 60:02d}:{index % 60:02d} {source}] {message}"


def _v1_header(index: int, line: Line) -> str:
    level, source, message = line
    process = (
        "(APIServer pid=1)"
        if source.startswith(("api_server", "utils", "launcher"))
        else "(EngineCore_0 pid=62)"
    )
    return (
        f"{process} {level} 08-29 02:{index // 60 % 60:02d}:{index % 60:02d} [{source}] {message}"
    )


STYLES: dict[str, Callable[[int, Line], str]] = {
    "bare": lambda i, line: line[2],
    "v0_header": _v0_header,
    "v1_header": _v1_header,
    "docker": lambda i, line: f"vllm-1  | {_v0_header(i, line)}",
    "k8s": lambda i, line: f"2025-08-29T02:03:{i % 60:02d}.123456789Z {_v1_header(i, line)}",
    "ansi": lambda i, line: f"\x1b[1;32m{_v1_header(i, line)}\x1b[0m",
    "rank": lambda i, line: f"[rank0]: {line[2]}",
}


def render(lines: list[Line], style: str = "v1_header", newline: str = "\n") -> bytes:
    text = newline.join(STYLES[style](i, line) for i, line in enumerate(lines))
    return text.encode()


def collapsed(lines: list[Line]) -> bytes:
    """All newlines lost, as in many GitHub issue bodies (V1 headers keep it splittable)."""
    return " ".join(_v1_header(i, line) for i, line in enumerate(lines)).encode()
