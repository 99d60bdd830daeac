"""Weight quantization schemes, as vLLM stores them in GPU memory.

Read from a checkpoint's `quantization_config` (`parse_quantization`) or named by `--quantization`
(`QUANTIZATION_FLAGS`). Bytes per parameter of a quantized *linear* weight follow the tensors
each vLLM quantization method allocates in `create_weights` (vllm-project/vllm, tag v0.11.0,
`vllm/model_executor/layers/quantization/`):

* AWQ (`awq.py`, AWQLinearMethod): qweight int32 [in, out/8] (bits/8 B per weight), qzeros int32
  packed like the weights, one row per group (bits/8/g), fp16 scales [in/g, out] (2/g).
  4-bit, g=128: 0.5 + 1/256 + 1/64 = 0.5195 B/param.
* GPTQ (`gptq.py`, GPTQLinearMethod) and AutoRound (`auto_round.py`, which hands the layer to the
  GPTQ/AWQ Marlin methods): the same packed int32 weights, zeros and fp16 scales; g_idx adds
  one int32 per *input row* (desc_act), about 4/out B per weight, which is not counted.
* FP8 (`fp8.py`, Fp8LinearMethod): 1 B per weight + fp32 scales: one per tensor, or with
  `weight_block_size` [bn, bk] one `weight_scale_inv` per bn x bk block (4/(bn*bk) B/param).
* compressed-tensors (`compressed_tensors/schemes/`): W8A8 int8 and FP8 (1 B + fp32 scales per
  channel, per tensor or per block), WNA16 (packed int32 + params-dtype group scales, zero points
  only when asymmetric), NVFP4 (`compressed_tensors_w4a4_nvfp4.py`: uint8 [out, in/2] + fp8
  scales [out, in/16] = 0.5 + 1/16 B/param).
* bitsandbytes (`bitsandbytes.py`; loader `model_loader/bitsandbytes_loader.py`): 4-bit nf4/fp4
  packed two per byte + one fp32 absmax per 64-weight block. With double quantization the
  checkpoint stores uint8 absmax, and vLLM 0.10.0+ dequantizes them back to fp32 at load
  (`_dequantize_dq`), so memory is 0.5 + 4/64 B/param either way; through 0.9.2 the uint8 absmax
  stay (0.5 + 1/64 B/param, in-flight quantization included: the planner's
  `memory.weights_bytes` applies the release). 8-bit: int8 + fp32 row scales.
* ModelOpt (`modelopt.py`, v0.24.0): FP8 (ModelOptFp8LinearMethod: 1 B + per-tensor fp32 scales),
  NVFP4 and W4A16_NVFP4 (ModelOptNvFp4[W4A16]LinearMethod, ModelOptNvFp4FusedMoE: uint8
  [out, in/2] + fp8 scales per 16 weights = 0.5 + 1/16 B/param, plus per-tensor fp32 scales);
  MIXED_PRECISION (ModelOptMixedPrecisionConfig) picks one of those per layer from
  `quantized_layers` and leaves layers it does not list unquantized, and it quantizes `lm_head`
  when listed (get_quant_method takes ParallelLMHead). kvwise keeps one scheme each for the
  attention / linear-attention projections, the MLPs (dense or shared experts), the routed
  experts and lm_head, and refuses a checkpoint that mixes schemes within one of them.
* MXFP4 (`mxfp4.py`): only the MoE experts are quantized (uint8 blocks of two e2m1 values + one
  e8m0 uint8 scale per 32 weights = 0.5 + 1/32 B/param); every `LinearBase` layer (attention,
  router) gets `UnquantizedLinearMethod` and stays in the model dtype.

Embeddings stay in the model dtype for every method here, norms and biases too; `lm_head` too,
except where a ModelOpt checkpoint lists it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from kvwise.errors import UnsupportedModelError

PER_CHANNEL = -1  # one scale per output channel
PER_TENSOR = 0  # one scale per weight matrix (negligible bytes)


@dataclass(frozen=True)
class QuantSpec:
    method: str  # vLLM's name for the method (its `--quantization` value)
    bits: int
    group_size: int  # weights sharing one scale; PER_CHANNEL or PER_TENSOR otherwise
    has_zeros: bool = False  # asymmetric: packed zero points next to the scales
    scale_bytes: int = 2
    scheme: str = ""  # the variant, as its publishers name it (nf4, W8A8, FP8 block 128x128, ...)
    is_experts_only: bool = False  # only MoE experts quantized, all linear layers in model dtype
    experts: QuantSpec | None = None  # the routed experts' scheme where it differs (ModelOpt)
    mlp: QuantSpec | None = None  # dense MLPs' / shared experts' scheme where it differs (ModelOpt)
    lm_head: QuantSpec | None = None  # a quantized lm_head's scheme (ModelOpt); None: model dtype

    def bytes_per_param(self) -> float:
        """Average bytes per parameter of a quantized linear weight matrix."""
        weight = self.bits / 8
        if self.group_size <= 0:
            return weight  # per-channel scales are counted per output row by the caller
        per_group = self.scale_bytes + (self.bits / 8 if self.has_zeros else 0.0)
        return weight + per_group / self.group_size

    def per_channel_scale_bytes(self) -> int:
        """Bytes per output channel when scales are per channel (group_size == PER_CHANNEL)."""
        return self.scale_bytes if self.group_size == PER_CHANNEL else 0

    @property
    def label(self) -> str:
        if self.scheme:
            return f"{self.method} {self.scheme}"
        group = f", group {self.group_size}" if self.group_size > 0 else ""
        return f"{self.method} {self.bits}-bit{group}"


AWQ_INT4 = QuantSpec("awq", 4, 128, has_zeros=True)
GPTQ_INT4 = QuantSpec("gptq", 4, 128, has_zeros=True)
FP8_DYNAMIC = QuantSpec("fp8", 8, PER_CHANNEL, scale_bytes=4)
INT8_W8A8 = QuantSpec("int8", 8, PER_CHANNEL, scale_bytes=4)
# vLLM quantizes a 16-bit checkpoint on load with blocksize 64 and compress_statistics=True,
# then dequantizes the nested absmax to fp32 (bitsandbytes_loader.py, v0.11.0)
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


def _int(qc: dict[str, Any], *keys: str, default: int) -> int:
    for key in keys:
        if qc.get(key) is not None:
            return int(qc[key])
    return default


def _packed_int(qc: dict[str, Any], method: str) -> QuantSpec:
    """AWQ, GPTQ, AutoRound: packed int32 weights, fp16 group scales, packed zero points."""
    bits = _int(qc, "bits", "w_bit", default=4)
    group = _int(qc, "group_size", "q_group_size", default=128)
    # vLLM allocates qzeros for GPTQ whatever `sym` says (gptq.py create_weights)
    return QuantSpec(method, bits, PER_CHANNEL if group <= 0 else group, has_zeros=True)


def _awq(qc: dict[str, Any], model_id: str) -> QuantSpec:
    return _packed_int(qc, "awq")


def _gptq(qc: dict[str, Any], model_id: str) -> QuantSpec:
    if qc.get("dynamic"):
        raise UnsupportedModelError(
            f"{model_id}: not modelled: quantization gptq with per-module `dynamic` overrides"
        )
    return _packed_int(qc, "gptq")


def _auto_round(qc: dict[str, Any], model_id: str) -> QuantSpec:
    if qc.get("extra_config"):
        raise UnsupportedModelError(
            f"{model_id}: not modelled: quantization auto-round with per-layer `extra_config`"
        )
    data_type = str(qc.get("data_type", "int"))
    if not data_type.startswith("int"):
        raise UnsupportedModelError(
            f"{model_id}: not modelled: quantization auto-round with data_type {data_type}"
        )
    return _packed_int(qc, "auto-round")


def _fp8(qc: dict[str, Any], model_id: str) -> QuantSpec:
    block = qc.get("weight_block_size")
    if block:
        bn, bk = (int(b) for b in block)
        return QuantSpec("fp8", 8, bn * bk, scale_bytes=4, scheme=f"block {bn}x{bk}")
    return QuantSpec("fp8", 8, PER_TENSOR, scale_bytes=4, scheme="per tensor")


def _bitsandbytes(qc: dict[str, Any], model_id: str) -> QuantSpec:
    if qc.get("load_in_8bit"):
        # int8 weights + one fp32 SCB scale per output row
        return QuantSpec("bitsandbytes", 8, PER_CHANNEL, scale_bytes=4, scheme="int8")
    kind = str(qc.get("bnb_4bit_quant_type", "fp4"))  # bitsandbytes' own default is fp4
    double = " double-quant" if qc.get("bnb_4bit_use_double_quant") else ""
    # one fp32 absmax per 64 weights in memory, double quantized or not (see module docstring)
    return QuantSpec("bitsandbytes", 4, 64, scale_bytes=4, scheme=f"{kind}{double}")


def _mxfp4(qc: dict[str, Any], model_id: str) -> QuantSpec:
    # uint8 e8m0 scale per 32 weights (mxfp4.py Mxfp4MoEMethod.create_weights)
    return QuantSpec(
        "mxfp4",
        4,
        32,
        scale_bytes=1,
        scheme="experts only",
        is_experts_only=True,
    )


def _ct_weights(qc: dict[str, Any], model_id: str) -> dict[str, Any]:
    """The one weight scheme of a compressed-tensors config (mixed schemes are refused)."""
    groups = qc.get("config_groups") or {}
    schemes = [g.get("weights") or {} for g in groups.values()]
    if not schemes:
        raise UnsupportedModelError(f"{model_id}: compressed-tensors config without config_groups")
    if any(scheme != schemes[0] for scheme in schemes[1:]):
        raise UnsupportedModelError(
            f"{model_id}: not modelled: quantization compressed-tensors with mixed weight schemes"
        )
    sparsity = qc.get("sparsity_config") or {}
    if sparsity.get("format") not in (None, "dense"):
        raise UnsupportedModelError(
            f"{model_id}: not modelled: quantization compressed-tensors {sparsity['format']}"
        )
    return schemes[0]


def _has_input_activations(qc: dict[str, Any]) -> bool:
    return any(g.get("input_activations") for g in (qc.get("config_groups") or {}).values())


def _activation_bits(qc: dict[str, Any]) -> int:
    """Bits of the quantized activations (W4A8), 16 when activations stay in the model dtype."""
    for group in (qc.get("config_groups") or {}).values():
        if group.get("input_activations"):
            return int(group["input_activations"].get("num_bits", 16))
    return 16


def _ct_granularity(weights: dict[str, Any]) -> tuple[int, str]:
    """(group_size, name) of a compressed-tensors weight scale strategy."""
    strategy = str(weights.get("strategy", "tensor"))
    if strategy in ("group", "tensor_group"):
        return int(weights["group_size"]), f"group {weights['group_size']}"
    if strategy == "block":
        bn, bk = (int(b) for b in weights["block_structure"])
        return bn * bk, f"block {bn}x{bk}"
    return (PER_CHANNEL, "per channel") if strategy == "channel" else (PER_TENSOR, "per tensor")


def _compressed_tensors(qc: dict[str, Any], model_id: str) -> QuantSpec | None:
    weights = _ct_weights(qc, model_id)
    if not weights:
        return None  # only the KV cache or activations are quantized: weights in the model dtype
    bits = int(weights.get("num_bits", 8))
    kind = str(weights.get("type", "int"))
    group, granularity = _ct_granularity(weights)
    method = "compressed-tensors"
    if kind == "float" and bits == 4:
        # NVFP4: fp8 (1 B) scale per 16 weights; MXFP4: e8m0 (1 B) per 32
        name = "NVFP4" if group == 16 else f"FP4 {granularity}"
        return QuantSpec(method, 4, group, scale_bytes=1, scheme=name)
    if kind == "float" and bits == 8:
        # FP8 (compressed_tensors_w8a8_fp8.py, _w8a16_fp8.py): 1 B + fp32 scales. Named "fp8"
        # like vLLM's own FP8 method: the GEMMs run on FP8 tensor cores the same way.
        return QuantSpec("fp8", 8, group, scale_bytes=4, scheme=granularity)
    if kind == "int" and bits == 8 and group <= 0 and _has_input_activations(qc):
        # INT8 W8A8 (compressed_tensors_w8a8_int8.py): int8 weights + fp32 channel/tensor scales
        name = f"W8A8 {granularity}"
        return QuantSpec("int8", 8, group, scale_bytes=4, scheme=name)
    if kind == "int" and bits in (4, 8):
        # WNA16 (compressed_tensors_wNa16.py): packed int32, params-dtype scales, zero points
        # only when asymmetric
        return QuantSpec(
            method,
            bits,
            group,
            has_zeros=not weights.get("symmetric", True),
            scheme=f"W{bits}A{_activation_bits(qc)} {granularity}",
        )
    raise UnsupportedModelError(
        f"{model_id}: not modelled: quantization compressed-tensors {kind}{bits}"
    )


MODELOPT_SCHEMES = {
    "FP8": QuantSpec("modelopt", 8, PER_TENSOR, scale_bytes=4, scheme="FP8 per tensor"),
    "NVFP4": QuantSpec("modelopt", 4, 16, scale_bytes=1, scheme="NVFP4"),
    "W4A16_NVFP4": QuantSpec("modelopt", 4, 16, scale_bytes=1, scheme="W4A16_NVFP4"),
}


def _modelopt_scheme(algos: set[str], part: str, model_id: str) -> QuantSpec | None:
    if not algos:
        return None
    if len(algos) > 1 or next(iter(algos)) not in MODELOPT_SCHEMES:
        raise UnsupportedModelError(
            f"{model_id}: not modelled: quantization modelopt {'/'.join(sorted(algos))} on {part}"
        )
    return MODELOPT_SCHEMES[next(iter(algos))]


def _modelopt(qc: dict[str, Any], model_id: str) -> QuantSpec | None:
    algo = str(qc.get("quant_algo", "")).upper()
    if algo != "MIXED_PRECISION":
        scheme = _modelopt_scheme({algo}, "every linear layer", model_id)
        return scheme
    parts: dict[str, set[str]] = {"experts": set(), "lm_head": set(), "linear": set(), "mlp": set()}
    for name, layer in (qc.get("quantized_layers") or {}).items():
        part = "mlp" if ".mlp." in f"{name}." or ".shared_expert." in name else "linear"
        part = "lm_head" if name.split(".")[-1] == "lm_head" else part
        part = "experts" if name.endswith(".experts") else part
        parts[part].add(str(layer.get("quant_algo", "")).upper())
    linear = _modelopt_scheme(parts["linear"], "the attention layers", model_id)
    mlp = _modelopt_scheme(parts["mlp"], "the MLPs", model_id)
    experts = _modelopt_scheme(parts["experts"], "the experts", model_id)
    lm_head = _modelopt_scheme(parts["lm_head"], "lm_head", model_id)
    base = linear or mlp or experts
    if base is None:
        return None
    named = (("attention", linear), ("MLPs", mlp), ("experts", experts), ("lm_head", lm_head))
    names = ", ".join(f"{spec.scheme} {part}" for part, spec in named if spec)
    return replace(
        base,
        scheme=f"MIXED_PRECISION ({names})",
        mlp=mlp if mlp != base else None,
        experts=experts if experts != base else None,
        lm_head=lm_head,
        is_experts_only=linear is None and mlp is None,
    )


# quantization_config["quant_method"] -> how to read it (vLLM's names)
PARSERS: dict[str, Callable[[dict[str, Any], str], QuantSpec | None]] = {
    "awq": _awq,
    "gptq": _gptq,
    "auto-round": _auto_round,
    "intel/auto-round": _auto_round,
    "fp8": _fp8,
    "bitsandbytes": _bitsandbytes,
    "compressed-tensors": _compressed_tensors,
    "mxfp4": _mxfp4,
    "modelopt": _modelopt,
}


def parse_quantization(qc: dict[str, Any] | None, model_id: str) -> QuantSpec | None:
    """Read a checkpoint's `quantization_config`; None for an unquantized checkpoint."""
    if not qc:
        return None
    method = str(qc.get("quant_method", "")).lower()
    parser = PARSERS.get(method)
    if parser is None:
        known = ", ".join(sorted(PARSERS))
        raise UnsupportedModelError(
            f"{model_id}: not modelled: quantization {method or '(no quant_method)'} "
            f"(modelled: {known})"
        )
    return parser(qc, model_id)
