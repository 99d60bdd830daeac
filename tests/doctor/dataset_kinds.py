"""The validation set's failure kinds, read as the doctor's kinds (tests/doctor/test_validation.py
and benchmarks/doctor_accuracy.py score the doctor through it)."""

from __future__ import annotations

from kvwise.doctor.kinds import (
    ANOTHER_PROCESS,
    CUDA_OOM,
    CUDA_OOM_CUDA_GRAPH_CAPTURE,
    CUDA_OOM_KV_CACHE_ALLOCATION,
    CUDA_OOM_PROFILE_RUN,
    CUDA_OOM_RUNTIME,
    CUDA_OOM_SAMPLER_WARMUP,
    HOST_RAM,
    INSUFFICIENT_FREE_MEMORY,
    MAX_MODEL_LEN_EXCEEDS_KV_CACHE,
    NO_KV_CACHE_MEMORY,
    WEIGHTS_EXCEED_MEMORY,
)

# Out-of-memory kinds: each names where the memory ran out, when the log shows it
OOM_KINDS = frozenset(
    {
        CUDA_OOM,
        CUDA_OOM_PROFILE_RUN,
        CUDA_OOM_KV_CACHE_ALLOCATION,
        CUDA_OOM_CUDA_GRAPH_CAPTURE,
        CUDA_OOM_SAMPLER_WARMUP,
        CUDA_OOM_RUNTIME,
        WEIGHTS_EXCEED_MEMORY,
        ANOTHER_PROCESS,
    }
)

# The validation set's `failure_kind` -> the kinds that are right for it. The set says
# `cuda_oom` where its collector did not identify the stage; the doctor names the stage when
# the log shows one (a traceback frame, the last progress line, another process), so any
# out-of-memory kind is right there. `oom_reported_no_error_text` is a user's "OOM" without
# the error: the doctor says cuda_oom (stage unknown) unless the text places it.
DATASET_KINDS: dict[str, frozenset[str]] = {
    MAX_MODEL_LEN_EXCEEDS_KV_CACHE: frozenset({MAX_MODEL_LEN_EXCEEDS_KV_CACHE}),
    NO_KV_CACHE_MEMORY: frozenset({NO_KV_CACHE_MEMORY}),
    INSUFFICIENT_FREE_MEMORY: frozenset({INSUFFICIENT_FREE_MEMORY}),
    WEIGHTS_EXCEED_MEMORY: frozenset({WEIGHTS_EXCEED_MEMORY}),
    CUDA_OOM_SAMPLER_WARMUP: frozenset({CUDA_OOM_SAMPLER_WARMUP}),
    CUDA_OOM_CUDA_GRAPH_CAPTURE: frozenset({CUDA_OOM_CUDA_GRAPH_CAPTURE}),
    HOST_RAM: frozenset({HOST_RAM}),
    "cuda_oom": OOM_KINDS,
    "oom_reported_no_error_text": OOM_KINDS,
}
