"""SGLang's KV pool sizing: `ModelRunner.profile_max_num_token` (model_runner.py, 0.3-0.5.x).

rest = free after loading - free before loading x (1 - mem_fraction_static), i.e.
mem_fraction_static x (free before loading) - weights; tokens = rest // cell, where the cell is
K and V of every layer for this rank's KV heads, or for MLA the latent plus the rope key once
per token on every rank (kv_lora_rank + qk_rope_head_dim, no V).
"""

from __future__ import annotations

from kvwise.core.gpus import GIB, GpuSpec
from kvwise.core.models import ModelSpec
from kvwise.errors import UnsupportedModelError
from kvwise.planner import memory
from kvwise.planner.sglang.releases import SglangRelease, tp_buffer_constants


def derived_context_len(model: ModelSpec) -> int:
    """The context SGLang uses without --context-length: hf_transformers_utils.get_context_length
    (read at 0.2.15, 0.3.6, 0.4.0, 0.4.4.post2, 0.4.5.post1, 0.4.6, 0.4.8, 0.4.10, 0.5.3, 0.5.9):
    max_position_embeddings x rope_scaling's factor, unless rope_scaling names
    original_max_position_embeddings or its rope_type is llama3 (then the factor is 1). Unlike
    vLLM, no model is exempt: Gemma 3's linear factor 8 gives 8 x 131,072 = 1,048,576 tokens."""
    rope = model.rope_scaling
    if rope is None or rope.has_original_max_position_embeddings or rope.rope_type == "llama3":
        return model.max_position_embeddings
    return int(rope.factor * model.max_position_embeddings)


def cell_bytes(model: ModelSpec, tp: int, kv_bytes: int) -> int:
    """KV bytes per token on one rank, as profile_max_num_token computes its cell_size."""
    if model.mla is not None:
        return (model.mla.kv_lora_rank + model.mla.qk_rope_head_dim) * model.num_layers * kv_bytes
    if model.full_head_dim is not None or model.full_num_kv_heads is not None:
        raise UnsupportedModelError(
            f"{model.model_id}: not modelled: SGLang's KV pool for attention layers of different "
            "head shapes (Gemma 4's full-attention layers; its SGLang code was not read)"
        )
    heads = max(1, model.num_kv_heads // tp)
    return heads * model.head_dim * model.num_attention_layers * 2 * kv_bytes


def tp_buffers_bytes(gpu: GpuSpec, tp: int, release: SglangRelease | None = None) -> int:
    """Communication buffers init_torch_distributed takes before 'Load weight begin'.

    Over PCIe up to 0.5.2 the custom all-reduce keeps its buffers at TP 2 only (it disables
    itself above two GPUs that are not all NVLink-connected); later releases add communicators,
    and a release not named is planned as the newest."""
    if tp <= 1:
        return 0
    data = tp_buffer_constants()
    if gpu.interconnect_bytes_s >= float(data["nvlink_min_bytes_s"]):
        return int(data["nvlink_gib"] * GIB)
    pcie = release.data.get("tp_buffers_pcie_gib") if release is not None else None
    if pcie is None:
        return int(data["pcie_gib"] * GIB)
    return int((pcie["tp2"] if tp == 2 else pcie["tp_over_2"]) * GIB)


def pre_load_free_bytes(gpu: GpuSpec, tp: int, release: SglangRelease | None = None) -> int:
    """Free memory SGLang measures before loading weights (the base of the fraction)."""
    free = gpu.free_bytes or gpu.memory_bytes
    return free - memory.CUDA_CONTEXT_BYTES - tp_buffers_bytes(gpu, tp, release)


def max_running_requests(
    tokens: int, context_length: int, release: SglangRelease | None = None
) -> int:
    """SGLang's default: min(tokens // 2, the request pool's size + the release's offset), the
    pool sized tokens / context x scale within the release's floor and cap (0.4.7+: 2048-4096)."""
    spec = (release.data if release is not None else {}).get(
        "max_running", {"scale": 512, "floor": 2048, "cap": 4096, "offset": 0}
    )
    half = tokens // 2
    if spec["scale"] is None:
        return half
    size = int(tokens / context_length * spec["scale"])
    if spec["floor"] is not None:
        size = max(size, spec["floor"])
    if spec["cap"] is not None:
        size = min(size, spec["cap"])
    return min(half, size + spec["offset"])
