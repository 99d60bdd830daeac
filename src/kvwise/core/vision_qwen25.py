"""Qwen2.5-VL's vision tower (Qwen2_5_VLForConditionalGeneration): parameters and encoder shape.

vLLM (vllm/model_executor/models/qwen2_5_vl.py, read at v0.9.0.1 and v0.27.1:
Qwen2_5_VisionTransformer) builds:

- patch_embed: Conv3d in_chans x temporal_patch_size x patch x patch -> hidden, no bias;
- `depth` Qwen2_5_VisionBlock: norm1, norm2 RMSNorm (weight only); attn.qkv hidden -> 3 hidden
  with bias (QKVParallelLinear; 0.9: ColumnParallelLinear), attn.proj hidden -> hidden with bias
  (RowParallelLinear); a gated SiLU MLP with biases: gate and up hidden -> intermediate (0.9:
  two ColumnParallelLinear, later one MergedColumnParallelLinear), down intermediate -> hidden;
- merger (Qwen2_5_VisionPatchMerger): ln_q RMSNorm(hidden), mlp.0 4 hidden -> 4 hidden with
  bias, mlp.2 4 hidden -> out_hidden_size with bias (merge 2 x 2 patches into one token);
- rotary inv_freq: a non-persistent buffer of head_dim / 4 floats (negligible, not counted).

Every linear is tensor-parallel (ColumnParallel/RowParallel; 0.10.2+ `--mm-encoder-tp-mode data`
replicates them instead, not modelled); row-parallel biases, the norms and the patch embedding
are whole on every rank.

The processor's largest image: Qwen2.5-VL checkpoints ship preprocessor_config.json with
"max_pixels": 12845056 (= 16384 x 28 x 28; e.g. huggingface.co/Qwen/Qwen2.5-VL-7B-Instruct/
blob/main/preprocessor_config.json), which vLLM's Qwen2VLProcessingInfo reads through the HF
image processor (`get_image_size_with_most_features`): 16,384 tokens of 4 patches each. vLLM
0.9.0.1 logs it: "Encoder cache will be initialized with a budget of 16384 tokens".
"""

from __future__ import annotations

from typing import Any

from kvwise.core.model_spec import VisionEncoderShape

# preprocessor_config.json of the Qwen/Qwen2.5-VL-{3B,7B,32B,72B}-Instruct repos
QWEN2_5_VL_MAX_PIXELS = 12845056


def qwen2_5_vl_encoder(config: dict[str, Any]) -> VisionEncoderShape:
    vision = config["vision_config"]
    hidden = int(vision["hidden_size"])
    return VisionEncoderShape(
        hidden_size=hidden,
        intermediate_size=int(vision["intermediate_size"]),
        out_hidden_size=int(vision.get("out_hidden_size", config.get("hidden_size", hidden))),
        patch_size=int(vision.get("patch_size", 14)),
        spatial_merge_size=int(vision.get("spatial_merge_size", 2)),
        temporal_patch_size=int(vision.get("temporal_patch_size", 2)),
        in_channels=int(vision.get("in_chans", vision.get("in_channels", 3))),
        max_pixels=QWEN2_5_VL_MAX_PIXELS,
    )


def _linear_parts(shape: VisionEncoderShape, depth: int) -> tuple[int, int]:
    """(tensor-parallel parameters, parameters whole on every rank) of the tower."""
    h, inter = shape.hidden_size, shape.intermediate_size
    merged = h * shape.spatial_merge_size**2
    # per block: qkv weight + bias and proj weight (column/row parallel); gate, up (+ biases)
    # and down weight
    sharded_block = 3 * h * h + 3 * h + h * h + 2 * (h * inter + inter) + inter * h
    whole_block = 2 * h + h + h  # norm1, norm2, proj bias, down bias
    sharded = depth * sharded_block + merged * merged + merged + merged * shape.out_hidden_size
    kernel = shape.in_channels * shape.temporal_patch_size * shape.patch_size**2
    whole = depth * whole_block + kernel * h + h + shape.out_hidden_size  # + ln_q, mlp.2 bias
    return sharded, whole


def qwen2_5_vl_vision(config: dict[str, Any], text_hidden: int) -> int:
    del text_hidden  # the merger projects to vision_config.out_hidden_size
    sharded, whole = _linear_parts(
        qwen2_5_vl_encoder(config), int(config["vision_config"]["depth"])
    )
    return sharded + whole


def qwen2_5_vl_sharded(config: dict[str, Any], text_hidden: int) -> int:
    del text_hidden
    sharded, _ = _linear_parts(qwen2_5_vl_encoder(config), int(config["vision_config"]["depth"]))
    return sharded
