"""Host RAM a vLLM deployment needs: rough, documented estimates (not fitted on logs).

The OOM killer ("Killed") acts on host memory: every GPU worker loads the CUDA and torch
runtime, V0 pins `swap_space` GiB per GPU, `--cpu-offload-gb` keeps weights in host memory, and
loading reads checkpoint shards through host memory.
"""

from __future__ import annotations

from kvwise.core.gpus import GIB
from kvwise.core.models import ModelSpec
from kvwise.planner.result import ResolvedFlags

FRONTEND_BYTES = int(1.5 * GIB)  # API server and engine-core processes (~0.6 GiB each seen on CPU)
WORKER_RUNTIME_BYTES = int(2.0 * GIB)  # torch + CUDA libraries + allocator state per GPU worker
SHARD_BYTES = int(5.0 * GIB)  # a checkpoint shard in flight while loading (HF shards are <= 5 GB)


def host_ram_bytes(
    model: ModelSpec, resolved: ResolvedFlags, num_workers: int, weights_per_rank: int
) -> int:
    del model  # the estimate does not depend on the architecture beyond the weight bytes
    pinned = resolved.swap_space * GIB  # V0 pins swap space per GPU; V1 has none
    offload = resolved.cpu_offload_gb * GIB
    loading = min(SHARD_BYTES, weights_per_rank)
    per_worker = WORKER_RUNTIME_BYTES + pinned + offload + loading
    return int(FRONTEND_BYTES + num_workers * per_worker)
