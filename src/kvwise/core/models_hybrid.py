"""Readers for hybrid attention / linear-attention architectures, and the precise refusals.

Qwen3-Next (Qwen3NextForCausalLM): every `full_attention_interval`-th layer is gated full
attention, the others gated DeltaNet (linear attention) whose per-request state vLLM V1 keeps as
a MambaSpec page (vllm/model_executor/models/qwen3_next.py, get_mamba_state_shape_from_config:
conv state (conv_kernel - 1) x conv_dim, temporal state num_v_heads x head_k_dim x head_v_dim).
"""

from __future__ import annotations

from typing import Any

from kvwise.core.config_fields import get, require
from kvwise.core.model_spec import FULL, MAMBA, MambaStateSpec, MoeSpec
from kvwise.core.models_dense import Reader, qwen3
from kvwise.errors import UnsupportedModelError

NOT_MODELLED_ARCHITECTURES = {
    "JambaForCausalLM": "Mamba-1 state shapes and Jamba's attention/Mamba interleave",
    "NemotronHForCausalLM": "Mamba-2 state with n_groups replicated across TP ranks",
    "GraniteMoeHybridForCausalLM": "Mamba-2 state with n_groups replicated across TP ranks",
    "FalconH1ForCausalLM": "parallel attention + Mamba-2 mixers in one layer",
    "Qwen2_5_VLForConditionalGeneration": "Qwen2.5-VL's vision encoder profiling (one dummy image "
    "of up to 16,384 tokens through the 32-layer window-attention tower) and its weights",
    "MllamaForConditionalGeneration": "cross-attention KV of the vision layers (CrossAttentionSpec, "
    "sized by max_num_encoder_input_tokens)",
}


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
        "moe": moe,
        "partial_rotary_factor": float(get(cfg, "partial_rotary_factor", default=1.0)),
        # gated attention: q_proj also emits a per-head output gate (attn_output_gate)
        "has_output_gate": bool(get(cfg, "attn_output_gate", default=True)),
    }


HYBRID_ARCHITECTURES: dict[str, Reader] = {"Qwen3NextForCausalLM": qwen3_next}
