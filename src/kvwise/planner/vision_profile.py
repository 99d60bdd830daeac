"""The vision encoder's part of vLLM V1's profile run, for models whose encoder is modelled
(Qwen2.5-VL: `VisionSpec.encoder`).

Before the language model's dummy batch, V1's `profile_run` pushes a dummy multimodal batch
through the encoder and keeps its outputs in the encoder cache while the language model runs
(v0.8.5-v0.10.0 `v1/worker/gpu_model_runner.py:GPUModelRunner.profile_run`; 0.10.1+
`v1/worker/utils.py:MultiModalBudget`, later `multimodal/encoder_budget.py:MultiModalBudget`;
Model Runner V2 `v1/worker/gpu/mm/encoder_runner.py:EncoderRunner.profile_encoder_cache`).

What it runs:

- the modality with the most tokens per item, among those `--limit-mm-per-prompt` leaves above
  0 (default 999 per modality in V1: `config.py`/`config/multimodal.py:get_limit_per_prompt`);
  an image of the processor's largest size has max_pixels / (patch x merge)^2 tokens (16,384
  for Qwen2.5-VL); a video's tokens grow with max_model_len (`qwen2_vl.py:
  get_num_frames_with_most_features`: frames that fit in max_model_len, less one image's tokens
  before 0.11, at most 16 (0.8-0.10) or 14 frames; two frames per temporal patch);
- encoder budget = min(max_num_encoder_input_tokens, encoder_cache_size), both
  max(max_num_batched_tokens, tokens per item) (`encoder_cache_manager.py:
  compute_encoder_budget`, `compute_mm_encoder_budget`; `SchedulerConfig.__post_init__`);
- items: 0.8-0.10.0 min(ceil(budget / tokens), max_num_seqs x limit); 0.10.1+ max(1,
  min(budget // tokens, max_num_seqs x max(1, min(limit, max_model_len // tokens))));
- every limit 0: no encoder pass (and from 0.10.1 no tower at all: `Qwen2_5_VLForConditional
  Generation.__init__` sets `self.visual = None`, 0.19+ `_mark_tower_model`).

Its memory (tensors alive at the peak, read from `qwen2_5_vl.py`; not fitted):

- pixel values [patches, in_chans x temporal x patch^2], float32 as the HF processor returns
  them (0.9.x batches them in the model dtype: `MultiModalKwargs.as_kwargs(dtype=...)`), alive for
  the whole pass;
- inside a block, the larger of the MLP (3 x hidden: the block input, which 0.10+'s fused
  residual RMSNorm overwrites with the normed input, the attention output that becomes the
  residual, down_proj's output; 3 x intermediate / TP: gate_up and its activation, or 0.9's gate,
  up and their product) and the attention (3 x hidden: block input, normed input, proj output;
  8 x hidden / TP: qkv, the contiguous q/k, the rotated q/k, the context), per patch, in the
  model dtype;
- the encoder cache: items x tokens x out_hidden_size in the model dtype, alive while the
  language model's dummy batch runs, so it adds to that pass's peak.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from kvwise.core.gpus import GIB
from kvwise.core.model_spec import VisionEncoderShape
from kvwise.core.models import DTYPE_BYTES, ModelSpec
from kvwise.errors import InvalidFlagError, UnsupportedModelError
from kvwise.planner.defaults import VersionRules, parse_version
from kvwise.planner.result import Plan, ResolvedFlags

MODALITIES = ("image", "video")
V1_DEFAULT_LIMIT = 999  # config.py MultiModalConfig.get_limit_per_prompt (V1)


@dataclass(frozen=True)
class EncoderProfile:
    modality: str  # "" when no encoder pass runs
    items: int
    tokens_per_item: int
    encoder_budget_tokens: int  # "Encoder cache will be initialized with a budget of N tokens"
    peak_bytes: int  # the tower's transient peak (per rank)
    cache_bytes: int  # encoder outputs held while the language model's dummy batch runs


def parse_limits(text: str | None) -> dict[str, int]:
    """--limit-mm-per-prompt as vLLM takes it: JSON ('{"image": 1}') or 'image=1,video=0'."""
    if not text:
        return {}
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        data = dict(part.split("=", 1) for part in text.split(",") if "=" in part)
    if not isinstance(data, dict):
        raise InvalidFlagError(f"--limit-mm-per-prompt {text!r}: expected a mapping")
    limits = {}
    for key, value in data.items():
        count = value.get("count") if isinstance(value, dict) else value  # 0.11+ {"count": n}
        try:
            limits[str(key)] = int(str(count))
        except (TypeError, ValueError) as exc:
            raise InvalidFlagError(f"--limit-mm-per-prompt {key}: {value!r} is no count") from exc
    return limits


def _limits(resolved: ResolvedFlags) -> dict[str, int]:
    given = parse_limits(resolved.limit_mm_per_prompt)
    return {m: given.get(m, V1_DEFAULT_LIMIT) for m in MODALITIES}


def tower_loaded(model: ModelSpec, resolved: ResolvedFlags, rules: VersionRules) -> bool:
    """Whether vLLM builds the tower: from 0.10.1 not when every modality's limit is 0."""
    if model.vision is None or model.vision.encoder is None:
        return model.vision is not None
    if parse_version(rules.version) < (0, 10, 1):
        return True
    return any(_limits(resolved).values())


