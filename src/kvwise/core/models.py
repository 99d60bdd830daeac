"""Model specs: the shape facts of a checkpoint that memory and speed depend on.

A `ModelSpec` is built from a Hugging Face `config.json` (a dict), whatever its origin: the offline
catalog (`catalog.py`), a local file or directory, or the hub. Only architectures whose memory
layout kvwise models are accepted; anything else is refused with `UnsupportedModelError`, never
approximated with a formula that might be silently wrong.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from kvwise.core.quant import QuantSpec, parse_quantization
from kvwise.errors import DataError, UnsupportedModelError

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
FULL = "full"
SLIDING = "sliding"


@dataclass(frozen=True)
class MoeSpec:
    num_experts: int
    num_experts_per_tok: int
    expert_intermediate_size: int
    shared_expert_intermediate_size: int = 0  # 0: no shared expert
    has_shared_expert_gate: bool = False


@dataclass(frozen=True)
class VisionSpec:
    """A vision tower vLLM loads next to the text model (multimodal checkpoints)."""

    num_params: int


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
    norms_per_layer: int = 2
    gated_mlp: bool = True
    layer_types: tuple[str, ...] = ()  # FULL or SLIDING per layer; empty means all FULL
    sliding_window: int | None = None
    moe: MoeSpec | None = None
    vision: VisionSpec | None = None
    quant: QuantSpec | None = None
    published_params: int | None = None
    source: str = ""
    notes: tuple[str, ...] = field(default=())
    # the checkpoint's tensors as vLLM holds them (safetensors metadata), whole model; None: unread
    checkpoint_weight_bytes: int | None = None

    @property
    def attention_layer_types(self) -> tuple[str, ...]:
        return self.layer_types or (FULL,) * self.num_layers

    @property
    def is_hybrid(self) -> bool:
        return len(set(self.attention_layer_types)) > 1

    @property
    def q_size(self) -> int:
        return self.num_attention_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_kv_heads * self.head_dim

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    def with_quant(self, quant: QuantSpec | None) -> ModelSpec:
        return replace(self, quant=quant)


def _get(cfg: dict[str, Any], *names: str, default: Any = None) -> Any:
    for name in names:
        if cfg.get(name) is not None:
            return cfg[name]
    return default


def _require(cfg: dict[str, Any], *names: str) -> Any:
    value = _get(cfg, *names)
    if value is None:
        raise DataError(f"config.json lacks {' / '.join(names)}")
    return value


def _base_fields(cfg: dict[str, Any]) -> dict[str, Any]:
    """Fields every Llama-like config names the same way."""
    hidden = int(_require(cfg, "hidden_size"))
    heads = int(_require(cfg, "num_attention_heads"))
    return {
        "hidden_size": hidden,
        "num_layers": int(_require(cfg, "num_hidden_layers", "num_layers")),
        "num_attention_heads": heads,
        # Configs without the key are multi-head attention (transformers' default)
        "num_kv_heads": int(_get(cfg, "num_key_value_heads", default=heads)),
        "head_dim": int(_get(cfg, "head_dim", default=hidden // heads)),
        "intermediate_size": int(_require(cfg, "intermediate_size")),
        "vocab_size": int(_require(cfg, "vocab_size")),
        "max_position_embeddings": int(
            _get(cfg, "max_position_embeddings", "model_max_length", default=2048)
        ),
        "tie_word_embeddings": bool(_get(cfg, "tie_word_embeddings", default=False)),
    }


def _llama(cfg: dict[str, Any]) -> dict[str, Any]:
    bias = bool(_get(cfg, "attention_bias", default=False))
    return _base_fields(cfg) | {"has_qkv_bias": bias, "has_o_bias": bias}


def _mistral(cfg: dict[str, Any]) -> dict[str, Any]:
    fields = _llama(cfg)
    window = _get(cfg, "sliding_window")
    # Mistral-7B-v0.1 declares a 4096-token window on every layer, shorter than its context.
    if window and int(window) < fields["max_position_embeddings"]:
        fields |= {"layer_types": (SLIDING,) * fields["num_layers"], "sliding_window": int(window)}
    return fields


def _qwen2(cfg: dict[str, Any]) -> dict[str, Any]:
    # Qwen2/2.5 use a bias on q, k and v (not on o); their sliding window is off by default.
    fields = _base_fields(cfg) | {"has_qkv_bias": True}
    if _get(cfg, "use_sliding_window", default=False):
        raise UnsupportedModelError("Qwen2 with use_sliding_window=true is not modelled")
    return fields


def _qwen3(cfg: dict[str, Any]) -> dict[str, Any]:
    # Qwen3 drops the qkv bias and adds RMSNorm on q and k (head_dim each).
    bias = bool(_get(cfg, "attention_bias", default=False))
    return _base_fields(cfg) | {"has_qkv_bias": bias, "has_o_bias": bias, "has_qk_norm": True}


def _qwen3_moe(cfg: dict[str, Any]) -> dict[str, Any]:
    if _get(cfg, "mlp_only_layers") or int(_get(cfg, "decoder_sparse_step", default=1)) != 1:
        raise UnsupportedModelError("Qwen3-MoE with dense layers interleaved is not modelled")
    moe = MoeSpec(
        num_experts=int(_require(cfg, "num_experts")),
        num_experts_per_tok=int(_require(cfg, "num_experts_per_tok")),
        expert_intermediate_size=int(_require(cfg, "moe_intermediate_size")),
    )
    return _qwen3(cfg) | {"moe": moe}


def _mixtral(cfg: dict[str, Any]) -> dict[str, Any]:
    moe = MoeSpec(
        num_experts=int(_require(cfg, "num_local_experts")),
        num_experts_per_tok=int(_require(cfg, "num_experts_per_tok")),
        expert_intermediate_size=int(_require(cfg, "intermediate_size")),
    )
    return _mistral(cfg) | {"moe": moe}


def _phi3(cfg: dict[str, Any]) -> dict[str, Any]:
    # Phi-3 fuses qkv and gate/up, which changes no sizes. vLLM ignores Phi-3's sliding_window
    # for KV sizing (every layer keeps full-length KV), so it is modelled as full attention.
    return _llama(cfg)


def _gemma2(cfg: dict[str, Any]) -> dict[str, Any]:
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


def _gemma3(cfg: dict[str, Any]) -> dict[str, Any]:
    fields = _gemma2(cfg)
    pattern = int(_get(cfg, "sliding_window_pattern", default=6))
    # Gemma-3: every `pattern`-th layer is global, the others sliding; q/k norms added.
    layer_types = tuple(
        FULL if (i + 1) % pattern == 0 else SLIDING for i in range(fields["num_layers"])
    )
    return fields | {"layer_types": layer_types, "has_qk_norm": True}


def _internlm2(cfg: dict[str, Any]) -> dict[str, Any]:
    bias = bool(_get(cfg, "bias", default=False))
    return _base_fields(cfg) | {"has_qkv_bias": bias, "has_o_bias": bias}


def _chatglm(cfg: dict[str, Any]) -> dict[str, Any]:
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


def _baichuan(cfg: dict[str, Any]) -> dict[str, Any]:
    return _base_fields(cfg)


# HF `architectures[0]` -> how to read its config. vLLM's class names, which users also see.
ARCHITECTURES: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "LlamaForCausalLM": _llama,
    "MistralForCausalLM": _mistral,
    "Qwen2ForCausalLM": _qwen2,
    "Qwen3ForCausalLM": _qwen3,
    "Qwen3MoeForCausalLM": _qwen3_moe,
    "MixtralForCausalLM": _mixtral,
    "Phi3ForCausalLM": _phi3,
    "Gemma2ForCausalLM": _gemma2,
    "Gemma3ForCausalLM": _gemma3,
    "Gemma3ForConditionalGeneration": _gemma3,
    "InternLM2ForCausalLM": _internlm2,
    "ChatGLMModel": _chatglm,
    "ChatGLMForConditionalGeneration": _chatglm,
    "Glm4ForCausalLM": _llama,
    "BaichuanForCausalLM": _baichuan,
}

# model_type -> architecture, for configs that omit `architectures`
MODEL_TYPES = {
    "llama": "LlamaForCausalLM",
    "mistral": "MistralForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "qwen3_moe": "Qwen3MoeForCausalLM",
    "mixtral": "MixtralForCausalLM",
    "phi3": "Phi3ForCausalLM",
    "gemma2": "Gemma2ForCausalLM",
    "gemma3": "Gemma3ForConditionalGeneration",
    "gemma3_text": "Gemma3ForCausalLM",
    "internlm2": "InternLM2ForCausalLM",
    "chatglm": "ChatGLMModel",
    "baichuan": "BaichuanForCausalLM",
}


def architecture_of(config: dict[str, Any]) -> str:
    archs = config.get("architectures") or []
    if archs:
        return str(archs[0])
    model_type = config.get("model_type")
    if model_type in MODEL_TYPES:
        return MODEL_TYPES[model_type]
    raise DataError("config.json names neither `architectures` nor a known `model_type`")


def _siglip_params(vision: dict[str, Any]) -> int:
    """Parameters of a SigLIP vision tower (Gemma-3), from its config."""
    hidden = int(vision["hidden_size"])
    inter = int(vision["intermediate_size"])
    patch = int(vision["patch_size"])
    image = int(vision["image_size"])
    channels = int(vision.get("num_channels", 3))
    num_patches = (image // patch) ** 2
    # per layer: q, k, v, o (with biases), fc1 + fc2 (with biases), 2 LayerNorms (weight + bias)
    per_layer = 4 * (hidden * hidden + hidden) + 2 * hidden * inter + inter + hidden + 4 * hidden
    embeddings = channels * patch * patch * hidden + hidden + num_patches * hidden
    return int(vision["num_hidden_layers"]) * per_layer + embeddings + 2 * hidden


def spec_from_config(
    config: dict[str, Any],
    model_id: str,
    *,
    source: str = "",
    published_params: int | None = None,
) -> ModelSpec:
    """Build a ModelSpec from a config.json dict; refuse architectures that are not modelled."""
    arch = architecture_of(config)
    if arch not in ARCHITECTURES:
        known = ", ".join(sorted(ARCHITECTURES))
        raise UnsupportedModelError(
            f"{model_id}: architecture {arch} is not modelled by kvwise (modelled: {known})"
        )
    text = config | config.get("text_config", {}) if "text_config" in config else config
    fields = ARCHITECTURES[arch](text)
    vision = None
    if "vision_config" in config and arch == "Gemma3ForConditionalGeneration":
        # projector: RMSNorm + linear from the vision width to the text width
        vision_cfg = config["vision_config"]
        projector = int(vision_cfg["hidden_size"]) * (fields["hidden_size"] + 1)
        vision = VisionSpec(num_params=_siglip_params(vision_cfg) + projector)
    dtype = str(
        _get(config, "torch_dtype", "dtype", default=_get(text, "torch_dtype", default="bfloat16"))
    )
    if dtype not in DTYPE_BYTES:
        raise DataError(f"{model_id}: unknown torch_dtype {dtype!r}")
    return ModelSpec(
        model_id=model_id,
        architecture=arch,
        dtype=dtype,
        vision=vision,
        quant=parse_quantization(config.get("quantization_config"), model_id),
        published_params=published_params,
        source=source,
        **fields,
    )
