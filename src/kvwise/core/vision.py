"""Vision towers of multimodal checkpoints: their parameter counts, from `vision_config`.

vLLM loads the tower next to the text model and keeps it unquantized. What the tower costs at
start-up beyond its weights (vLLM profiles the encoder with dummy images of the largest size)
is not derived here: `memory.py` carries one allowance fitted on gemma-3, and every plan of a
multimodal model names that part as not modelled. Qwen2.5-VL is the exception: its tower is
`vision_qwen25.py`'s and its encoder profile `planner/vision_profile.py`'s.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kvwise.errors import UnsupportedModelError

VISION_PROFILING_NOT_MODELLED = (
    "vision encoder profiling activation (vLLM's dummy-image encoder pass; kvwise adds a fixed "
    "0.3 GiB allowance fitted on gemma-3-27b-it)"
)


def _siglip(vision: dict[str, Any], text_hidden: int) -> int:
    """SigLIP tower (Gemma-3) plus its projector (RMSNorm + linear to the text width)."""
    hidden = int(vision["hidden_size"])
    inter = int(vision["intermediate_size"])
    patch = int(vision["patch_size"])
    image = int(vision["image_size"])
    channels = int(vision.get("num_channels", 3))
    num_patches = (image // patch) ** 2
    # per layer: q, k, v, o (with biases), fc1 + fc2 (with biases), 2 LayerNorms (weight + bias)
    per_layer = 4 * (hidden * hidden + hidden) + 2 * hidden * inter + inter + hidden + 4 * hidden
    embeddings = channels * patch * patch * hidden + hidden + num_patches * hidden
    tower = int(vision["num_hidden_layers"]) * per_layer + embeddings + 2 * hidden
    return tower + hidden * (text_hidden + 1)


def _pixtral(vision: dict[str, Any], text_hidden: int, merge: int) -> int:
    """Pixtral tower (Mistral-Small-3.x, vLLM's PixtralHFVisionModel) plus Mistral3's projector."""
    hidden = int(vision["hidden_size"])
    inter = int(vision["intermediate_size"])
    patch = int(vision["patch_size"])
    channels = int(vision.get("num_channels", 3))
    # per layer: q, k, v, o without biases; gated MLP (gate, up, down); 2 RMSNorms
    per_layer = 4 * hidden * hidden + 3 * hidden * inter + 2 * hidden
    tower = int(vision["num_hidden_layers"]) * per_layer
    tower += channels * patch * patch * hidden + hidden  # patch_conv (no bias) and ln_pre
    # Mistral3MultiModalProjector: RMSNorm, patch merger (merge^2 patches -> 1), two linears
    projector = hidden + merge * merge * hidden * hidden + hidden * text_hidden
    return tower + projector + text_hidden * text_hidden


def _llama4(config: dict[str, Any], text_hidden: int) -> int:
    """Llama-4's vision tower (vllm/model_executor/models/mllama4.py: Llama4VisionModel), its
    pixel-shuffle adapter and the projector to the text width; no projector biases."""
    vision = config["vision_config"]
    hidden = int(vision["hidden_size"])
    inter = int(vision["intermediate_size"])
    patch = int(vision["patch_size"])
    channels = int(vision.get("num_channels", 3))
    num_patches = (int(vision["image_size"]) // patch) ** 2
    # per layer: q, k, v, o and fc1, fc2, all with biases; 2 LayerNorms (weight + bias)
    per_layer = 4 * (hidden * hidden + hidden) + 2 * hidden * inter + inter + hidden + 4 * hidden
    tower = int(vision["num_hidden_layers"]) * per_layer
    # unfold-conv patch embedding (no bias), class embedding, positions (+ class), 2 LayerNorms
    tower += channels * patch * patch * hidden + hidden + (num_patches + 1) * hidden + 4 * hidden
    shuffled = int(hidden / float(vision["pixel_shuffle_ratio"]) ** 2)
    adapter = shuffled * int(vision["projector_input_dim"])
    adapter += int(vision["projector_input_dim"]) * int(vision["projector_output_dim"])
    projector = int(vision["vision_output_dim"]) * text_hidden
    return tower + adapter + projector


def gemma3_vision(config: dict[str, Any], text_hidden: int) -> int:
    return _siglip(config["vision_config"], text_hidden)


def mistral3_vision(config: dict[str, Any], text_hidden: int) -> int:
    if config.get("multimodal_projector_bias"):
        raise UnsupportedModelError("not modelled: Mistral3 projector biases")
    return _pixtral(config["vision_config"], text_hidden, int(config.get("spatial_merge_size", 2)))


def _resampler_2_5(num_queries: int, embed_dim: int, kv_dim: int) -> int:
    """vllm/model_executor/layers/resampler.py:BaseResampler (Resampler2_5): learned queries,
    kv_proj (no bias) from the tower's width, nn.MultiheadAttention (in_proj 3E x E + bias,
    out_proj E x E + bias), ln_q / ln_kv / ln_post (weight + bias), the E x E post projection."""
    kv_proj = kv_dim * embed_dim if kv_dim != embed_dim else 0
    attention = 4 * embed_dim * embed_dim + 4 * embed_dim
    return num_queries * embed_dim + kv_proj + attention + 6 * embed_dim + embed_dim * embed_dim


def minicpmv_vision(config: dict[str, Any], text_hidden: int) -> int:
    """MiniCPM-V 2.6 (vllm/model_executor/models/minicpmv.py:MiniCPMV2_6): an Idefics2 (SigLIP)
    tower, its last layer dropped with `drop_vision_last_layer`, and Resampler2_5 to the text
    width (query_num queries, embed_dim // 128 heads). The projector-free SigLIP count is the
    Gemma-3 one less its projector."""
    vision = dict(config["vision_config"])
    if config.get("drop_vision_last_layer"):
        vision["num_hidden_layers"] = int(vision["num_hidden_layers"]) - 1
    tower = _siglip(vision, text_hidden) - int(vision["hidden_size"]) * (text_hidden + 1)
    resampler = _resampler_2_5(int(config["query_num"]), text_hidden, int(vision["hidden_size"]))
    return tower + resampler


def minicpmv_buffers(config: dict[str, Any], text_hidden: int) -> int:
    # Resampler2_5._set_2d_pos_cache: a non-persistent sin-cos table for max_size (70, 70)
    # positions x embed_dim, cast to the model dtype with the resampler: memory, not parameters
    return 70 * 70 * text_hidden


def _qwen3_vl_merger(hidden: int, merge: int, out: int, *, post_shuffle: bool) -> int:
    """Qwen3_VisionPatchMerger: LayerNorm (on the merged width when `use_postshuffle_norm`),
    fc1 merged -> merged and fc2 merged -> out, both with biases."""
    merged = hidden * merge * merge
    norm = 2 * (merged if post_shuffle else hidden)
    return norm + merged * merged + merged + merged * out + out


def qwen3_vl_vision(config: dict[str, Any], text_hidden: int) -> int:
    """Qwen3-VL's tower, which Qwen3.5 loads (vllm/model_executor/models/qwen3_vl.py:
    Qwen3_VisionTransformer): Conv3d patch embedding with bias, a learned position table of
    num_position_embeddings, `depth` blocks (2 LayerNorms, qkv and proj with biases, fc1/fc2 with
    biases), the patch merger to out_hidden_size and one deepstack merger per
    deepstack_visual_indexes entry."""
    vision = config["vision_config"]
    hidden = int(vision["hidden_size"])
    inter = int(vision["intermediate_size"])
    patch = int(vision["patch_size"])
    kernel = int(vision.get("in_channels", 3)) * int(vision.get("temporal_patch_size", 2))
    merge = int(vision.get("spatial_merge_size", 2))
    out = int(vision.get("out_hidden_size", text_hidden))
    per_block = 4 * hidden + 4 * hidden * hidden + 4 * hidden + 2 * hidden * inter + inter + hidden
    tower = kernel * patch * patch * hidden + hidden
    tower += int(vision["num_position_embeddings"]) * hidden
    tower += int(vision["depth"]) * per_block
    tower += _qwen3_vl_merger(hidden, merge, out, post_shuffle=False)
    deepstack = len(vision.get("deepstack_visual_indexes") or ())
    return tower + deepstack * _qwen3_vl_merger(hidden, merge, out, post_shuffle=True)


def gemma4_vision(config: dict[str, Any], text_hidden: int) -> int:
    """Gemma 4's tower, built by transformers (vLLM 0.19.0-0.32.0 gemma4_mm.py:
    `Gemma4ForConditionalGeneration.__init__`, `AutoModel.from_config(vision_config)`;
    transformers 5.19.0 modeling_gemma4.py `Gemma4VisionModel`): the patch embedder (a linear
    3 x patch^2 -> hidden without bias, a position table 2 x position_embedding_size x hidden),
    per layer q/k/v/o without biases (num_key_value_heads x head_dim for k and v), q_norm and
    k_norm of head_dim (v_norm has no weight), 4 RMSNorms, a gated MLP (gate, up, down); then
    vLLM's `Gemma4MultimodalEmbedder`, one hidden -> text hidden ReplicatedLinear without bias
    (its RMSNorm has no weight). Clipped linears (`use_clipped_linears`) add 4 scalar buffers
    each, which are not counted."""
    vision = config["vision_config"]
    hidden = int(vision["hidden_size"])
    inter = int(vision["intermediate_size"])
    heads = int(vision["num_attention_heads"])
    head_dim = int(vision.get("head_dim") or hidden // heads)
    kv_heads = int(vision.get("num_key_value_heads") or heads)
    patch = int(vision["patch_size"])
    attention = 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim + 2 * head_dim
    per_layer = attention + 4 * hidden + 3 * hidden * inter
    embedder = 3 * patch * patch * hidden + 2 * int(vision["position_embedding_size"]) * hidden
    tower = int(vision["num_hidden_layers"]) * per_layer + embedder
    return tower + hidden * text_hidden


def gemma4_buffers(config: dict[str, Any], text_hidden: int) -> int:
    # Gemma4VisionModel: std_bias and std_scale (hidden each) when `standardize` is set
    vision = config["vision_config"]
    return 2 * int(vision["hidden_size"]) if vision.get("standardize") else 0


# architecture -> elements of buffers the tower holds besides its parameters
VISION_BUFFERS: dict[str, Callable[[dict[str, Any], int], int]] = {
    "MiniCPMV": minicpmv_buffers,
    "Gemma4ForConditionalGeneration": gemma4_buffers,
}

# architecture -> parameters of its vision tower and projector
VISION_TOWERS: dict[str, Callable[[dict[str, Any], int], int]] = {
    "Gemma3ForConditionalGeneration": gemma3_vision,
    "Gemma4ForConditionalGeneration": gemma4_vision,
    "Mistral3ForConditionalGeneration": mistral3_vision,
    "Llama4ForConditionalGeneration": _llama4,
    "MiniCPMV": minicpmv_vision,
    "Qwen3_5ForConditionalGeneration": qwen3_vl_vision,
    "Qwen3_5MoeForConditionalGeneration": qwen3_vl_vision,
}
