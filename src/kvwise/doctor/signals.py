"""What went wrong, as vLLM, PyTorch, the kernel and container runtimes word it.

`SIGNALS` maps each signal to the wordings seen across versions (V0 0.4 to V1 0.33); the
classifier weighs them. `STAGE_FRAMES` maps traceback frames to the start-up stage they belong
to, and `PHASES` the progress lines vLLM prints at each stage, so that an out-of-memory error
can be placed even when its traceback was not pasted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kvwise.doctor.figures import flexible
from kvwise.doctor.text import LogLine, LogText

SIGNALS: dict[str, tuple[str, ...]] = {
    # ValueError from the KV-capacity check; old wording (V0, <= 0.7) and new (V1)
    "max_model_len_exceeds_kv_cache": (
        r"max seq len \(\d+\)\s+is larger than the maximum number of tokens that\s+can be "
        r"stored in KV cache",
        r"To serve at least one request with the models?'?s? max seq len",
        r"KV cache is needed,?\s+which is larger than the available KV cache memory",
    ),
    "no_kv_cache_memory": (
        r"No available memory for the cache blocks",
        r"Cannot auto-fit max_model_len: not enough GPU memory",
        # hybrid (Mamba / Gated DeltaNet) models: fewer state blocks than sequences to decode,
        # raised before graph capture (vllm-project/vllm#49064, 0.28.0)
        r"max_num_seqs \(\d+\) exceeds available Mamba cache blocks \(\d+\)",
    ),
    "insufficient_free_memory_at_startup": (
        r"Free memory on device[^\n]{0,80}?on startup is less than desired GPU memory utilization",
        r"is less than the engine's budget after excluding",
        r"Externally held weights on device[^\n]{0,120}exceed the desired GPU memory",
    ),
    "profiling_disturbed": (r"Error in memory profiling\.", r"other processes sharing the same"),
    "cuda_oom_sampler_warmup": (r"CUDA out of memory occurred when warming up sampler",),
    "cuda_oom": (
        r"CUDA out of memory",
        r"(?<!ray\.exceptions\.)OutOfMemoryError",  # Ray's is about host RAM
        r"CUDA error: out of memory",
        r"cudaErrorMemoryAllocation",
        r"CUBLAS_STATUS_ALLOC_FAILED",
        r"HIP out of memory",
        # the CUDA caching allocator's failure, when only its sentence is pasted
        # (c10/cuda/CUDACachingAllocator.cpp: "Tried to allocate 20.00 MiB")
        r"Tried to allocate \d+(?:\.\d+)? (?:GiB|MiB|KiB)",
    ),
    # a user saying OOM without pasting the error
    # (not vLLM's own hint "If you are running out of memory, consider decreasing ...")
    "oom_mentioned": (
        r"OOM(?<![A-Za-z]OOM)(?:s|ed|ing|'d)?(?![A-Za-z])",  # OOM, OOMs, OOMed, CUDA OOM
        r"oom(?<![A-Za-z]oom)(?:s|ed|ing)?(?![A-Za-z-])",
        r"[Oo]ut of memory(?<!running out of memory)",
        r"[Oo]ut of (?:GPU |video )?(?:VRAM|GPU memory)",
        r"显存不足|显存不够|爆显存|显存爆|显存溢出",
    ),
    "host_ram": (
        r"(?m)Killed(?<![\w-]Killed)[ \t]*$",
        r"Out of memory: Kill(?:ed)? process",
        r"oom-kill|oom_kill_process|invoked oom-killer",
        r"OOMKilled\b",
        r"[Ee]xit(?:ed)?(?: with)?(?: exit)? (?:[Cc]ode|status)\W{0,3}137\b",
        r"returned non-zero exit status 137",
        r"killed by (?:the )?(?:SIGKILL|signal 9)",
        r"Failed core proc\(s\): \{[^}]*-9\s*\}",
        r"Task was killed due to the node running low on memory",
        r"ray\.exceptions\.OutOfMemoryError",
        r"by SIGKILL by OOM killer",
        r"Too large swap space",
        r"DefaultCPUAllocator: (?:can't allocate|not enough) memory",
        r"Cannot allocate memory",
        r"std::bad_alloc",
        r"MemoryError\b(?<![\w.]MemoryError)",
    ),
    "shared_memory": (
        r"No space left on device[^\n]{0,80}(?:shm|/dev/shm|torch_)",
        r"unable to write to file </torch_",
        r"(?m)^Bus error",
    ),
    # pinned host memory (V0 swap space) failing, as an error message (not a code line)
    "pinned_memory": (
        r"(?:[Ee]rror|failed)[^\n]{0,80}(?:cudaHostAlloc|pinned memory)",
        r"(?:cudaHostAlloc|pinned memory)[^\n]{0,80}(?:[Ee]rror|failed)",
    ),
    "swap_space_warning": (r"Possibly too large swap space",),
    "preemption": (
        r"is preempted by PreemptionMode\.\w+",
        r"Preempt(?:ed|ing) request \S+",
        r"Aborted due to the lack of CPU swap space",  # V0: preempted by swap, swap space full
        r"vllm:num_preemptions(?:_total)?(?:\{[^}\n]*\})?\s+[1-9]\d*(?:\.\d+)?",
        # V1's stats line adds "Preemptions: N" when there were any (v1/metrics/loggers.py)
        r"reqs, Preemptions: [1-9]\d*",
    ),
    # a request longer than max_model_len, rejected with HTTP 400 (V0 and V1 OpenAI servers:
    # "you requested N tokens" <= 0.10, "your request has N input tokens" later) or by the
    # engine's input check ("The decoder prompt (length N) is longer than ...", V0's warning)
    "context_length": (
        r"maximum context length is \d+ tokens",
        r"prompt \(length \d+\) is longer than the maximum model length of \d+",
        r"Input prompt \(\d+ tokens\) is too long and exceeds limit of \d+",
    ),
    # the engine died while serving; the cause is above it in the log when it was logged
    "engine_dead": (
        r"(?:Async)?EngineDeadError",
        r"Engine loop has died",
        r"Background loop has errored already",
        r"EngineCore encountered (?:an issue|a fatal error)",
        r"Engine core proc \S+ died unexpectedly",
    ),
    # requests that did not finish in time: the engine's own watchdog or the client's timeout
    "request_timeout": (
        r"Engine iteration timed out",
        r"RPC call to \w+ timed out",
        r"APITimeoutError|Request timed out\.",
        r"httpx\.ReadTimeout|ReadTimeoutError",
    ),
    "max_model_len_exceeds_model": (
        r"User-specified max_model_len \(\d+\) is greater than the derived max_model_len",
    ),
    "dtype_unsupported": (r"Bfloat16 is only supported on GPUs with compute capability",),
}
_COMPILED = {name: tuple(re.compile(flexible(p)) for p in pats) for name, pats in SIGNALS.items()}

# traceback frames -> the start-up stage they belong to, most specific first
STAGE_FRAMES: dict[str, tuple[str, ...]] = {
    "sampler_warmup": ("_dummy_sampler_run",),
    "cuda_graph_capture": (
        "capture_model",
        "_capture_cudagraphs",
        "capture_end",
        "capture_begin",
        "capture",
        "_warmup_and_capture",
    ),
    "kv_cache_allocation": (
        "initialize_kv_cache",
        "_allocate_kv_cache",
        "allocate_kv_cache",
        "_allocate_kv_cache_tensors",
        "initialize_kv_cache_tensors",
        "initialize_cache",
        "_init_cache_engine",
        "init_kv_cache",
    ),
    "profile_run": (
        "profile_run",
        "_dummy_run",
        "determine_num_available_blocks",
        "determine_available_memory",
        "_dummy_pooler_run",
    ),
    "weights": (
        "load_model",
        "load_weights",
        "get_model",
        "_initialize_model",
        "initialize_model",
        "create_weights",
        "weight_loader",
        "process_weights_after_loading",
    ),
    "runtime": ("execute_model", "_execute_model", "execute_model_async", "step_with_batch_queue"),
}
_FRAME = re.compile(r'File "(?P<path>[^"\n]+)", line \d+, in (?P<func>[\w<>]+)')

# progress lines -> the stage vLLM had reached, in start-up order
PHASES: dict[str, tuple[str, ...]] = {
    "loading": (
        r"Starting to load model",
        r"Loading (?:safetensors|pt) checkpoint shards",
        r"Loading weights",
    ),
    "weights_loaded": (
        r"Loading model weights took",
        r"Model loading took",
        r"Loading weights took",
    ),
    "profiling": (
        r"Memory profiling takes",
        r"Starting profile run",
        r"Profiling CUDA graph memory",
        r"Memory profiling results",
    ),
    "kv_cache_sized": (
        r"GPU blocks:",
        r"Available KV cache memory",
        r"GPU KV cache size",
        r"the rest of the memory reserved for KV Cache",
        r"num_gpu_blocks is:",
    ),
    "capturing": (
        r"Capturing (?:cudagraphs|CUDA graphs?|the model for CUDA graphs|CUDA graph shapes)",
        r"CUDA graphs can take additional",
    ),
    "captured": (r"Graph capturing finished",),
    "serving": (
        r"init engine \(profile, create kv cache, warmup model\) took",
        r"Starting vLLM API server",
        r"Application startup complete",
        r"Uvicorn running on",
        r"Avg prompt throughput",
        r"Added request",
        r"POST /v1/",
    ),
}
PHASE_ORDER = tuple(PHASES)
_PHASES = {name: re.compile("|".join(pats)) for name, pats in PHASES.items()}


@dataclass(frozen=True)
class Hit:
    signal: str
    index: int  # position of the line in LogText.lines
    line: LogLine
    text: str  # the matched text


def find_signals(log: LogText) -> dict[str, tuple[Hit, ...]]:
    """Every line that carries each signal (one hit per line), in log order."""
    found: dict[str, dict[int, Hit]] = {}
    for name, patterns in _COMPILED.items():
        for pattern in patterns:
            for match in pattern.finditer(log.joined):
                index = log.index_at(match.start())
                hit = Hit(name, index, log.lines[index], match.group(0))
                found.setdefault(name, {}).setdefault(index, hit)
    return {name: tuple(hits[i] for i in sorted(hits)) for name, hits in found.items()}


def find_phases(log: LogText) -> dict[str, tuple[LogLine, ...]]:
    """For each stage, the lines that show vLLM reached it."""
    phases: dict[str, tuple[LogLine, ...]] = {}
    for name, pattern in _PHASES.items():
        offsets = [m.start() for m in pattern.finditer(log.joined)]
        if offsets:
            phases[name] = tuple(log.line_at(o) for o in offsets)
    return phases


def frames_before(log: LogText, index: int, window: int = 400) -> list[str]:
    """Function and file names of the traceback that ends at line `index` (innermost last)."""
    names: list[str] = []
    for earlier in reversed(log.lines[max(0, index - window) : index + 1]):
        if "Traceback (most recent call last)" in earlier.message:
            break
        match = _FRAME.search(earlier.message)
        if match:
            names.append(match["func"])
            names.append(match["path"].rsplit("/", 1)[-1])
    return names[::-1]


def frames_after(log: LogText, index: int, window: int = 80) -> list[str]:
    """Frames of a traceback printed after a logged error line (vLLM logs, then re-raises)."""
    names: list[str] = []
    for later in log.lines[index + 1 : index + 1 + window]:
        match = _FRAME.search(later.message)
        if match:
            names += [match["func"], match["path"].rsplit("/", 1)[-1]]
    return names


_CALL = re.compile(r"^\s*(?:[\w.]+\s*=\s*)?(?:self\.)?(?:\w+\.)*(?P<func>\w+)\(")


def frames_and_calls(log: LogText, start: int, window: int = 400) -> list[str]:
    """Frames of a traceback from line `start` on, with the functions its source lines call
    (`self.model_runner.capture_model()` under `compile_or_warm_up_model`): a pasted traceback
    cut with '...' often keeps the call while the frame of the callee was left out."""
    names: list[str] = []
    after_frame = False
    for line in log.lines[start : start + window]:
        match = _FRAME.search(line.message)
        if match:
            names += [match["func"], match["path"].rsplit("/", 1)[-1]]
            after_frame = True
            continue
        call = _CALL.match(line.message) if after_frame else None
        if call:
            names.append(call["func"])
        after_frame = False
    return names


def stage_of_frames(names: list[str]) -> str | None:
    present = set(names)
    for stage, frames in STAGE_FRAMES.items():
        if present.intersection(frames):
            return stage
    if "cuda_graph.py" in present or "graphs.py" in present:
        return "cuda_graph_capture"
    return None
