"""Weight quantization schemes, as vLLM stores them in GPU memory.

Bytes per parameter of a quantized *linear* layer (embeddings and `lm_head` stay in the model
dtype, norms and biases too; vLLM quantizes only `LinearBase` layers):

* AWQ / GPTQ, `bits`-bit, group size g: packed int32 weights (bits/8 B per param) + int32 zeros
  packed like the weights, one per group (bits/8/g) + fp16 scales, one per group (2/g).
  4-bit, g=128: 0.5 + 1/256 + 1/64 = 0.5195 B/param.
* FP8 (checkpoint `fp8` or compressed-tensors `float-quantized` 8-bit): 1 B/param + one fp32
  scale per output channel (dynamic) or per tensor.
* INT8 W8A8 / W8A16 (compressed-tensors `int-quantized` 8-bit): 1 B/param + per-channel scales.
* bitsandbytes 4-bit (NF4): 0.5 B/param + one fp32 absmax per 64-param block (4/64 B).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvwise.errors import UnsupportedModelError


@dataclass(frozen=True)
class QuantSpec:
    method: str  # awq, gptq, fp8, int8, bitsandbytes
    bits: int
    group_size: int  # -1: one scale per output channel
    has_zeros: bool = False  # asymmetric: packed zero points next to the scales
    scale_bytes: int = 2

    def bytes_per_param(self) -> float:
        """Average bytes per parameter of a quantized linear weight matrix."""
        weight = self.bits / 8
        if self.group_size <= 0:
            return weight  # per-channel scales are counted per output row by the caller
        per_group = self.scale_bytes + (self.bits / 8 if self.has_zeros else 0.0)
        return weight + per_group / self.group_size

    def per_channel_scale_bytes(self) -> int:
        """Bytes per output channel when scales are per channel (group_size <= 0)."""
        return self.scale_bytes if self.group_size <= 0 else 0

    @property
    def label(self) -> str:
        group = f", group {self.group_size}" if self.group_size > 0 else ""
        return f"{self.method} {self.bits}-bit{group}"


AWQ_INT4 = QuantSpec("awq", 4, 128, has_zeros=True)
GPTQ_INT4 = QuantSpec("gptq", 4, 128, has_zeros=True)
GPTQ_INT8 = QuantSpec("gptq", 8, 128, has_zeros=True)
FP8_DYNAMIC = QuantSpec("fp8", 8, -1, scale_bytes=4)
INT8_W8A8 = QuantSpec("int8", 8, -1, scale_bytes=4)
BNB_NF4 = QuantSpec("bitsandbytes", 4, 64, scale_bytes=4)

# `--quantization` values kvwise accepts for an unquantized checkpoint quantized on load, or to
# name a checkpoint's scheme when its config.json is not at hand.
QUANTIZATION_FLAGS: dict[str, QuantSpec] = {
    "awq": AWQ_INT4,
    "awq_marlin": AWQ_INT4,
    "gptq": GPTQ_INT4,
    "gptq_marlin": GPTQ_INT4,
    "fp8": FP8_DYNAMIC,
    "bitsandbytes": BNB_NF4,
    "compressed-tensors": INT8_W8A8,
}


def _compressed_tensors(qc: dict[str, Any], model_id: str) -> QuantSpec:
    groups = qc.get("config_groups") or {}
    if not groups:
        raise UnsupportedModelError(f"{model_id}: compressed-tensors config without config_groups")
    weights = next(iter(groups.values())).get("weights") or {}
    bits = int(weights.get("num_bits", 8))
    kind = weights.get("type", "int")
    group = weights.get("group_size") or -1
    if kind == "float" and bits == 8:
        return FP8_DYNAMIC
    if bits == 8:
        return INT8_W8A8
    if bits == 4:
        # WNA16: packed int4 with bf16/fp16 group scales, zero points only when asymmetric
        return QuantSpec(
            "compressed-tensors", 4, int(group), has_zeros=not weights.get("symmetric", True)
        )
    raise UnsupportedModelError(f"{model_id}: compressed-tensors {kind}{bits} is not modelled")


def parse_quantization(qc: dict[str, Any] | None, model_id: str) -> QuantSpec | None:
    """Read a checkpoint's `quantization_config`; None for an unquantized checkpoint."""
    if not qc:
        return None
    method = str(qc.get("quant_method", "")).lower()
    if method in ("awq", "gptq"):
        bits = int(qc.get("bits", qc.get("w_bit", 4)))
        group = int(qc.get("group_size", qc.get("q_group_size", 128)))
        return QuantSpec(method, bits, group, has_zeros=True)
    if method == "fp8":
        return FP8_DYNAMIC
    if method == "bitsandbytes":
        if qc.get("load_in_8bit"):
            return QuantSpec("bitsandbytes", 8, -1, scale_bytes=4)
        return BNB_NF4
    if method == "compressed-tensors":
        return _compressed_tensors(qc, model_id)
    raise UnsupportedModelError(f"{model_id}: quantization method {method!r} is not modelled")
