"""The shape facts of a checkpoint that memory and speed depend on (built by `models.py`)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from kvwise.core.quant import QuantSpec

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}

# Kinds of decoder layer, by what they keep per request (vLLM V1's KVCacheSpec classes)
FULL = "full"  # FullAttentionSpec: K and V for every token
SLIDING = "sliding"  # SlidingWindowSpec: K and V for the last `sliding_window` tokens
CHUNKED = "chunked"  # ChunkedLocalAttentionSpec: K and V within the current attention chunk
MAMBA = "mamba"  # MambaSpec: one fixed-size state per request (Mamba2, gated DeltaNet)
MLP = "mlp"  # a layer with no token mixer (Nemotron-H's MLP layers): no KV, no state


@dataclass(frozen=True)
class MoeSpec:
    num_experts: int
    num_experts_per_tok: int
    expert_intermediate_size: int
    shared_expert_intermediate_size: int = 0  # 0: no shared expert (all shared experts fused)
    has_shared_expert_gate: bool = False
    num_dense_layers: int = 0  # DeepSeek `first_k_dense_replace`: leading layers with a dense MLP
    layer_period: int = 1  # Jamba: experts on layers with index % period == offset, dense elsewhere
    layer_offset: int = 0
    has_expert_bias: bool = False  # gpt-oss: biases on every expert's gate_up and down
    has_router_bias: bool = False
    has_score_correction_bias: bool = False  # DeepSeek-V3 `e_score_correction_bias` (fp32)


@dataclass(frozen=True)
class MlaSpec:
    """DeepSeek multi-head latent attention (`DeepseekV2MLAAttention` in vLLM)."""

    kv_lora_rank: int
    qk_rope_head_dim: int
    qk_nope_head_dim: int
    v_head_dim: int
    q_lora_rank: int | None  # None: a plain q_proj (DeepSeek-V2-Lite)
    # False before vLLM 0.7.1: K and V cached per head, padded to 256 (see planner/kv_release.py)
    has_latent_cache: bool = True

    @property
    def cache_dim(self) -> int:
        # MLAAttentionSpec: one latent "head" of kv_lora_rank + the shared rope key
        return self.kv_lora_rank + self.qk_rope_head_dim


@dataclass(frozen=True)
class MambaStateSpec:
    """Per-request recurrent state of a Mamba2 / gated-DeltaNet layer, whole model (not per rank).

    `conv_channels` x (conv_kernel - 1) is the convolution state; `ssm_heads` x `ssm_state_dims`
    the SSM (or DeltaNet) state; vLLM splits both channels and heads across TP ranks.
    """

    conv_channels: int
    conv_kernel: int
    ssm_heads: int
    ssm_state_dims: tuple[int, int]
    params_per_layer: int  # the layer's own weights (projections, conv, norms)
    ssm_state_dtype: str | None = None  # None: the model dtype (mamba_ssm_cache_dtype "auto")
    n_groups: int = 0  # Mamba2 B/C groups, replicated when TP does not divide them
    state_size: int = 0  # Mamba2 d_state, the width of each group in the conv channels

    def conv_channels_at(self, tp: int) -> int:
        """Conv channels on all ranks together (mamba_utils.py, mamba2_state_shape: groups are
        extended by extra_groups_for_head_shards when TP does not divide them)."""
        extra = 0 if not self.n_groups or self.n_groups % tp == 0 else tp - self.n_groups
        return self.conv_channels + 2 * extra * self.state_size


@dataclass(frozen=True)
class VisionEncoderShape:
    """What the start-up profile of a vision encoder depends on (`planner/vision_profile.py`):
    the tower's widths and the largest image the processor makes by default."""

    hidden_size: int
    intermediate_size: int
    out_hidden_size: int
    patch_size: int
    spatial_merge_size: int
    temporal_patch_size: int
    in_channels: int
    max_pixels: int  # the image processor's default longest_edge (preprocessor_config.json)


