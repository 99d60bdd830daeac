"""Model specs: the shape facts of a checkpoint that memory and speed depend on.

A `ModelSpec` is built from a Hugging Face `config.json` (a dict), whatever its origin: the offline
catalog (`catalog.py`), a local file or directory, or the hub. Only architectures whose memory
layout kvwise models are accepted; anything else is refused with `UnsupportedModelError`, never
approximated with a formula that might be silently wrong.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from kvwise.core.config_fields import get as _get
from kvwise.core.model_spec import (
    CHUNKED,
    DTYPE_BYTES,
    FULL,
    MAMBA,
    MLP,
    SLIDING,
    MambaStateSpec,
    MlaSpec,
    ModelSpec,
    MoeSpec,
    RopeScaling,
    VisionSpec,
)
from kvwise.core.models_dense import DENSE_ARCHITECTURES, Reader, gemma3, minicpmv, mistral, qwen2
from kvwise.core.quant import parse_quantization
from kvwise.errors import DataError, UnsupportedModelError

__all__ = [
    "CHUNKED",
    "DTYPE_BYTES",
    "FULL",
    "MAMBA",
    "MLP",
    "SLIDING",
    "MambaStateSpec",
    "MlaSpec",
    "ModelSpec",
    "MoeSpec",
    "VisionSpec",
    "architecture_of",
    "spec_from_config",
]


# multimodal: the text model's reader; the tower is counted from `vision_config` (`_vision`)
MULTIMODAL_ARCHITECTURES: dict[str, Reader] = {
    "Gemma3ForConditionalGeneration": gemma3,
    "Mistral3ForConditionalGeneration": mistral,
    "MiniCPMV": minicpmv,
    # Qwen2.5-VL: Qwen2's decoder on the top-level config (M-RoPE holds no extra memory)
    "Qwen2_5_VLForConditionalGeneration": qwen2,
}
# Dense and multimodal readers are here; the MoE and hybrid ones (`models_moe.py`,
# `models_hybrid.py`) and the vision towers are imported for a model that needs them, so that
# `kvwise plan` of a dense text model does not load them. Each architecture is in one table only
# (tests/core/test_models.py), so the order of the look-up changes no reader.
_COMMON_ARCHITECTURES = DENSE_ARCHITECTURES | MULTIMODAL_ARCHITECTURES


@cache
def architectures() -> dict[str, Reader]:
    """HF `architectures[0]` -> how to read its config. vLLM's class names, which users also see."""
    from kvwise.core.models_gemma4 import GEMMA4_ARCHITECTURES
    from kvwise.core.models_hybrid import HYBRID_ARCHITECTURES
    from kvwise.core.models_moe import MOE_ARCHITECTURES

    return (
        DENSE_ARCHITECTURES
        | MOE_ARCHITECTURES
        | HYBRID_ARCHITECTURES
        | MULTIMODAL_ARCHITECTURES
        | GEMMA4_ARCHITECTURES
    )


# model_type -> architecture, for configs that omit `architectures`
MODEL_TYPES = {
    "llama": "LlamaForCausalLM",
    "mistral": "MistralForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "qwen3_moe": "Qwen3MoeForCausalLM",
    "qwen3_next": "Qwen3NextForCausalLM",
    "qwen3_5": "Qwen3_5ForConditionalGeneration",
    "qwen3_5_moe": "Qwen3_5MoeForConditionalGeneration",
    "qwen2_5_vl": "Qwen2_5_VLForConditionalGeneration",
    "gpt_oss": "GptOssForCausalLM",
    "deepseek_v2": "DeepseekV2ForCausalLM",
    "deepseek_v3": "DeepseekV3ForCausalLM",
    "mixtral": "MixtralForCausalLM",
    "phi3": "Phi3ForCausalLM",
    "gemma2": "Gemma2ForCausalLM",
    "gemma3": "Gemma3ForConditionalGeneration",
    "gemma3_text": "Gemma3ForCausalLM",
    "gemma4": "Gemma4ForConditionalGeneration",
    "gemma4_text": "Gemma4ForCausalLM",
    "internlm2": "InternLM2ForCausalLM",
    "chatglm": "ChatGLMModel",
    "baichuan": "BaichuanForCausalLM",
    "qwen": "QWenLMHeadModel",
}


def architecture_of(config: dict[str, Any]) -> str:
    archs = config.get("architectures") or []
    if archs:
        return str(archs[0])
    model_type = config.get("model_type")
    if model_type in MODEL_TYPES:
        return MODEL_TYPES[model_type]
    raise DataError("config.json names neither `architectures` nor a known `model_type`")


