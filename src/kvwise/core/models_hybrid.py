"""Readers for hybrid attention / linear-attention architectures, and the precise refusals.

Qwen3-Next (Qwen3NextForCausalLM): every `full_attention_interval`-th layer is gated full
attention, the others gated DeltaNet (linear attention) whose per-request state vLLM V1 keeps as
a MambaSpec page (vllm/model_executor/models/qwen3_next.py, get_mamba_state_shape_from_config:
conv state (conv_kernel - 1) x conv_dim, temporal state num_v_heads x head_k_dim x head_v_dim).

Qwen3.5 / 3.6 / 3.8 (Qwen3_5ForConditionalGeneration, Qwen3_5MoeForConditionalGeneration; vLLM
0.32.0 vllm/model_executor/models/qwen3_5.py): the same decoder layers (Qwen3_5DecoderLayer
reuses Qwen3NextAttention and GatedDeltaNetAttention, chosen per layer by `layer_types`), a
gated dense MLP (`qwen3_5_text`) or Qwen3-Next's sparse MoE block (`qwen3_5_moe_text`) on every
layer, and the same state shape (get_mamba_state_shape_from_config ->
MambaStateShapeCalculator.gated_delta_net_state_shape). The MTP layers (`mtp.*`) are skipped at
load (load_weights skip_prefixes) and not counted. The vision tower is `vision.py`'s.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from kvwise.core.config_fields import base_fields, get, require
from kvwise.core.model_spec import FULL, MAMBA, MLP, MambaStateSpec, MoeSpec
from kvwise.core.models_dense import Reader, qwen3
from kvwise.errors import UnsupportedModelError

NOT_MODELLED_ARCHITECTURES = {
    "FalconH1ForCausalLM": "parallel attention + Mamba-2 mixers in one layer",
    # vLLM 0.6.3 worker/enc_dec_model_runner.py profile_run and models/mllama.py
    # get_max_mllama_image_tokens / dummy_image; V1 kv_cache_interface.py CrossAttentionSpec
    "MllamaForConditionalGeneration": "the cross-attention layers' KV of the image tokens and "
    "the vision encoder's profile pass (V0 0.6.x profiles max_num_seqs dummy sequences, each "
    "with a 1024x1024 image of max_num_tiles x ((image_size // 14)^2 + 1) encoder tokens; V1 "
    "keeps cross-attention KV per request, CrossAttentionSpec sized by "
    "max_num_encoder_input_tokens)",
}


# vLLM 0.24.0: with --enable-prefix-caching, MambaModelConfig sets mamba_cache_mode 'all' for
# models that declare SupportsMambaPrefixCaching and 'align' otherwise (Qwen3.5, Qwen3-Next);
# 0.28 'align' for all. kv_cache_interface.py MambaSpec.max_memory_usage_bytes: 'align' holds 2
# state pages per request and state group, 'all' one per block of max_model_len, 'none' 1. The
# planner sizes 'none' and 'align' and refuses 'all' (planner/kv_mamba.py); 0.32's MambaSpec adds
# num_prefill_checkpoint_blocks in 'align' (1 for MambaMixer2 layers), not sized.
MAMBA_PREFIX_CACHING_NOT_MODELLED = (
    "mamba/linear-attention state with prefix caching: the prefill checkpoint block vLLM 0.32 "
    "adds per request for Mamba2 mixers in mamba_cache_mode 'align' ('none' and 'align' are "
    "sized, 'all' is refused)"
)


def _layer_kinds(cfg: dict[str, Any], num_layers: int) -> tuple[str, ...]:
    named = get(cfg, "layer_types")
    if named:
        return tuple(FULL if t == "full_attention" else MAMBA for t in named)
    interval = int(get(cfg, "full_attention_interval", default=4))
    return tuple(FULL if (i + 1) % interval == 0 else MAMBA for i in range(num_layers))


def _gated_delta_net(cfg: dict[str, Any], hidden: int) -> MambaStateSpec:
    key_heads = int(require(cfg, "linear_num_key_heads"))
    value_heads = int(require(cfg, "linear_num_value_heads"))
    key_dim = key_heads * int(require(cfg, "linear_key_head_dim"))
    head_v = int(require(cfg, "linear_value_head_dim"))
    value_dim = value_heads * head_v
    kernel = int(require(cfg, "linear_conv_kernel_dim"))
    conv_dim = 2 * key_dim + value_dim  # q, k and v go through the causal conv
    params = (
        hidden * (2 * key_dim + 2 * value_dim)  # in_proj_qkvz
        + hidden * 2 * value_heads  # in_proj_ba (beta and alpha per value head)
        + conv_dim * kernel  # conv1d (depthwise, no bias)
        + 2 * value_heads  # dt_bias, A_log
        + head_v  # gated RMSNorm
        + value_dim * hidden  # out_proj
    )
    return MambaStateSpec(
        conv_channels=conv_dim,
        conv_kernel=kernel,
        ssm_heads=value_heads,
        ssm_state_dims=(key_dim // key_heads, head_v),
        params_per_layer=params,
    )


def qwen3_next(cfg: dict[str, Any]) -> dict[str, Any]:
    fields = qwen3(cfg)
    if get(cfg, "mlp_only_layers") or int(get(cfg, "decoder_sparse_step", default=1)) != 1:
        raise UnsupportedModelError("not modelled: Qwen3-Next with dense layers interleaved")
    expert = int(require(cfg, "moe_intermediate_size"))
    moe = MoeSpec(
        num_experts=int(require(cfg, "num_experts")),
        num_experts_per_tok=int(require(cfg, "num_experts_per_tok")),
        expert_intermediate_size=expert,
        shared_expert_intermediate_size=int(get(cfg, "shared_expert_intermediate_size", default=0)),
        has_shared_expert_gate=True,
    )
    return fields | {
        "layer_types": _layer_kinds(cfg, fields["num_layers"]),
        "mamba": _gated_delta_net(cfg, fields["hidden_size"]),
        "not_modelled": (MAMBA_PREFIX_CACHING_NOT_MODELLED,),
        "moe": moe,
        "partial_rotary_factor": float(get(cfg, "partial_rotary_factor", default=1.0)),
        # gated attention: q_proj also emits a per-head output gate (attn_output_gate)
        "has_output_gate": bool(get(cfg, "attn_output_gate", default=True)),
    }


def _qwen3_5_text(cfg: dict[str, Any]) -> dict[str, Any]:
    """The fields both Qwen3.5 text models share (text_config merged over the top level)."""
    fields = qwen3(cfg)
    state = _gated_delta_net(cfg, fields["hidden_size"])
    # vllm/model_executor/models/config.py, Qwen3_5ForConditionalGenerationConfig: with
    # --mamba-ssm-cache-dtype "auto" the temporal (SSM) state takes the config's mamba_ssm_dtype
    # (float32 in the published checkpoints); the conv state stays in the model dtype
    ssm_dtype = get(cfg, "mamba_ssm_dtype")
    if ssm_dtype:
        state = replace(state, ssm_state_dtype=str(ssm_dtype))
    rope = get(cfg, "rope_parameters", "rope_scaling", default={}) or {}
    rotary = get(cfg, "partial_rotary_factor", default=rope.get("partial_rotary_factor", 1.0))
    return fields | {
        "layer_types": _layer_kinds(cfg, fields["num_layers"]),
        "mamba": state,
        "not_modelled": (MAMBA_PREFIX_CACHING_NOT_MODELLED,),
        "partial_rotary_factor": float(rotary),
        # Qwen3NextAttention: q_proj also emits a per-head output gate (attn_output_gate)
        "has_output_gate": bool(get(cfg, "attn_output_gate", default=True)),
    }


def qwen3_5(cfg: dict[str, Any]) -> dict[str, Any]:
    """Qwen3.5 dense (model_type qwen3_5_text): Qwen3NextMLP (gate, up, down) on every layer."""
    return _qwen3_5_text(cfg)


def qwen3_5_moe(cfg: dict[str, Any]) -> dict[str, Any]:
    """Qwen3.5 MoE (qwen3_5_moe_text): Qwen3NextSparseMoeBlock on every layer (routed experts,
    one shared expert with its sigmoid gate); the config names no dense intermediate_size."""
    expert = int(require(cfg, "moe_intermediate_size"))
    fields = _qwen3_5_text(cfg | {"intermediate_size": get(cfg, "intermediate_size") or expert})
    moe = MoeSpec(
        num_experts=int(require(cfg, "num_experts")),
        num_experts_per_tok=int(require(cfg, "num_experts_per_tok")),
        expert_intermediate_size=expert,
        shared_expert_intermediate_size=int(get(cfg, "shared_expert_intermediate_size", default=0)),
        has_shared_expert_gate=True,
    )
    return fields | {"moe": moe}


def _mamba2(
    hidden: int, heads: int, head_dim: int, groups: int, state: int, kernel: int
) -> MambaStateSpec:
    """MambaMixer2 (vllm/model_executor/layers/mamba/mamba_mixer2.py) and its V1 state
    (mamba_utils.py, mamba2_state_shape): conv (kernel - 1) x (inner + 2 groups x d_state),
    SSM heads x head_dim x d_state."""
    inner = heads * head_dim
    conv_dim = inner + 2 * groups * state
    params = (
        hidden * (inner + conv_dim + heads)  # in_proj: z, x, B, C, dt
        + conv_dim * kernel
        + conv_dim  # conv1d with bias
        + 3 * heads  # A, D, dt_bias
        + inner  # gated RMSNorm
        + inner * hidden  # out_proj
    )
    return MambaStateSpec(
        conv_channels=conv_dim,
        conv_kernel=kernel,
        ssm_heads=heads,
        ssm_state_dims=(head_dim, state),
        params_per_layer=params,
        n_groups=groups,
        state_size=state,
    )


def granite_moe_hybrid(cfg: dict[str, Any]) -> dict[str, Any]:
    """GraniteMoeHybridForCausalLM (Granite-4.0-H): Mamba2 and attention layers (`layer_types`),
    each followed by MoE experts (if any) and a shared MLP; attention without RoPE ("nope")."""
    fields = base_fields(cfg)
    kinds = tuple(MAMBA if t == "mamba" else FULL for t in require(cfg, "layer_types"))
    state = _mamba2(
        fields["hidden_size"],
        int(require(cfg, "mamba_n_heads")),
        int(require(cfg, "mamba_d_head")),
        int(get(cfg, "mamba_n_groups", default=1)),
        int(require(cfg, "mamba_d_state")),
        int(get(cfg, "mamba_d_conv", default=4)),
    )
    experts = int(get(cfg, "num_local_experts", default=0))
    shared = int(require(cfg, "shared_intermediate_size"))
    moe = MoeSpec(
        num_experts=experts,
        num_experts_per_tok=int(get(cfg, "num_experts_per_tok", default=0)),
        expert_intermediate_size=fields["intermediate_size"],
        shared_expert_intermediate_size=shared,
    )
    rope = get(cfg, "position_embedding_type", default="rope") != "nope"
    return fields | {
        "tie_word_embeddings": bool(get(cfg, "tie_word_embeddings", default=True)),
        "layer_types": kinds,
        "mamba": state,
        "not_modelled": (MAMBA_PREFIX_CACHING_NOT_MODELLED,),
        # without experts the shared MLP is the whole MLP (GraniteMoeHybridMLP)
        "moe": moe if experts else None,
        "intermediate_size": fields["intermediate_size"] if experts else shared,
        "partial_rotary_factor": 1.0 if rope else 0.0,
    }


def _mamba1(hidden: int, cfg: dict[str, Any]) -> MambaStateSpec:
    """Jamba's MambaMixer (Mamba-1; vllm/model_executor/layers/mamba/mamba_mixer.py) and its V1
    state (mamba1_state_shape): conv (kernel - 1) x inner, SSM inner x d_state."""
    inner = int(get(cfg, "mamba_expand", default=2)) * hidden
    state = int(get(cfg, "mamba_d_state", default=16))
    kernel = int(get(cfg, "mamba_d_conv", default=4))
    dt_rank = get(cfg, "mamba_dt_rank", default="auto")
    dt_rank = -(-hidden // 16) if dt_rank == "auto" else int(dt_rank)
    params = (
        hidden * 2 * inner  # in_proj (x and gate)
        + inner * kernel
        + (inner if get(cfg, "mamba_conv_bias", default=True) else 0)  # conv1d
        + inner * (dt_rank + 2 * state)  # x_proj
        + dt_rank * inner
        + inner  # dt_proj with bias
        + inner * state
        + inner  # A, D
        + inner * hidden  # out_proj
        + dt_rank
        + 2 * state  # Jamba's dt, B and C RMSNorms
    )
    return MambaStateSpec(
        conv_channels=inner,
        conv_kernel=kernel,
        ssm_heads=inner,
        ssm_state_dims=(1, state),
        params_per_layer=params,
    )


def jamba(cfg: dict[str, Any]) -> dict[str, Any]:
    """JambaForCausalLM: attention every `attn_layer_period` layers (at `attn_layer_offset`),
    Mamba-1 elsewhere; MoE every `expert_layer_period` layers, a dense MLP elsewhere; no RoPE."""
    fields = base_fields(cfg)
    period, offset = int(require(cfg, "attn_layer_period")), int(require(cfg, "attn_layer_offset"))
    kinds = tuple(FULL if i % period == offset else MAMBA for i in range(fields["num_layers"]))
    moe = MoeSpec(
        num_experts=int(require(cfg, "num_experts")),
        num_experts_per_tok=int(require(cfg, "num_experts_per_tok")),
        expert_intermediate_size=fields["intermediate_size"],
        layer_period=int(require(cfg, "expert_layer_period")),
        layer_offset=int(require(cfg, "expert_layer_offset")),
    )
    return fields | {
        "layer_types": kinds,
        "mamba": _mamba1(fields["hidden_size"], cfg),
        "not_modelled": (MAMBA_PREFIX_CACHING_NOT_MODELLED,),
        "moe": moe,
        "partial_rotary_factor": 0.0,
    }


NEMOTRON_H_BLOCKS = {"M": MAMBA, "*": FULL, "-": MLP}


def nemotron_h(cfg: dict[str, Any]) -> dict[str, Any]:
    """NemotronHForCausalLM: one block per layer, `hybrid_override_pattern` M (Mamba2),
    * (attention, no RoPE) or - (squared-ReLU MLP, up and down only)."""
    pattern = str(require(cfg, "hybrid_override_pattern"))
    if set(pattern) - set(NEMOTRON_H_BLOCKS):
        raise UnsupportedModelError(f"not modelled: Nemotron-H blocks {set(pattern) - set('M*-')}")
    cfg = cfg | {"head_dim": get(cfg, "head_dim", "attention_head_dim")}
    fields = base_fields(cfg)
    state = _mamba2(
        fields["hidden_size"],
        int(require(cfg, "mamba_num_heads")),
        int(require(cfg, "mamba_head_dim")),
        int(require(cfg, "n_groups")),
        int(require(cfg, "ssm_state_size")),
        int(require(cfg, "conv_kernel")),
    )
    ssm_dtype = get(cfg, "mamba_ssm_cache_dtype")
    if ssm_dtype:
        state = replace(state, ssm_state_dtype=str(ssm_dtype))
    return fields | {
        "layer_types": tuple(NEMOTRON_H_BLOCKS[b] for b in pattern),
        "mamba": state,
        "not_modelled": (MAMBA_PREFIX_CACHING_NOT_MODELLED,),
        "gated_mlp": False,
        "norms_per_layer": 1,
        "is_single_block_layers": True,
        "partial_rotary_factor": 0.0,
    }


HYBRID_ARCHITECTURES: dict[str, Reader] = {
    "Qwen3NextForCausalLM": qwen3_next,
    "Qwen3_5ForConditionalGeneration": qwen3_5,
    "Qwen3_5MoeForConditionalGeneration": qwen3_5_moe,
    "GraniteMoeHybridForCausalLM": granite_moe_hybrid,
    "NemotronHForCausalLM": nemotron_h,
    "JambaForCausalLM": jamba,
}
