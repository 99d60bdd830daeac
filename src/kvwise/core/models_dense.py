"""Readers for dense decoder architectures: config.json dict -> ModelSpec fields."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kvwise.core.config_fields import base_fields as _base_fields
from kvwise.core.config_fields import get as _get
from kvwise.core.config_fields import require as _require
from kvwise.core.model_spec import FULL, SLIDING
from kvwise.errors import UnsupportedModelError

Reader = Callable[[dict[str, Any]], dict[str, Any]]


def llama(cfg: dict[str, Any]) -> dict[str, Any]:
    bias = bool(_get(cfg, "attention_bias", default=False))
    return _base_fields(cfg) | {"has_qkv_bias": bias, "has_o_bias": bias}


def mistral(cfg: dict[str, Any]) -> dict[str, Any]:
    fields = llama(cfg)
    window = _get(cfg, "sliding_window")
    # Mistral-7B-v0.1 declares a 4096-token window on every layer, shorter than its context.
    if window and int(window) < fields["max_position_embeddings"]:
        fields |= {"layer_types": (SLIDING,) * fields["num_layers"], "sliding_window": int(window)}
    return fields


def qwen2(cfg: dict[str, Any]) -> dict[str, Any]:
    # Qwen2/2.5 use a bias on q, k and v (not on o); their sliding window is off by default.
    fields = _base_fields(cfg) | {"has_qkv_bias": True}
    if _get(cfg, "use_sliding_window", default=False):
        raise UnsupportedModelError("Qwen2 with use_sliding_window=true is not modelled")
    return fields


def qwen3(cfg: dict[str, Any]) -> dict[str, Any]:
    # Qwen3 drops the qkv bias and adds RMSNorm on q and k (head_dim each).
    bias = bool(_get(cfg, "attention_bias", default=False))
    return _base_fields(cfg) | {"has_qkv_bias": bias, "has_o_bias": bias, "has_qk_norm": True}


def phi3(cfg: dict[str, Any]) -> dict[str, Any]:
    # Phi-3 fuses qkv and gate/up, which changes no sizes. vLLM ignores Phi-3's sliding_window
    # for KV sizing (every layer keeps full-length KV), so it is modelled as full attention.
    return llama(cfg)


def minicpmv(cfg: dict[str, Any]) -> dict[str, Any]:
    """MiniCPM-V (vLLM's `MiniCPMV`): the release picks the language model from `version`
    (minicpmv.py:MiniCPMV.__new__); 2.6 is Qwen2ForCausalLM on the top-level config."""
    version = str(_get(cfg, "version", default="unversioned (2.0 or 2.5)"))
    if version != "2.6":
        raise UnsupportedModelError(
            f"not modelled: MiniCPM-V version {version} (only 2.6, a Qwen2 language model)"
        )
    return qwen2(cfg)


def gemma2(cfg: dict[str, Any]) -> dict[str, Any]:
    fields = _base_fields(cfg)
    num_layers = fields["num_layers"]
    # Gemma-2 alternates local (sliding) and global layers, starting with a sliding one;
    # it ties embeddings (transformers' default for Gemma) and has 4 norms per layer.
    layer_types = tuple(SLIDING if i % 2 == 0 else FULL for i in range(num_layers))
    return fields | {
        "tie_word_embeddings": bool(_get(cfg, "tie_word_embeddings", default=True)),
        "norms_per_layer": 4,
        "layer_types": layer_types,
        "sliding_window": int(_require(cfg, "sliding_window")),
    }


def gemma3(cfg: dict[str, Any]) -> dict[str, Any]:
    fields = gemma2(cfg)
    pattern = int(_get(cfg, "sliding_window_pattern", default=6))
    # Gemma-3: every `pattern`-th layer is global, the others sliding; q/k norms added.
    layer_types = tuple(
        FULL if (i + 1) % pattern == 0 else SLIDING for i in range(fields["num_layers"])
    )
    return fields | {"layer_types": layer_types, "has_qk_norm": True}


def granite(cfg: dict[str, Any]) -> dict[str, Any]:
    """IBM Granite 3.x (vLLM's `GraniteForCausalLM`, model_executor/models/granite.py): Llama's
    layers with scalar multipliers on embeddings, attention, residuals and logits, which hold no
    memory; the bias on q/k/v/o follows `attention_bias` as in Llama. `mlp_bias` adds a bias to the
    MLP projections (a few MiB), which is not counted."""
    return llama(cfg)


def internlm2(cfg: dict[str, Any]) -> dict[str, Any]:
    bias = bool(_get(cfg, "bias", default=False))
    return _base_fields(cfg) | {"has_qkv_bias": bias, "has_o_bias": bias}


def chatglm(cfg: dict[str, Any]) -> dict[str, Any]:
    # GLM-4 names its fields differently; it has a bias on the fused qkv projection only.
    renamed = dict(cfg)
    renamed |= {
        "num_hidden_layers": _require(cfg, "num_layers", "num_hidden_layers"),
        "intermediate_size": _require(cfg, "ffn_hidden_size"),
        "num_key_value_heads": _require(cfg, "multi_query_group_num"),
        "head_dim": _require(cfg, "kv_channels"),
        "vocab_size": _require(cfg, "padded_vocab_size", "vocab_size"),
        "max_position_embeddings": _require(cfg, "seq_length"),
    }
    return _base_fields(renamed) | {"has_qkv_bias": bool(_get(cfg, "add_qkv_bias", default=True))}


def baichuan(cfg: dict[str, Any]) -> dict[str, Any]:
    return _base_fields(cfg)


def qwen_v1(cfg: dict[str, Any]) -> dict[str, Any]:
    """First-generation Qwen (Qwen-7B/14B/72B, vLLM's `QWenLMHeadModel` in
    model_executor/models/qwen.py): multi-head attention with head_dim = hidden / heads, a bias on
    the fused c_attn (qkv) only, a gated MLP of `intermediate_size // 2` per projection (the
    config counts gate and up together), RMSNorm, untied wte and lm_head."""
    if "visual" in cfg:  # qwen.py hands these to QwenVLForConditionalGeneration
        raise UnsupportedModelError("not modelled: Qwen-VL's visual tower (config has `visual`)")
    hidden = int(_require(cfg, "hidden_size", "n_embd"))
    heads = int(_require(cfg, "num_attention_heads", "n_head"))
    kv_channels = _get(cfg, "kv_channels")
    if kv_channels is not None and int(kv_channels) != hidden // heads:
        raise UnsupportedModelError("not modelled: QWen with kv_channels != hidden_size / heads")
    # vLLM's max_model_len is the smallest length key the config sets (_get_and_verify_max_len)
    lengths = [
        int(cfg[k]) for k in ("max_position_embeddings", "n_positions", "seq_length") if cfg.get(k)
    ]
    renamed = dict(cfg) | {
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "num_hidden_layers": _require(cfg, "num_hidden_layers", "n_layer"),
        "intermediate_size": int(_require(cfg, "intermediate_size", "ffn_hidden_size")) // 2,
        "max_position_embeddings": min(lengths) if lengths else 2048,
    }
    return _base_fields(renamed) | {"has_qkv_bias": True}


DENSE_ARCHITECTURES: dict[str, Reader] = {
    "LlamaForCausalLM": llama,
    "MistralForCausalLM": mistral,
    "Qwen2ForCausalLM": qwen2,
    "Qwen3ForCausalLM": qwen3,
    "Phi3ForCausalLM": phi3,
    "Gemma2ForCausalLM": gemma2,
    "Gemma3ForCausalLM": gemma3,
    "InternLM2ForCausalLM": internlm2,
    "ChatGLMModel": chatglm,
    "ChatGLMForConditionalGeneration": chatglm,
    "Glm4ForCausalLM": llama,
    "GraniteForCausalLM": granite,
    "BaichuanForCausalLM": baichuan,
    "QWenLMHeadModel": qwen_v1,
}
