"""A checkpoint's weight bytes from safetensors metadata, without reading a single weight.

A `.safetensors` file opens with 8 bytes (little-endian u64: the header length) and a JSON header
naming every tensor's dtype, shape and byte range (https://huggingface.co/docs/safetensors, "Format").
A sharded checkpoint also ships `model.safetensors.index.json`, whose `metadata.total_size` is
the sum of its tensors' bytes and whose `weight_map` names every tensor.

What vLLM holds can differ from the bytes on disk; each case is decided from its loading code
(vllm-project/vllm, v0.11.0):

* tied embeddings: held once (lm_head shares the embedding's storage); a checkpoint that saved
  `lm_head.weight` anyway has it skipped, like the rotary `inv_freq` buffers of old checkpoints;
* an unquantized checkpoint stored in another float dtype than its config's (fp32 files): the
  default loader copies every tensor into a parameter of the model dtype, so each counts at
  that dtype's size;
* bitsandbytes double quantization: uint8 `absmax` on disk, dequantized to fp32 at load
  (`model_loader/bitsandbytes_loader.py`, `dequantize_dq`), the nested state then dropped;
  `quant_state.bitsandbytes__*` blobs stay on the CPU;
* tensors of layers vLLM does not build (MTP heads stored as `model.layers.{N}` past
  `num_hidden_layers`, a vision tower when the model is loaded text-only) are not loaded;
* MXFP4 experts are padded to the MoE kernel's alignment (`quantization/mxfp4.py`,
  Mxfp4MoEMethod.create_weights: Marlin rounds hidden to 256 and intermediate to 128, FlashInfer
  on SM100 both to 256, ...), so memory depends on the backend: gpt-oss-20b logs 13.64-13.72 GiB
  against its 12.8 GiB checkpoint. No checkpoint size is used for MXFP4;
* GPTQ Marlin drops the zero points of a symmetric checkpoint when it repacks (`gptq_marlin.py`,
  process_weights_after_loading): 0.75 % of a 4-bit group-128 layer, not subtracted.

An index alone (no headers) cannot give those corrections: then its total is used only for a
quantized checkpoint none of whose tensors needs one, and None tells the planner to fall back on
its parameter count (exact for unquantized checkpoints).
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvwise.core.models import ModelSpec
from kvwise.errors import DataError

HEADER_LENGTH_BYTES = 8  # u64, little-endian
MAX_HEADER_BYTES = 100_000_000  # the format's own limit (safetensors' MAX_HEADER_SIZE)
INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"

_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")
_VISION = ("vision_tower", "visual.", "vision_model", "multi_modal_projector", "vpm.")
_MTP = ("mtp.", ".mtp")
_BNB_STATE = "quant_state.bitsandbytes__"
_BNB_NESTED = ("nested_absmax", "nested_quant_map")
_FLOAT_DTYPES = ("F64", "F32", "F16", "BF16")


@dataclass(frozen=True)
class TensorInfo:
    dtype: str  # safetensors' names: BF16, F16, F32, F8_E4M3, I32, U8, ...
    num_elements: int
    num_bytes: int


def header_length(first_bytes: bytes) -> int:
    """The JSON header's length, from a file's first 8 bytes."""
    if len(first_bytes) < HEADER_LENGTH_BYTES:
        raise DataError("safetensors file shorter than its 8-byte header length")
    (length,) = struct.unpack("<Q", first_bytes[:HEADER_LENGTH_BYTES])
    if length > MAX_HEADER_BYTES:
        raise DataError(f"safetensors header of {length} bytes: not a safetensors file")
    return int(length)


def parse_header(raw: bytes) -> dict[str, TensorInfo]:
    """Tensors named in a safetensors JSON header (the `__metadata__` entry is skipped)."""
    try:
        header = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataError(f"unreadable safetensors header ({exc})") from exc
    tensors: dict[str, TensorInfo] = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        start, end = entry["data_offsets"]
        num_elements = 1
        for dim in entry["shape"]:
            num_elements *= int(dim)
        tensors[name] = TensorInfo(str(entry["dtype"]), num_elements, int(end) - int(start))
    return tensors


def read_file_header(path: Path) -> dict[str, TensorInfo]:
    with path.open("rb") as f:
        length = header_length(f.read(HEADER_LENGTH_BYTES))
        return parse_header(f.read(length))


def _not_loaded(name: str, spec: ModelSpec) -> bool:
    """Tensors vLLM's `load_weights` skips for this spec: extra layers (MTP), an unmodelled
    vision tower, a saved copy of a tied lm_head, rotary inv_freq buffers (old checkpoints)."""
    layer = _LAYER.search(name)
    if layer and int(layer.group(1)) >= spec.num_layers and "vision" not in name:
        return True
    if any(m in name for m in _MTP) or "rotary_emb.inv_freq" in name:
        return True
    if spec.tie_word_embeddings and name.endswith("lm_head.weight"):
        return True
    return spec.vision is None and any(v in name for v in _VISION)


def _held_bytes(name: str, info: TensorInfo, spec: ModelSpec) -> int:
    """Bytes vLLM holds on the GPU for one checkpoint tensor."""
    if _BNB_STATE in name or name.endswith(_BNB_NESTED):
        return 0  # CPU-side quant-state blob; the nested state is dropped after dequantization
    if name.endswith(".absmax") and info.dtype == "U8":
        return info.num_elements * 4  # double-quantized absmax, held as fp32
    if spec.quant is None and info.dtype in _FLOAT_DTYPES:
        return info.num_elements * spec.dtype_bytes  # copied into a parameter of the model dtype
    return info.num_bytes


def held_bytes(tensors: Mapping[str, TensorInfo], spec: ModelSpec) -> int:
    """Bytes of a checkpoint's tensors as vLLM holds them (whole model, all ranks together)."""
    return sum(
        _held_bytes(name, info, spec)
        for name, info in tensors.items()
        if not _not_loaded(name, spec)
    )


