"""CPU and host memory of one vLLM replica, and its model cache, from the plan.

CPU: vLLM V1 runs the API server, the engine core (a busy loop) and one worker process per GPU
(vllm/v1/engine/core_client.py starts the engine core; the multiprocessing executor one worker
per rank), so the request is one core for each; the limit doubles it for the tokenizer and
detokenizer threads that burst beside them.
Memory: the planner's host RAM figure (planner/hostram.py: runtime per worker, a checkpoint shard
in flight, pinned and offloaded memory). That figure is a rough estimate, so the limit adds half
again before the OOM killer acts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvwise.core.gpus import GIB
from kvwise.planner import Plan

NUM_FRONTEND_PROCESSES = 2  # API server + engine core (V1)
MEMORY_LIMIT_FACTOR = 1.5  # margin over the planner's rough host RAM estimate
CPU_LIMIT_FACTOR = 2
# model cache: the checkpoint plus 10 % and 1 GiB for tokenizer, configs and the hub's metadata
CACHE_MARGIN = 1.1
CACHE_EXTRA_BYTES = GIB


@dataclass(frozen=True)
class ReplicaResources:
    num_gpus: int  # tensor_parallel_size x pipeline_parallel_size
    cpu_request: int
    cpu_limit: int
    memory_request_gib: int
    memory_limit_gib: int
    cache_gib: int


def replica_resources(plan: Plan, checkpoint_bytes: int) -> ReplicaResources:
    num_gpus = plan.flags.tensor_parallel_size * plan.flags.pipeline_parallel_size
    cpu = NUM_FRONTEND_PROCESSES + num_gpus
    memory_gib = math.ceil(plan.host_ram_bytes / GIB)
    cache_bytes = checkpoint_bytes * CACHE_MARGIN + CACHE_EXTRA_BYTES
    return ReplicaResources(
        num_gpus=num_gpus,
        cpu_request=cpu,
        cpu_limit=cpu * CPU_LIMIT_FACTOR,
        memory_request_gib=memory_gib,
        memory_limit_gib=math.ceil(memory_gib * MEMORY_LIMIT_FACTOR),
        cache_gib=math.ceil(cache_bytes / GIB),
    )