@dataclass(frozen=True)
class VisionSpec:
    """A vision tower vLLM loads next to the text model (multimodal checkpoints)."""

    num_params: int
    num_buffer_elements: int = 0  # non-parameter tensors it holds in the model dtype
    tp_sharded_params: int = 0  # of num_params, those split across tensor-parallel ranks
    encoder: VisionEncoderShape | None = None  # set where the encoder profile is modelled


@dataclass(frozen=True)
class RopeScaling:
    """config.json's rope_scaling, the parts engines read to derive the context length."""

    rope_type: str | None
    factor: float
    has_original_max_position_embeddings: bool


@dataclass(frozen=True)
class ModelSpec:
    model_id: str
    architecture: str
    hidden_size: int
    num_layers: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    max_position_embeddings: int
    dtype: str  # the checkpoint's torch_dtype, which vLLM's dtype "auto" follows
    tie_word_embeddings: bool = False
    has_qkv_bias: bool = False
    has_o_bias: bool = False
    has_qk_norm: bool = False
    has_output_gate: bool = False  # Qwen3-Next gated attention: q_proj also emits a gate per head
    has_attention_sinks: bool = False  # gpt-oss: one learned sink logit per query head
    norms_per_layer: int = 2
    gated_mlp: bool = True
    layer_types: tuple[str, ...] = ()  # a layer kind per layer; empty means all FULL
    sliding_window: int | None = None
    partial_rotary_factor: float = 1.0  # share of head_dim that rotary embeddings cover
    # Gemma 4: full-attention layers with their own head size and KV heads (global_head_dim,
    # num_global_key_value_heads); None: every attention layer has head_dim / num_kv_heads
    full_head_dim: int | None = None
    full_num_kv_heads: int | None = None
    # widths of the distinct rotary cos/sin caches vLLM builds (get_rope caches one per
    # parameter set); empty: one cache of head_dim x partial_rotary_factor
    rotary_cache_dims: tuple[int, ...] = ()
    rope_scaling: RopeScaling | None = None  # the text config's rope_scaling, as written
    moe: MoeSpec | None = None
    mla: MlaSpec | None = None
    mamba: MambaStateSpec | None = None  # the state of every MAMBA layer
    vision: VisionSpec | None = None
    quant: QuantSpec | None = None
    published_params: int | None = None
    # the checkpoint's tensors as vLLM holds them (safetensors metadata), whole model; None: unread
    checkpoint_weight_bytes: int | None = None
    source: str = ""
    notes: tuple[str, ...] = field(default=())
    # one block per layer (Nemotron-H): attention and mamba layers have no MLP, MLP layers no mixer
    is_single_block_layers: bool = False
    # parts of vLLM's memory for this model that kvwise does not model, each named exactly
    not_modelled: tuple[str, ...] = ()

    @property
    def attention_layer_types(self) -> tuple[str, ...]:
        return self.layer_types or (FULL,) * self.num_layers

    @property
    def num_attention_layers(self) -> int:
        return sum(1 for kind in self.attention_layer_types if kind not in (MAMBA, MLP))

    @property
    def is_hybrid(self) -> bool:
        return len(set(self.attention_layer_types)) > 1

    def head_dim_of(self, kind: str) -> int:
        """Head size of an attention layer of this kind (Gemma 4: full layers differ)."""
        if kind == FULL and self.full_head_dim is not None:
            return self.full_head_dim
        return self.head_dim

    def kv_heads_of(self, kind: str) -> int:
        """KV heads of an attention layer of this kind (Gemma 4: full layers differ)."""
        if kind == FULL and self.full_num_kv_heads is not None:
            return self.full_num_kv_heads
        return self.num_kv_heads

    @property
    def q_size(self) -> int:
        return self.num_attention_heads * self.head_dim

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    def with_quant(self, quant: QuantSpec | None) -> ModelSpec:
        return replace(self, quant=quant)