def index_bytes(index: dict[str, Any], spec: ModelSpec) -> int | None:
    """`metadata.total_size` of an index, when it is what vLLM will hold; None otherwise."""
    total = (index.get("metadata") or {}).get("total_size")
    names: Iterable[str] = (index.get("weight_map") or {}).keys()
    if total is None or spec.quant is None:
        return None  # unquantized: the index cannot say which float dtype the files hold
    if any(_not_loaded(n, spec) or n.endswith(".absmax") for n in names):
        return None  # needs per-tensor corrections that the index cannot give
    return int(total) or None


def is_held_as_stored(spec: ModelSpec) -> bool:
    """Whether vLLM's memory follows the checkpoint's bytes for this model (see the docstring)."""
    return spec.quant is None or not spec.quant.is_experts_only


def _read_index(folder: Path) -> dict[str, Any] | None:
    try:
        index = json.loads((folder / INDEX_FILE).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return index if isinstance(index, dict) else None


def local_checkpoint_bytes(folder: Path, spec: ModelSpec) -> int | None:
    """Weight bytes of a local checkpoint folder: its files' headers, else its index's total."""
    if not is_held_as_stored(spec):
        return None
    index = _read_index(folder) if (folder / INDEX_FILE).is_file() else None
    if index is not None:
        files = sorted(set((index.get("weight_map") or {}).values()))
    else:
        files = [SINGLE_FILE] if (folder / SINGLE_FILE).is_file() else []
    paths = [folder / f for f in files]
    if paths and all(p.is_file() for p in paths):
        tensors: dict[str, TensorInfo] = {}
        try:
            for path in paths:
                tensors |= read_file_header(path)
        except (OSError, DataError, KeyError, TypeError, ValueError):
            return None  # a damaged header is no size: plan from the parameter count
        return held_bytes(tensors, spec) or None
    return index_bytes(index, spec) if index is not None else None
