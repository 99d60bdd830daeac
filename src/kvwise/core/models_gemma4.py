"""Gemma 4 (vLLM's `Gemma4ForConditionalGeneration` / `Gemma4ForCausalLM`): config.json -> fields.

Read in vLLM's `model_executor/models/gemma4.py` at v0.19.0 (the first release with it; 0.18.1
has no gemma4 module) and at v0.32.0:

- `layer_types` lists each layer's attention, sliding (`sliding_window`) or full
  (`Gemma4Attention.__init__`: `per_layer_sliding_window` only on sliding layers).
- Full-attention layers have their own head size `global_head_dim` and, when
  `attention_k_eq_v` is set, `num_global_key_value_heads` KV heads (0.19.0
  `Gemma4DecoderLayer.__init__`; 0.28.0 `transformers_utils/configs/gemma4.py:gemma4_layer_config`;
  0.32.0 through transformers' `per_layer_config`, the same rule). A config without
  `global_head_dim` is read as vLLM 0.19-0.28 read it (the sliding head_dim); transformers 5.15+
  would default it to 512 instead (no published config omits it).
  Their QKVParallelLinear still has a V slice (K is loaded into it), and the KV cache still holds
  K and V, so a full layer's page is 2 x heads x global_head_dim.
- Every layer has the dense gated MLP (`intermediate_size`); with experts (0.19.0
  `enable_moe_block`, 0.32.0 `num_experts` set) a router (RMSNorm without weight, a `scale` of
  hidden size, a hidden x experts projection, a `per_expert_scale` of one value per expert) and
  FusedMoE experts of `moe_intermediate_size` (w13 [E, 2I, H], w2 [E, H, I]) run beside it, with
  three more RMSNorms. The dense MLP is counted as kvwise counts a shared expert.
- q_norm and k_norm per head size (v_norm has no weight), four RMSNorms per layer.
- Per-layer embeddings (`hidden_size_per_layer_input` > 0) and KV sharing
  (`num_kv_shared_layers` > 0), used by the small dense sizes, are refused by name: not modelled.
"""

from __future__ import annotations

from typing import Any

from kvwise.core.config_fields import base_fields, get, require
from kvwise.core.model_spec import FULL, SLIDING, MoeSpec
from kvwise.errors import UnsupportedModelError

HF_LAYER_TYPES = {"full_attention": FULL, "sliding_attention": SLIDING}
# Gemma4Attention / transformers' Gemma4TextConfig: 4 RMSNorms per decoder layer, 3 more with
# experts (post_feedforward_layernorm_1/_2, pre_feedforward_layernorm_2)
NORMS_PER_LAYER = 4
MOE_EXTRA_NORMS = 3


def _refuse_unmodelled(cfg: dict[str, Any]) -> None:
    if cfg.get("audio_config"):
        raise UnsupportedModelError(
            "not modelled: Gemma 4's audio tower (audio_config: transformers' Gemma4AudioModel "
            "and vLLM's embed_audio, gemma4_mm.py)"
        )
    ple = int(get(cfg, "hidden_size_per_layer_input", default=0) or 0)
    if ple > 0:
        raise UnsupportedModelError(
            f"not modelled: Gemma 4 per-layer embeddings (hidden_size_per_layer_input {ple}: "
            "embed_tokens_per_layer, per_layer_model_projection and each layer's gate and "
            "projection, gemma4.py Gemma4Model / Gemma4DecoderLayer)"
        )
    shared = int(get(cfg, "num_kv_shared_layers", default=0) or 0)
    if shared > 0:
        raise UnsupportedModelError(
            f"not modelled: Gemma 4 KV sharing (num_kv_shared_layers {shared}: the last layers "
            "reuse an earlier layer's KV cache, gemma4.py kv_sharing_target_layer_name)"
        )
    if get(cfg, "use_bidirectional_attention") == "all":
        raise UnsupportedModelError(
            "not modelled: Gemma 4 with use_bidirectional_attention 'all' (transformers "
            "rewrites sliding_window for it)"
        )


def _layer_types(cfg: dict[str, Any], num_layers: int) -> tuple[str, ...]:
    names = require(cfg, "layer_types")
    unknown = sorted({n for n in names if n not in HF_LAYER_TYPES})
    if unknown or len(names) != num_layers:
        raise UnsupportedModelError(
            f"not modelled: Gemma 4 layer_types {unknown or len(names)} "
            f"(expected {num_layers} of {sorted(HF_LAYER_TYPES)})"
        )
    return tuple(HF_LAYER_TYPES[n] for n in names)


def _moe(cfg: dict[str, Any], dense_intermediate: int) -> MoeSpec | None:
    experts = get(cfg, "num_experts")
    enabled = get(cfg, "enable_moe_block", "use_second_mlp_block", default=experts is not None)
    if experts is None or not enabled:
        return None
    return MoeSpec(
        num_experts=int(experts),
        num_experts_per_tok=int(require(cfg, "top_k_experts")),
        expert_intermediate_size=int(
            require(cfg, "moe_intermediate_size", "expert_intermediate_size")
        ),
        # the dense MLP beside the experts: gate_up + down, as a shared expert without gate
        shared_expert_intermediate_size=dense_intermediate,
        # Gemma4Router.per_expert_scale: one value per expert, the size of a router bias
        has_router_bias=True,
    )


def gemma4(cfg: dict[str, Any]) -> dict[str, Any]:
    _refuse_unmodelled(cfg)
    fields = base_fields(cfg)
    num_layers = fields["num_layers"]
    layer_types = _layer_types(cfg, num_layers)
    head_dim = fields["head_dim"]
    full_head_dim = int(get(cfg, "global_head_dim", default=head_dim))
    full_kv_heads = fields["num_kv_heads"]
    if get(cfg, "attention_k_eq_v", default=False):
        full_kv_heads = int(get(cfg, "num_global_key_value_heads", default=full_kv_heads))
    moe = _moe(cfg, fields["intermediate_size"])
    # the router's `scale` (hidden size) is counted as one more norm-sized vector
    norms = NORMS_PER_LAYER + (MOE_EXTRA_NORMS + 1 if moe is not None else 0)
    # get_rope builds one cos/sin cache per parameter set: the sliding layers' (head_dim wide,
    # default RoPE) and the full layers' proportional RoPE, whose Gemma4RotaryEmbedding passes
    # rotary_dim = head_size (layers/rotary_embedding/gemma4_rope.py, 0.19.0 and 0.32.0)
    widths = {SLIDING: head_dim, FULL: full_head_dim}
    rotary_dims = tuple(widths[kind] for kind in (SLIDING, FULL) if kind in layer_types)
    return fields | {
        "tie_word_embeddings": bool(get(cfg, "tie_word_embeddings", default=True)),
        "norms_per_layer": norms,
        "layer_types": layer_types,
        "sliding_window": int(require(cfg, "sliding_window")),
        "has_qk_norm": True,
        "full_head_dim": full_head_dim if full_head_dim != head_dim else None,
        "full_num_kv_heads": full_kv_heads if full_kv_heads != fields["num_kv_heads"] else None,
        "rotary_cache_dims": rotary_dims,
        "moe": moe,
    }


# the architectures this module reads; the vision tower is counted from `vision_config`
GEMMA4_ARCHITECTURES = {
    "Gemma4ForConditionalGeneration": gemma4,
    "Gemma4ForCausalLM": gemma4,
}
