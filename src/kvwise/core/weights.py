"""Parameter counts and the bytes of weights each GPU holds, as vLLM shards and stores them.

`count_params` is the checkpoint's own parameter count (checked against published counts).
`weight_bytes_per_rank` is what vLLM's "Model loading took X GiB" reports on one rank: the
sharded weights in their runtime dtype or quantized layout, plus the replicated pieces and the
rotary cos/sin cache vLLM registers as a buffer.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvwise.core.models import ModelSpec
from kvwise.core.quant import QuantSpec

VOCAB_PADDING = 64  # vLLM pads the vocabulary of embeddings and lm_head to a multiple of 64


@dataclass(frozen=True)
class ParamGroups:
    """Parameters by how vLLM stores and shards them (counts for the whole model)."""

    embedding: int  # input embedding (vocab-parallel)
    lm_head: int  # output projection (vocab-parallel); 0 when tied to the embedding
    linear: int  # quantizable linear weights, sharded by TP
    linear_bias: int  # biases of column-parallel linears, sharded by TP
    replicated: int  # norms, routers, row-parallel biases: a full copy on every rank
    vision: int  # vision tower, kept unquantized and replicated

    @property
    def total(self) -> int:
        return (
            self.embedding
            + self.lm_head
            + self.linear
            + self.linear_bias
            + self.replicated
            + self.vision
        )


def _attention_params(spec: ModelSpec, kv_size: int, q_size: int) -> tuple[int, int, int]:
    """(linear, column bias, replicated) parameters of one attention block."""
    h = spec.hidden_size
    linear = h * q_size + 2 * h * kv_size + q_size * h  # q, k, v, o projections
    bias = q_size + 2 * kv_size if spec.has_qkv_bias else 0
    replicated = h if spec.has_o_bias else 0  # o bias is added after the all-reduce
    if spec.has_qk_norm:
        replicated += 2 * spec.head_dim  # RMSNorm weights on q and k, per head_dim
    return linear, bias, replicated


def _mlp_params(spec: ModelSpec) -> tuple[int, int]:
    """(linear, replicated) parameters of one MLP or MoE block."""
    h = spec.hidden_size
    mats = 3 if spec.gated_mlp else 2  # gate, up, down (or up, down)
    moe = spec.moe
    if moe is None:
        return mats * h * spec.intermediate_size, 0
    experts = moe.num_experts * mats * h * moe.expert_intermediate_size
    shared = mats * h * moe.shared_expert_intermediate_size
    router = h * moe.num_experts + (h if moe.has_shared_expert_gate else 0)
    return experts + shared, router


def param_groups(spec: ModelSpec) -> ParamGroups:
    attn_linear, attn_bias, attn_rep = _attention_params(spec, spec.kv_size, spec.q_size)
    mlp_linear, mlp_rep = _mlp_params(spec)
    norms = spec.norms_per_layer * spec.hidden_size
    layers = spec.num_layers
    embedding = spec.vocab_size * spec.hidden_size
    return ParamGroups(
        embedding=embedding,
        lm_head=0 if spec.tie_word_embeddings else embedding,
        linear=layers * (attn_linear + mlp_linear),
        linear_bias=layers * attn_bias,
        replicated=layers * (attn_rep + mlp_rep + norms) + spec.hidden_size,  # + final norm
        vision=spec.vision.num_params if spec.vision else 0,
    )


def count_params(spec: ModelSpec) -> int:
    return param_groups(spec).total


def active_params(spec: ModelSpec) -> int:
    """Parameters touched per token (MoE: only the routed experts), for FLOP counts."""
    total = count_params(spec)
    moe = spec.moe
    if moe is None:
        return total
    mats = 3 if spec.gated_mlp else 2
    idle = (moe.num_experts - moe.num_experts_per_tok) * mats * spec.hidden_size
    return total - spec.num_layers * idle * moe.expert_intermediate_size


def _pad(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def _linear_bytes_per_rank(
    spec: ModelSpec, tp: int, quant: QuantSpec | None, dtype_bytes: int
) -> float:
    """Bytes of the TP-sharded linear layers on one rank (all layers)."""
    # KV heads are split across ranks, or replicated when there are fewer heads than ranks.
    kv_heads_per_rank = max(1, spec.num_kv_heads // tp)
    kv_size_rank = kv_heads_per_rank * spec.head_dim
    q_size_rank = spec.q_size // tp
    attn_linear, attn_bias, _ = _attention_params(spec, kv_size_rank * tp, q_size_rank * tp)
    mlp_linear, _ = _mlp_params(spec)
    params = spec.num_layers * (attn_linear + mlp_linear) / tp
    bias = spec.num_layers * attn_bias / tp * dtype_bytes
    if quant is None:
        return params * dtype_bytes + bias
    weight = params * quant.bytes_per_param()
    if quant.group_size <= 0:
        # one scale per output channel: roughly params / hidden_size output rows per matrix
        weight += params / spec.hidden_size * quant.per_channel_scale_bytes()
    return weight + bias


def runtime_dtype_bytes(spec: ModelSpec, dtype: str | None = None) -> int:
    from kvwise.core.models import DTYPE_BYTES

    return DTYPE_BYTES[dtype or spec.dtype]


def weight_bytes_per_rank(
    spec: ModelSpec,
    *,
    tp: int = 1,
    pp: int = 1,
    dtype_bytes: int = 2,
    quant: QuantSpec | None = None,
    rotary_cache_len: int | None = None,
) -> int:
    """Weight bytes on the most loaded rank, as "Model loading took X GiB" would report them.

    `dtype_bytes` is the runtime activation dtype (fp32 checkpoints run as bf16 on CUDA).
    `quant` defaults to the checkpoint's own quantization.
    """
    quant = quant if quant is not None else spec.quant
    weights = _modelled_bytes_per_rank(spec, tp, pp, dtype_bytes, quant)
    checkpoint_bytes = _checkpoint_bytes_held(spec, quant, dtype_bytes)
    if checkpoint_bytes is not None:
        # The checkpoint's real size, split across ranks the way the modelled layout splits.
        weights *= checkpoint_bytes / _modelled_bytes_per_rank(spec, 1, 1, dtype_bytes, quant)
    # rotary cos/sin cache: max positions x rotary dim, registered as a buffer in the model dtype
    rotary = (rotary_cache_len or spec.max_position_embeddings) * spec.head_dim * dtype_bytes
    return int(weights + rotary)


def _checkpoint_bytes_held(
    spec: ModelSpec, quant: QuantSpec | None, dtype_bytes: int
) -> int | None:
    """The checkpoint's bytes when vLLM holds its tensors as stored: not when it quantizes on
    load (`quant` is not the checkpoint's own) or casts (fp32 checkpoints run as bf16)."""
    if quant != spec.quant or dtype_bytes != spec.dtype_bytes:
        return None
    return spec.checkpoint_weight_bytes


def _modelled_bytes_per_rank(
    spec: ModelSpec, tp: int, pp: int, dtype_bytes: int, quant: QuantSpec | None
) -> float:
    groups = param_groups(spec)
    vocab_rank = _pad(spec.vocab_size, VOCAB_PADDING) // tp
    embedding = vocab_rank * spec.hidden_size * dtype_bytes  # never quantized
    lm_head = (
        0 if spec.tie_word_embeddings else embedding
    )  # unquantized too (lm_head_quantized off)
    linear = _linear_bytes_per_rank(spec, tp, quant, dtype_bytes)
    replicated = (groups.replicated + groups.vision) * dtype_bytes
    if pp == 1:
        return embedding + lm_head + linear + replicated
    # PP: layers split evenly (the first ranks take the remainder); embedding on the first rank,
    # lm_head on the last. Return the heaviest rank, which bounds the KV pool (min over ranks).
    layer_share = -(-spec.num_layers // pp) / spec.num_layers
    return (linear + replicated) * layer_share + max(embedding, lm_head)