def _image_tokens(enc: VisionEncoderShape) -> int:
    unit = enc.patch_size * enc.spatial_merge_size
    return enc.max_pixels // (unit * unit)


def _video_tokens(enc: VisionEncoderShape, budget_tokens: int, cap: int, per_step: int) -> int:
    """Tokens of the dummy video: the most frames (<= cap) whose tokens fit the budget, >= 1."""

    def tokens(frames: int) -> int:
        steps = max(math.ceil(frames / enc.temporal_patch_size), 1)
        return steps * per_step

    frames = 0
    while frames < cap and tokens(frames + 1) <= budget_tokens:
        frames += 1
    return tokens(max(frames, 1))


def _max_tokens(
    enc: VisionEncoderShape, limits: dict[str, int], resolved: ResolvedFlags, version: tuple
) -> dict[str, int]:
    image = _image_tokens(enc)
    out = {}
    if limits["image"] > 0:
        out["image"] = image
    if limits["video"] > 0:
        if version < (0, 11, 0):  # seq_len less one image's tokens; 16 frames at most
            room = resolved.max_model_len - (image if limits["image"] > 0 else 0)
            out["video"] = _video_tokens(enc, room, 16, image)
        else:
            out["video"] = _video_tokens(enc, resolved.max_model_len, 14, image)
    return out


def encoder_profile(
    model: ModelSpec, resolved: ResolvedFlags, rules: VersionRules
) -> EncoderProfile:
    vision = model.vision
    assert vision is not None and vision.encoder is not None
    enc = vision.encoder
    version = parse_version(rules.version)
    limits = _limits(resolved)
    max_tokens = _max_tokens(enc, limits, resolved, version)
    if not max_tokens:
        return EncoderProfile("", 0, 0, 0, 0, 0)
    best = max(max_tokens.values())
    tied = [m for m in MODALITIES if max_tokens.get(m) == best]
    # 0.8-0.16: max() keeps the first of equal counts (image); 0.17+: key (tokens, name): video
    modality = tied[-1] if version >= (0, 17, 0) else tied[0]
    if modality == "video" and best > _image_tokens(enc):
        raise UnsupportedModelError(
            f"{model.model_id} on vLLM {rules.version}: not modelled: the encoder profile's "
            f"dummy video ({best:,} tokens at max_model_len {resolved.max_model_len:,}: "
            "several frames, resized by the HF video processor); set "
            "--limit-mm-per-prompt '{\"video\": 0}' or a max_model_len below "
            f"{2 * _image_tokens(enc) + (0 if version >= (0, 11, 0) else _image_tokens(enc)):,}"
        )
    mnbt = resolved.max_num_batched_tokens
    budget = max(mnbt, best)
    limit = limits[modality]
    if version < (0, 10, 1):
        items = min(math.ceil(budget / best), resolved.max_num_seqs * limit)
    else:
        per_prompt = max(1, min(limit, resolved.max_model_len // best))
        reqs = resolved.max_num_seqs
        if not resolved.enable_chunked_prefill:
            reqs = min(reqs, mnbt // best)
        items = max(1, min(budget // best, reqs * per_prompt))
    tp = resolved.tensor_parallel_size
    dtype_bytes = DTYPE_BYTES[resolved.dtype]
    h, inter = enc.hidden_size, enc.intermediate_size
    patches = items * best * enc.spatial_merge_size**2
    pixel_row = enc.in_channels * enc.temporal_patch_size * enc.patch_size**2
    pixel_bytes = dtype_bytes if version[:2] == (0, 9) else 4
    mlp = 3 * h + 3 * inter / tp
    attention = 3 * h + 8 * h / tp
    peak = patches * (pixel_row * pixel_bytes + max(mlp, attention) * dtype_bytes)
    cache = items * best * enc.out_hidden_size * dtype_bytes
    return EncoderProfile(modality, items, best, budget, int(peak), int(cache))


def encoder_lines(plan: Plan, rules: VersionRules) -> list[str]:
    """What the plan's figures hold for the vision tower, in the words of vLLM's log."""
    vision = plan.model.vision
    if vision is None or vision.encoder is None or plan.engine != "V1":
        return []
    tp = plan.flags.tensor_parallel_size
    params = vision.num_params - vision.tp_sharded_params + vision.tp_sharded_params / tp
    weights = params * DTYPE_BYTES[plan.flags.dtype] / GIB
    enc = encoder_profile(plan.model, plan.flags, rules)
    if not enc.items:
        return [
            f"vision tower {weights:.2f} GiB of the weights; no encoder profile (no media allowed)"
        ]
    return [
        f"vision tower {weights:.2f} GiB of the weights; encoder profile: a budget of "
        f"{enc.encoder_budget_tokens:,} tokens, {enc.items} {enc.modality} item(s) of "
        f"{enc.tokens_per_item:,} tokens, {enc.peak_bytes / GIB:.2f} GiB transient in the tower "
        f"and {enc.cache_bytes / GIB:.2f} GiB of encoder cache beside the text pass "
        "(--limit-mm-per-prompt sets which media are profiled)"
    ]
