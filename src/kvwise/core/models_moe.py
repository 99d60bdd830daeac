"""Readers for mixture-of-experts architectures, MLA included: config.json -> ModelSpec fields."""

from __future__ import annotations

from typing import Any

from kvwise.core.config_fields import base_fields, get, require
from kvwise.core.model_spec import FULL, SLIDING, MlaSpec, MoeSpec
from kvwise.core.models_dense import Reader, llama, mistral, qwen3
from kvwise.core.quant import QuantSpec, parse_quantization
from kvwise.errors import UnsupportedModelError

# MXFP4 (OCP microscaling): 4-bit E2M1 values, two per byte, and one E8M0 (1-byte) scale per
# block of 32 values: 0.5 + 1/32 bytes per parameter (mxfp4.py: w13_weight uint8 [.., k // 2],
# w13_weight_scale uint8 [.., k // 32]).
MXFP4_EXPERTS = QuantSpec("mxfp4", 4, 32, scale_bytes=1)

# config.json `layer_types` values -> kvwise layer kinds
HF_LAYER_TYPES = {"full_attention": FULL, "sliding_attention": SLIDING}


def qwen3_moe(cfg: dict[str, Any]) -> dict[str, Any]:
    if get(cfg, "mlp_only_layers") or int(get(cfg, "decoder_sparse_step", default=1)) != 1:
        raise UnsupportedModelError("Qwen3-MoE with dense layers interleaved is not modelled")
    moe = MoeSpec(
        num_experts=int(require(cfg, "num_experts")),
        num_experts_per_tok=int(require(cfg, "num_experts_per_tok")),
        expert_intermediate_size=int(require(cfg, "moe_intermediate_size")),
    )
    return qwen3(cfg) | {"moe": moe}


def mixtral(cfg: dict[str, Any]) -> dict[str, Any]:
    moe = MoeSpec(
        num_experts=int(require(cfg, "num_local_experts")),
        num_experts_per_tok=int(require(cfg, "num_experts_per_tok")),
        expert_intermediate_size=int(require(cfg, "intermediate_size")),
    )
    return mistral(cfg) | {"moe": moe}


def _mxfp4(cfg: dict[str, Any]) -> QuantSpec | None:
    """gpt-oss ships its experts in MXFP4; attention, router, embeddings stay bf16
    (`modules_to_not_convert`, and vLLM's Mxfp4Config quantizes FusedMoE layers only)."""
    qc = cfg.get("quantization_config") or {}
    if not qc:
        return None
    try:
        return parse_quantization(qc, "gpt-oss")  # an experts-only MXFP4 scheme where known
    except UnsupportedModelError:
        if str(qc.get("quant_method", "")).lower() != "mxfp4":
            raise
        return MXFP4_EXPERTS


MXFP4_TRITON_NOT_MODELLED = (
    "MXFP4 expert layout of vLLM's Triton MoE backend (Hopper/Blackwell): the experts are sized "
    "with the Marlin backend's padding, which vLLM logs on other GPUs; on H100 with the Triton "
    "backend vLLM 0.14.1 logged 64.38 GiB for gpt-oss-120b where this gives 65.91 (vllm#33155)"
)


def gpt_oss(cfg: dict[str, Any]) -> dict[str, Any]:
    """GptOssForCausalLM: alternating sliding (128) / full attention layers with learned sinks,
    biases on q/k/v/o, MoE with biased experts and router."""
    fields = base_fields(cfg)
    layer_types = tuple(HF_LAYER_TYPES[t] for t in require(cfg, "layer_types"))
    if len(layer_types) != fields["num_layers"]:
        raise UnsupportedModelError("gpt-oss config: layer_types does not name every layer")
    moe = MoeSpec(
        num_experts=int(require(cfg, "num_local_experts")),
        num_experts_per_tok=int(require(cfg, "num_experts_per_tok", "experts_per_token")),
        expert_intermediate_size=fields["intermediate_size"],
        has_expert_bias=True,
        has_router_bias=True,
    )
    quant = _mxfp4(cfg)
    return fields | {
        "has_qkv_bias": True,
        "has_o_bias": True,
        "has_attention_sinks": True,
        "layer_types": layer_types,
        "sliding_window": int(require(cfg, "sliding_window")),
        "moe": moe,
        "quant": quant,  # MXFP4 holds the experts only (weights.py: is_experts_only)
        "not_modelled": (MXFP4_TRITON_NOT_MODELLED,) if quant else (),
    }