def _reader(arch: str, model_id: str) -> Reader:
    common = _COMMON_ARCHITECTURES.get(arch)
    if common is not None:
        return common
    from kvwise.core.models_hybrid import NOT_MODELLED_ARCHITECTURES

    if arch in NOT_MODELLED_ARCHITECTURES:
        raise UnsupportedModelError(
            f"{model_id}: architecture {arch}: not modelled: {NOT_MODELLED_ARCHITECTURES[arch]}"
        )
    readers = architectures()
    if arch not in readers:
        known = ", ".join(sorted(readers))
        raise UnsupportedModelError(
            f"{model_id}: architecture {arch} is not modelled by kvwise (modelled: {known})"
        )
    return readers[arch]


def _dtype(config: dict[str, Any], text: dict[str, Any], model_id: str) -> str:
    dtype = str(
        _get(config, "torch_dtype", "dtype", default=_get(text, "torch_dtype", default="bfloat16"))
    )
    if dtype not in DTYPE_BYTES:
        raise DataError(f"{model_id}: unknown torch_dtype {dtype!r}")
    return dtype


def _rope_scaling(text: dict[str, Any]) -> RopeScaling | None:
    """The text config's rope_scaling as written ("type" in older configs, "rope_type" later)."""
    rope = text.get("rope_scaling")
    if not isinstance(rope, dict):
        return None
    kind = rope.get("rope_type", rope.get("type"))
    return RopeScaling(
        rope_type=str(kind) if kind is not None else None,
        factor=float(rope.get("factor", 1.0) or 1.0),
        has_original_max_position_embeddings="original_max_position_embeddings" in rope,
    )


def spec_from_config(
    config: dict[str, Any],
    model_id: str,
    *,
    source: str = "",
    published_params: int | None = None,
) -> ModelSpec:
    """Build a ModelSpec from a config.json dict; refuse architectures that are not modelled."""
    arch = architecture_of(config)
    reader = _reader(arch, model_id)
    text = config | config.get("text_config", {}) if "text_config" in config else config
    try:
        fields = reader(text)
    except UnsupportedModelError as exc:  # a variant of a modelled architecture that is not
        raise UnsupportedModelError(f"{model_id}: {exc}") from exc
    vision, not_modelled = None, tuple(fields.pop("not_modelled", ()))
    if "vision_config" in config:
        vision, tower_not_modelled = _vision(config, arch, fields["hidden_size"])
        not_modelled += tower_not_modelled
    if "quant" not in fields:
        fields["quant"] = parse_quantization(config.get("quantization_config"), model_id)
    fields.setdefault("rope_scaling", _rope_scaling(text))
    return ModelSpec(
        model_id=model_id,
        architecture=arch,
        dtype=_dtype(config, text, model_id),
        vision=vision,
        not_modelled=not_modelled,
        published_params=published_params,
        source=source,
        **fields,
    )


def _vision(
    config: dict[str, Any], arch: str, text_hidden: int
) -> tuple[VisionSpec | None, tuple[str, ...]]:
    """The vision tower of a checkpoint with a `vision_config` (None: not one kvwise counts),
    and what of its memory is not modelled. Its modules are imported only for such a model."""
    from kvwise.core.vision import VISION_BUFFERS, VISION_PROFILING_NOT_MODELLED, VISION_TOWERS
    from kvwise.core.vision_qwen25 import (
        qwen2_5_vl_encoder,
        qwen2_5_vl_sharded,
        qwen2_5_vl_vision,
    )

    # multimodal architectures whose encoder profile `planner/vision_profile.py` models: the
    # tower's parameters, those of them split across TP ranks, and the encoder's shape
    modelled_encoders = {
        "Qwen2_5_VLForConditionalGeneration": (
            qwen2_5_vl_vision,
            qwen2_5_vl_sharded,
            qwen2_5_vl_encoder,
        ),
    }
    if arch in VISION_TOWERS:
        buffers = VISION_BUFFERS.get(arch, lambda _config, _hidden: 0)
        vision = VisionSpec(
            num_params=VISION_TOWERS[arch](config, text_hidden),
            num_buffer_elements=buffers(config, text_hidden),
        )
        return vision, (VISION_PROFILING_NOT_MODELLED,)
    if arch in modelled_encoders:
        params, sharded, encoder = modelled_encoders[arch]
        vision = VisionSpec(
            num_params=params(config, text_hidden),
            tp_sharded_params=sharded(config, text_hidden),
            encoder=encoder(config),
        )
        return vision, ()
    return None, ()
