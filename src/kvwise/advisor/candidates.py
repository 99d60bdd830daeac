"""The configurations worth trying for a workload: a small, deliberate search space.

Each axis is a knob the seed threads argue about. Values the user set on the command line are
kept fixed; the rest are searched. Every candidate is planned first (cheap) and only those that
start are simulated.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvwise.core.catalog import load_model
from kvwise.core.flags import VllmFlags
from kvwise.core.models import ModelSpec
from kvwise.errors import KvwiseError
from kvwise.sim.interconnect import Topology
from kvwise.sim.workloads import Workload, required_max_model_len

LENGTH_ROUNDING = 1024  # recommended max_model_len: the workload's longest request, rounded up


@dataclass(frozen=True)
class Candidate:
    model: ModelSpec
    flags: VllmFlags
    replicas: int  # vLLM instances across the GPUs, each on tp x pp GPUs

    @property
    def tp(self) -> int:
        return self.flags.tensor_parallel_size or 1

    @property
    def pp(self) -> int:
        return self.flags.pipeline_parallel_size or 1

    def label(self) -> str:
        """Short: the checkpoint's quantization and the knobs that differ from vLLM's defaults."""
        quant = self.model.quant
        parts = [
            quant.method.upper() if quant else "bf16" if self.model.dtype != "float16" else "fp16"
        ]
        values = self.flags.set_values()
        if str(values.get("kv_cache_dtype", "auto")).startswith("fp8"):
            parts.append("fp8 KV")
        if "max_num_seqs" in values:
            parts.append(f"seqs {values['max_num_seqs']}")
        if "gpu_memory_utilization" in values:
            parts.append(f"util {values['gpu_memory_utilization']}")
        if values.get("enforce_eager"):
            parts.append("eager")
        if self.tp > 1:
            parts.append(f"TP{self.tp}")
        if self.pp > 1:
            parts.append(f"PP{self.pp}")
        if self.replicas > 1:
            parts.append(f"{self.replicas} replicas")
        return " · ".join(parts)


def peak_kv_demand_tokens(workload: Workload) -> int:
    """Tokens all sessions hold at their largest, if they all peak together (shared system
    prompt blocks counted once, as vLLM's prefix cache shares them)."""
    shared: dict[int, int] = {}
    total = 0
    for session in workload.sessions:
        history, first = 0, session.turns[0].new_segments
        for turn in session.turns:
            prompt = (history if session.keeps_history else 0) + sum(
                n for _, n in turn.new_segments
            )
            history = prompt + turn.output_len
        total += history
        if first:
            seg_id, length = first[0]
            shared[seg_id] = length
    duplicates = sum(shared.values()) * (len(workload.sessions) - len(shared)) if shared else 0
    return max(total - duplicates, 0)


def _rounded_len(length: int, model: ModelSpec) -> int:
    rounded = -(-length // LENGTH_ROUNDING) * LENGTH_ROUNDING
    return min(rounded, model.max_position_embeddings)


def _awq_variant(model: ModelSpec) -> ModelSpec | None:
    if model.quant is not None:
        return None
    try:
        return load_model(f"{model.model_id}-AWQ")
    except KvwiseError:
        return None


def _tp_sizes(model: ModelSpec, gpus_per_node: int) -> list[int]:
    """Tensor-parallel sizes inside one node that the model's heads allow."""
    out = []
    for tp in range(1, gpus_per_node + 1):
        if gpus_per_node % tp or model.num_attention_heads % tp:
            continue
        kv = model.num_kv_heads
        if (kv >= tp and kv % tp) or (kv < tp and tp % kv):
            continue
        out.append(tp)
    return out


def layouts(model: ModelSpec, topology: Topology) -> list[tuple[int, int, int]]:
    """(tensor_parallel_size, pipeline_parallel_size, replicas) over every GPU: tensor
    parallelism inside a node, pipeline stages one per node across nodes (vLLM's advice for
    multi-node: docs.vllm.ai/en/latest/serving/distributed_serving.html), the rest replicas."""
    stage_counts = [pp for pp in range(1, topology.nodes + 1) if topology.nodes % pp == 0]
    out = []
    for tp in _tp_sizes(model, topology.gpus_per_node):
        for pp in stage_counts:
            if pp > 1 and tp != topology.gpus_per_node:
                continue  # a stage per node fills the node with its tensor-parallel ranks
            if pp <= model.num_layers:
                out.append((tp, pp, topology.num_gpus // (tp * pp)))
    return out


def _concurrency_seqs(concurrent: int) -> int:
    """max_num_seqs for a known number of concurrent requests: next power of two, at least 16."""
    return max(16, 1 << max(concurrent - 1, 0).bit_length())


def candidates(
    model: ModelSpec, base: VllmFlags, workload: Workload, topology: Topology
) -> list[Candidate]:
    """The cross product of the searched knobs, with the user's own flags held fixed."""
    fixed = base.set_values()
    models = [model] + (
        [m for m in [_awq_variant(model)] if m] if "quantization" not in fixed else []
    )
    kv_dtypes = [fixed["kv_cache_dtype"]] if "kv_cache_dtype" in fixed else ["auto", "fp8"]
    eager = [fixed["enforce_eager"]] if "enforce_eager" in fixed else [False, True]
    concurrent = workload.max_concurrency or len(workload.sessions)
    out = []
    for variant in models:
        length = fixed.get("max_model_len") or _rounded_len(
            required_max_model_len(workload), variant
        )
        for tp, pp, replicas in layouts(variant, topology):
            if "tensor_parallel_size" in fixed and fixed["tensor_parallel_size"] != tp:
                continue
            if "pipeline_parallel_size" in fixed and fixed["pipeline_parallel_size"] != pp:
                continue
            per_replica = -(-concurrent // replicas)
            seqs = fixed.get("max_num_seqs") or _concurrency_seqs(per_replica)
            for kv_dtype in kv_dtypes:
                for is_eager in eager:
                    flags = base.merged(
                        kv_cache_dtype=None if kv_dtype == "auto" else kv_dtype,
                        max_model_len=length,
                        max_num_seqs=seqs,
                        tensor_parallel_size=tp if tp > 1 else base.tensor_parallel_size,
                        pipeline_parallel_size=pp if pp > 1 else base.pipeline_parallel_size,
                        enforce_eager=True if is_eager else base.enforce_eager,
                    )
                    out.append(Candidate(variant, flags, replicas))
    return out