def _mla(cfg: dict[str, Any]) -> MlaSpec:
    q_lora = get(cfg, "q_lora_rank")
    return MlaSpec(
        kv_lora_rank=int(require(cfg, "kv_lora_rank")),
        qk_rope_head_dim=int(require(cfg, "qk_rope_head_dim")),
        qk_nope_head_dim=int(require(cfg, "qk_nope_head_dim")),
        v_head_dim=int(require(cfg, "v_head_dim")),
        q_lora_rank=int(q_lora) if q_lora else None,
    )


MLA_BLOCK_SIZE_NOT_MODELLED = (
    "MLA backends' own block size (FlashMLA 64, CUTLASS MLA 128 tokens): blocks are counted at "
    "the planned --block-size; KV bytes and tokens do not depend on it beyond one block's rounding"
)


def deepseek(cfg: dict[str, Any]) -> dict[str, Any]:
    """DeepseekV2/V3ForCausalLM (DeepSeek-V2, V2-Lite, V3, R1, Kimi-K2): MLA attention, MoE
    with shared experts after `first_k_dense_replace` dense layers."""
    if get(cfg, "index_topk") is not None:
        raise UnsupportedModelError(
            "not modelled: DeepSeek-V3.2 sparse attention (its indexer keeps its own key cache)"
        )
    if int(get(cfg, "moe_layer_freq", default=1)) != 1:
        raise UnsupportedModelError("not modelled: DeepSeek MoE layers with moe_layer_freq != 1")
    expert = int(require(cfg, "moe_intermediate_size"))
    moe = MoeSpec(
        num_experts=int(require(cfg, "n_routed_experts")),
        num_experts_per_tok=int(require(cfg, "num_experts_per_tok")),
        expert_intermediate_size=expert,
        # the shared experts run as one MLP n_shared_experts times as wide (DeepseekV2MoE)
        shared_expert_intermediate_size=int(get(cfg, "n_shared_experts", default=0)) * expert,
        num_dense_layers=int(get(cfg, "first_k_dense_replace", default=0)),
        has_score_correction_bias=get(cfg, "topk_method") == "noaux_tc",
    )
    mla = _mla(cfg)
    # vLLM (ModelConfig.get_num_kv_heads / get_head_size with use_mla): one latent KV "head" of
    # kv_lora_rank + qk_rope_head_dim, the same on every TP rank
    return base_fields(cfg) | {
        "num_kv_heads": 1,
        "head_dim": mla.cache_dim,
        "mla": mla,
        "moe": moe,
        "not_modelled": (MLA_BLOCK_SIZE_NOT_MODELLED,),
    }


CHUNKED_LOCAL_NOT_MODELLED = (
    "chunked-local attention KV groups: KV is sized for full-length attention on every layer, "
    "as vLLM does by default (it disables the hybrid KV-cache manager for chunked local attention "
    "unless VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=1, the default of some later releases)"
)


def llama4(cfg: dict[str, Any]) -> dict[str, Any]:
    """Llama4ForConditionalGeneration's text model (vllm/model_executor/models/llama4.py): MoE
    every `interleave_moe_layer_step` layers (routed experts + one shared expert), dense layers of
    `intermediate_size_mlp` in between; q/k L2-normalised without weights; no biases."""
    fields = llama(cfg)
    step = int(get(cfg, "interleave_moe_layer_step", default=1))
    if step != 1:
        raise UnsupportedModelError("not modelled: Llama-4 with dense layers between MoE layers")
    expert = int(require(cfg, "intermediate_size"))
    moe = MoeSpec(
        num_experts=int(require(cfg, "num_local_experts")),
        num_experts_per_tok=int(require(cfg, "num_experts_per_tok")),
        expert_intermediate_size=expert,
        shared_expert_intermediate_size=expert,
    )
    # chunked-local layers are held at full length by default (see CHUNKED_LOCAL_NOT_MODELLED)
    chunk = get(cfg, "attention_chunk_size")
    return fields | {
        "intermediate_size": int(get(cfg, "intermediate_size_mlp", default=expert)),
        "moe": moe,
        "not_modelled": (CHUNKED_LOCAL_NOT_MODELLED,) if chunk else (),
    }


MOE_ARCHITECTURES: dict[str, Reader] = {
    "Qwen3MoeForCausalLM": qwen3_moe,
    "MixtralForCausalLM": mixtral,
    "GptOssForCausalLM": gpt_oss,
    "DeepseekV2ForCausalLM": deepseek,
    "DeepseekV3ForCausalLM": deepseek,
    "Llama4ForConditionalGeneration": llama4,
}
