"""Parameter counts and the bytes of weights each GPU holds, as vLLM shards and stores them.

`count_params` is the checkpoint's own parameter count (checked against published counts).
`weight_bytes_per_rank` is what vLLM's "Model loading took X GiB" reports on one rank: the
sharded weights in their runtime dtype or quantized layout, plus the replicated pieces and the
rotary cos/sin cache vLLM registers as a buffer.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvwise.core.model_spec import DTYPE_BYTES, MAMBA, MLP, ModelSpec
from kvwise.core.quant import QuantSpec

VOCAB_PADDING = 64  # vLLM pads the vocabulary of embeddings and lm_head to a multiple of 64
# MXFP4 experts (vllm/model_executor/layers/quantization/mxfp4.py, Mxfp4MoEMethod.create_weights,
# Marlin backend, the one SM80/SM89/SM120 GPUs use): the intermediate size per partition is padded
# to a multiple of 128 and the hidden size to a multiple of 256 (Marlin's n % 256, k % 128). On
# SM90/SM100 the Triton layout is used instead (named as not modelled in the plan). Logged:
# gpt-oss-120b with Marlin on H100, 65.97 GiB (vllm#23278) vs 65.91 here; gpt-oss-20b on A100,
# 13.72 vs 13.69; with Triton, gpt-oss-20b 13.64 (vLLM 0.19 H100) and gpt-oss-120b 64.38
# (vllm#33155, 0.14.1 H100).
MXFP4_INTERMEDIATE_PAD = 128
MXFP4_HIDDEN_PAD = 256


@dataclass(frozen=True)
class ParamGroups:
    """Parameters by how vLLM stores and shards them (counts for the whole model)."""

    embedding: int  # input embedding (vocab-parallel)
    lm_head: int  # output projection (vocab-parallel); 0 when tied to the embedding
    linear: int  # quantizable linear weights sharded by TP (attention, dense MLPs, mamba)
    experts: int  # routed experts' weights (TP-sharded per expert, or whole experts under EP)
    replicated_linear: int  # quantizable linears copied whole on every rank (MLA down-projections)
    linear_bias: int  # biases of column-parallel linears, sharded by TP
    expert_bias: int  # gpt-oss: biases of every expert, sharded like the experts
    replicated: int  # norms, routers, sinks, row-parallel biases: a full copy on every rank
    vision: int  # vision tower, kept unquantized and replicated
    mlp_linear: int = 0  # of `linear`: dense MLPs and shared experts (a scheme of their own)

    @property
    def total(self) -> int:
        return (
            self.embedding
            + self.lm_head
            + self.linear
            + self.experts
            + self.replicated_linear
            + self.linear_bias
            + self.expert_bias
            + self.replicated
            + self.vision
        )


@dataclass(frozen=True)
class _Layer:
    linear: int = 0
    experts: int = 0
    replicated_linear: int = 0
    linear_bias: int = 0
    expert_bias: int = 0
    replicated: int = 0
    mlp_linear: int = 0  # of `linear`: the MLP's (dense or shared-expert) projections

    def __add__(self, other: _Layer) -> _Layer:
        return _Layer(*(getattr(self, f) + getattr(other, f) for f in self.__dataclass_fields__))


def _attention(spec: ModelSpec, kind: str) -> _Layer:
    """One attention block: q, k, v, o projections (or MLA's), biases, q/k norms, sinks.

    Gemma 4's full-attention layers have their own head size and KV heads (`head_dim_of`);
    vLLM builds their QKVParallelLinear with a V slice even where the checkpoint has no v_proj
    (`attention_k_eq_v`: K is loaded into both, gemma4.py `Gemma4Attention.__init__`)."""
    h = spec.hidden_size
    if spec.mla is not None:
        return _mla_attention(spec)
    head_dim = spec.head_dim_of(kind)
    q, kv = spec.num_attention_heads * head_dim, spec.kv_heads_of(kind) * head_dim
    replicated = h if spec.has_o_bias else 0  # o bias is added after the all-reduce
    if spec.has_qk_norm:
        replicated += 2 * head_dim  # RMSNorm weights on q and k, per head_dim
    if spec.has_attention_sinks:
        replicated += spec.num_attention_heads  # one sink logit per head
    return _Layer(
        linear=h * q * (2 if spec.has_output_gate else 1) + 2 * h * kv + q * h,
        linear_bias=q + 2 * kv if spec.has_qkv_bias else 0,
        replicated=replicated,
    )


def _mla_attention(spec: ModelSpec) -> _Layer:
    """DeepseekV2MLAAttention: low-rank q (optional) and kv projections, per-head up-projections."""
    mla, h, heads = spec.mla, spec.hidden_size, spec.num_attention_heads
    assert mla is not None
    qk_head = mla.qk_nope_head_dim + mla.qk_rope_head_dim
    # kv_a_proj_with_mqa: hidden -> latent + rope key (replicated); kv_a_layernorm on the latent
    down, norms = h * mla.cache_dim, mla.kv_lora_rank
    if mla.q_lora_rank:
        down += h * mla.q_lora_rank  # q_a_proj (replicated), then q_a_layernorm and q_b_proj
        norms += mla.q_lora_rank
        up = mla.q_lora_rank * heads * qk_head
    else:
        up = h * heads * qk_head  # q_proj
    up += mla.kv_lora_rank * heads * (mla.qk_nope_head_dim + mla.v_head_dim)  # kv_b_proj
    up += heads * mla.v_head_dim * h  # o_proj
    return _Layer(linear=up, replicated_linear=down, replicated=norms)


def _is_moe_layer(spec: ModelSpec, layer: int) -> bool:
    moe = spec.moe
    assert moe is not None
    return layer >= moe.num_dense_layers and layer % moe.layer_period == moe.layer_offset


def num_moe_layers(spec: ModelSpec) -> int:
    if spec.moe is None:
        return 0
    return sum(1 for layer in range(spec.num_layers) if _is_moe_layer(spec, layer))


def _mlp(spec: ModelSpec, layer: int) -> _Layer:
    """One MLP or MoE block (DeepSeek's first `num_dense_layers` layers are dense)."""
    h = spec.hidden_size
    mats = 3 if spec.gated_mlp else 2  # gate, up, down (or up, down)
    moe = spec.moe
    if moe is None or not _is_moe_layer(spec, layer):
        dense = mats * h * spec.intermediate_size
        return _Layer(linear=dense, mlp_linear=dense)
    router = h * moe.num_experts + (h if moe.has_shared_expert_gate else 0)
    router += moe.num_experts if moe.has_router_bias else 0
    router += moe.num_experts if moe.has_score_correction_bias else 0
    bias = moe.num_experts * (2 * moe.expert_intermediate_size + h) if moe.has_expert_bias else 0
    shared = mats * h * moe.shared_expert_intermediate_size
    return _Layer(
        linear=shared,
        mlp_linear=shared,
        experts=moe.num_experts * mats * h * moe.expert_intermediate_size,
        expert_bias=bias,
        replicated=router,
    )


def _layer(spec: ModelSpec, index: int) -> _Layer:
    kind = spec.attention_layer_types[index]
    norms = _Layer(replicated=spec.norms_per_layer * spec.hidden_size)
    if kind == MLP:
        return _mlp(spec, index) + norms
    if kind == MAMBA:
        assert spec.mamba is not None
        mixer = _Layer(linear=spec.mamba.params_per_layer)
    else:
        mixer = _attention(spec, kind)
    return mixer + norms if spec.is_single_block_layers else mixer + _mlp(spec, index) + norms


def _layers(spec: ModelSpec) -> _Layer:
    total = _Layer(replicated=spec.hidden_size)  # the final norm
    for index in range(spec.num_layers):
        total = total + _layer(spec, index)
    return total


def param_groups(spec: ModelSpec) -> ParamGroups:
    layers = _layers(spec)
    embedding = spec.vocab_size * spec.hidden_size
    return ParamGroups(
        embedding=embedding,
        lm_head=0 if spec.tie_word_embeddings else embedding,
        linear=layers.linear,
        experts=layers.experts,
        replicated_linear=layers.replicated_linear,
        linear_bias=layers.linear_bias,
        expert_bias=layers.expert_bias,
        replicated=layers.replicated,
        vision=spec.vision.num_params if spec.vision else 0,
        mlp_linear=layers.mlp_linear,
    )


def count_params(spec: ModelSpec) -> int:
    return param_groups(spec).total


def active_params(spec: ModelSpec) -> int:
    """Parameters touched per token (MoE: only the routed experts), for FLOP counts."""
    moe = spec.moe
    groups = param_groups(spec)
    if moe is None:
        return groups.total
    return groups.total - groups.experts * (moe.num_experts - moe.num_experts_per_tok) // (
        moe.num_experts
    )


def _pad(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def _quantized_bytes(params: float, quant: QuantSpec | None, dtype_bytes: int, rows: int) -> float:
    """Bytes of `params` linear weights in `quant`'s layout (`rows`: output rows, for scales)."""
    if quant is None:
        return params * dtype_bytes
    weight = params * quant.bytes_per_param()
    if quant.group_size <= 0:
        weight += rows * quant.per_channel_scale_bytes()  # one scale per output channel
    return weight


def is_experts_only(quant: QuantSpec | None) -> bool:
    """MXFP4 (vLLM's Mxfp4Config) quantizes FusedMoE experts only; linears stay in model dtype."""
    return quant is not None and (
        bool(getattr(quant, "is_experts_only", False)) or quant.method == "mxfp4"
    )


def _kv_replication_params(spec: ModelSpec, tp: int) -> int:
    """Extra k/v projection weights when TP exceeds the KV heads (each rank keeps a whole head)."""
    if spec.mla is not None:
        return 0
    total = 0
    for kind in spec.attention_layer_types:
        heads = spec.kv_heads_of(kind)
        if kind in (MAMBA, MLP) or heads >= tp:
            continue
        total += 2 * spec.hidden_size * spec.head_dim_of(kind) * (tp - heads)
    return total


def _expert_bytes_per_rank(
    spec: ModelSpec, tp: int, quant: QuantSpec | None, dtype_bytes: int, expert_parallel: bool
) -> float:
    """Routed experts on one rank: each expert split by TP, or whole experts split by EP."""
    moe = spec.moe
    if moe is None:
        return 0.0
    if quant is not None and quant.experts is not None:
        quant = quant.experts  # ModelOpt MIXED_PRECISION: the experts' own scheme
    mats = 3 if spec.gated_mlp else 2
    moe_layers = num_moe_layers(spec)
    # EP: ranks hold whole experts, the first ones one more when they do not divide evenly
    experts = -(-moe.num_experts // tp) if expert_parallel else moe.num_experts
    inter = moe.expert_intermediate_size if expert_parallel else moe.expert_intermediate_size // tp
    hidden = spec.hidden_size
    if quant is not None and quant.method == "mxfp4":
        inter, hidden = _pad(inter, MXFP4_INTERMEDIATE_PAD), _pad(hidden, MXFP4_HIDDEN_PAD)
    params = moe_layers * experts * mats * hidden * inter
    rows = moe_layers * experts * (2 * inter + hidden)  # output rows of gate_up and down
    bias = rows * dtype_bytes if moe.has_expert_bias else 0  # expert biases stay bf16
    return _quantized_bytes(params, quant, dtype_bytes, rows) + bias


def _mla_absorbed_bytes(spec: ModelSpec, tp: int, dtype_bytes: int) -> int:
    """MLA backends keep W_UK and W_UV, unquantized copies of kv_b_proj, next to it
    (vllm/v1/attention/backends/mla/common.py, process_weights_after_loading)."""
    mla = spec.mla
    if mla is None or not mla.has_latent_cache:
        return 0
    heads_rank = spec.num_attention_heads // tp
    per_layer = mla.kv_lora_rank * heads_rank * (mla.qk_nope_head_dim + mla.v_head_dim)
    return spec.num_layers * per_layer * dtype_bytes


def _sharded_bytes_per_rank(
    spec: ModelSpec, tp: int, quant: QuantSpec | None, dtype_bytes: int, expert_parallel: bool
) -> float:
    """Bytes of the layers' weights on one rank (all layers, before any PP split)."""
    groups = param_groups(spec)
    linear_quant = None if is_experts_only(quant) else quant
    linear = (groups.linear + _kv_replication_params(spec, tp)) / tp
    # ModelOpt MIXED_PRECISION may give the MLPs (dense or shared experts) their own scheme
    mlp_quant = quant.mlp if quant is not None and quant.mlp is not None else None
    mlp = groups.mlp_linear / tp if mlp_quant is not None else 0.0
    rows = (linear - mlp) / spec.hidden_size  # roughly one output row per hidden-size input
    sharded = _quantized_bytes(linear - mlp, linear_quant, dtype_bytes, int(rows))
    if mlp_quant is not None:
        sharded += _quantized_bytes(mlp, mlp_quant, dtype_bytes, int(mlp / spec.hidden_size))
    sharded += groups.linear_bias / tp * dtype_bytes
    sharded += _expert_bytes_per_rank(spec, tp, quant, dtype_bytes, expert_parallel)
    copies = groups.replicated_linear
    sharded += _quantized_bytes(copies, linear_quant, dtype_bytes, copies // spec.hidden_size)
    buffers = spec.vision.num_buffer_elements if spec.vision else 0
    vision_split = spec.vision.tp_sharded_params if spec.vision else 0
    vision = groups.vision - vision_split + vision_split / tp  # Qwen2.5-VL: a TP-sharded tower
    sharded += (groups.replicated + vision + buffers) * dtype_bytes
    return sharded + _mla_absorbed_bytes(spec, tp, dtype_bytes)


def runtime_dtype_bytes(spec: ModelSpec, dtype: str | None = None) -> int:
    return DTYPE_BYTES[dtype or spec.dtype]


def _rotary_dim(spec: ModelSpec) -> int:
    if spec.mla is not None:
        return spec.mla.qk_rope_head_dim
    if spec.rotary_cache_dims:
        return sum(spec.rotary_cache_dims)
    return int(spec.head_dim * spec.partial_rotary_factor)


def weight_bytes_per_rank(
    spec: ModelSpec,
    *,
    tp: int = 1,
    pp: int = 1,
    dtype_bytes: int = 2,
    quant: QuantSpec | None = None,
    rotary_cache_len: int | None = None,
    expert_parallel: bool = False,
) -> int:
    """Weight bytes on the most loaded rank, as "Model loading took X GiB" would report them.

    `dtype_bytes` is the runtime activation dtype (fp32 checkpoints run as bf16 on CUDA).
    `quant` defaults to the checkpoint's own quantization. `expert_parallel`: vLLM's
    `--enable-expert-parallel`, experts spread whole over the TP ranks.
    """
    quant = quant if quant is not None else spec.quant
    weights = _modelled_bytes_per_rank(spec, tp, pp, dtype_bytes, quant, expert_parallel)
    checkpoint_bytes = _checkpoint_bytes_held(spec, quant, dtype_bytes)
    if checkpoint_bytes is not None:
        # The checkpoint's real size, split across ranks the way the modelled layout splits.
        whole = _modelled_bytes_per_rank(spec, 1, 1, dtype_bytes, quant, expert_parallel)
        weights *= checkpoint_bytes / whole
    # rotary cos/sin cache: max positions x rotary dim, registered as a buffer in the model dtype
    rotary = (rotary_cache_len or spec.max_position_embeddings) * _rotary_dim(spec) * dtype_bytes
    return int(weights + rotary)


def routed_expert_share(
    spec: ModelSpec,
    *,
    tp: int = 1,
    dtype_bytes: int = 2,
    quant: QuantSpec | None = None,
    expert_parallel: bool = False,
) -> float:
    """The share of a rank's weight bytes held by routed experts (0 for a dense model): the
    part a step reads only for the experts its tokens are routed to (the step-time model)."""
    if spec.moe is None:
        return 0.0
    quant = quant if quant is not None else spec.quant
    experts = _expert_bytes_per_rank(spec, tp, quant, dtype_bytes, expert_parallel)
    return experts / _modelled_bytes_per_rank(spec, tp, 1, dtype_bytes, quant, expert_parallel)


def _checkpoint_bytes_held(
    spec: ModelSpec, quant: QuantSpec | None, dtype_bytes: int
) -> int | None:
    """The checkpoint's bytes when vLLM holds its tensors as stored: not when it quantizes on
    load (`quant` is not the checkpoint's own) or casts (fp32 checkpoints run as bf16)."""
    if quant != spec.quant or dtype_bytes != spec.dtype_bytes:
        return None
    return spec.checkpoint_weight_bytes


def _modelled_bytes_per_rank(
    spec: ModelSpec,
    tp: int,
    pp: int,
    dtype_bytes: int,
    quant: QuantSpec | None,
    expert_parallel: bool,
) -> float:
    vocab_rank = _pad(spec.vocab_size, VOCAB_PADDING) // tp
    embedding = vocab_rank * spec.hidden_size * dtype_bytes  # never quantized
    lm_head = 0 if spec.tie_word_embeddings else embedding  # unquantized (lm_head_quantized off)
    if lm_head and quant is not None and quant.lm_head is not None:
        # ModelOpt quantizes a listed lm_head (ParallelLMHead), one scale set per vocab row
        lm_head = int(
            _quantized_bytes(lm_head / dtype_bytes, quant.lm_head, dtype_bytes, vocab_rank)
        )
    layers = _sharded_bytes_per_rank(spec, tp, quant, dtype_bytes, expert_parallel)
    if pp == 1:
        return embedding + lm_head + layers
    # PP: layers split evenly (the first ranks take the remainder); embedding on the first rank,
    # lm_head on the last. Return the heaviest rank, which bounds the KV pool (min over ranks).
    layer_share = -(-spec.num_layers // pp) / spec.num_layers
    return layers * layer_share + max(embedding, lm_head)
