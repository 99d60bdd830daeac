"""The root-cause vocabulary of `kvwise doctor`.

The first seven are the brief's `error.kind` values (the same strings the planner uses); the
rest name what a log can show beyond the planner's start-up verdict: an out-of-memory error at a
start-up stage the log pins down, another process on the GPU, run-time preemption, and unknown.
"""

from __future__ import annotations

from kvwise.planner.result import (
    CUDA_OOM_CUDA_GRAPH_CAPTURE,
    CUDA_OOM_PROFILE_RUN,
    CUDA_OOM_SAMPLER_WARMUP,
    HOST_RAM,
    INSUFFICIENT_FREE_MEMORY,
    MAX_MODEL_LEN_EXCEEDS_KV_CACHE,
    NO_KV_CACHE_MEMORY,
    WEIGHTS_EXCEED_MEMORY,
)

CUDA_OOM = "cuda_oom"  # out of GPU memory, stage not shown
CUDA_OOM_KV_CACHE_ALLOCATION = "cuda_oom_kv_cache_allocation"
CUDA_OOM_RUNTIME = "cuda_oom_runtime"  # after start-up, while serving
ANOTHER_PROCESS = "another_process"
PREEMPTION = "preemption"
CONTEXT_LENGTH = "context_length_exceeded"  # a request over max_model_len: HTTP 400 while serving
ENGINE_DEAD = "engine_dead"  # the engine died while serving, cause not in the log
REQUEST_TIMEOUT = "request_timeout"  # requests that outlived a timeout while serving
UNKNOWN = "unknown"

ALL_KINDS = (
    MAX_MODEL_LEN_EXCEEDS_KV_CACHE,
    NO_KV_CACHE_MEMORY,
    INSUFFICIENT_FREE_MEMORY,
    WEIGHTS_EXCEED_MEMORY,
    CUDA_OOM_SAMPLER_WARMUP,
    CUDA_OOM_CUDA_GRAPH_CAPTURE,
    HOST_RAM,
    CUDA_OOM,
    CUDA_OOM_PROFILE_RUN,
    CUDA_OOM_KV_CACHE_ALLOCATION,
    CUDA_OOM_RUNTIME,
    ANOTHER_PROCESS,
    PREEMPTION,
    CONTEXT_LENGTH,
    ENGINE_DEAD,
    REQUEST_TIMEOUT,
    UNKNOWN,
)

# failures while serving, after a start-up that went through
RUNTIME_KINDS = frozenset(
    {CUDA_OOM_RUNTIME, PREEMPTION, CONTEXT_LENGTH, ENGINE_DEAD, REQUEST_TIMEOUT}
)

# the kinds the planner itself predicts (its error.kind vocabulary)
PLANNER_KINDS = frozenset(ALL_KINDS[:7])

# start-up stage of an out-of-memory error -> kind
KIND_OF_STAGE = {
    "weights": WEIGHTS_EXCEED_MEMORY,
    "profile_run": CUDA_OOM_PROFILE_RUN,
    "kv_cache_allocation": CUDA_OOM_KV_CACHE_ALLOCATION,
    "cuda_graph_capture": CUDA_OOM_CUDA_GRAPH_CAPTURE,
    "sampler_warmup": CUDA_OOM_SAMPLER_WARMUP,
    "runtime": CUDA_OOM_RUNTIME,
}

# the stage that follows the last progress line vLLM printed (start-up order of both engines:
# load weights -> profile run -> size KV -> allocate KV -> capture graphs -> V1 sampler warm-up)
_NEXT_STAGE = {
    "loading": "weights",
    "weights_loaded": "profile_run",
    "profiling": "profile_run",
    "kv_cache_sized": "kv_cache_allocation",
    "capturing": "cuda_graph_capture",
    "serving": "runtime",
}


def stage_after_phase(phase: str, engine: str | None) -> str | None:
    if phase == "captured":
        # V1 warms the sampler up after capture; V0 was ready to serve
        return "sampler_warmup" if engine == "V1" else "runtime"
    return _NEXT_STAGE.get(phase)
