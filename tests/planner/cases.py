"""Turn the real start-up records in tests/data/validation/ into planner inputs.

A record is usable when its model, GPU and the flags that matter are stated (or are vLLM's
defaults for a stated version). Records name models the way users do ("QwQ-32B-unsloth-bnb-4bit
(local path)"); MODEL_NAMES maps those spellings to what a user would pass to kvwise (catalog id
plus --quantization), never to an answer. Records whose version is unknown use a release of the
engine generation their log format shows (ENGINE_VERSIONS).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from kvwise.core.catalog import load_model
from kvwise.core.flags import VllmFlags
from kvwise.core.gpus import GIB, GpuSpec, custom_gpu, find_gpu
from kvwise.core.models import ModelSpec
from kvwise.errors import KvwiseError, UnsupportedModelError
from kvwise.planner import plan
from tests.planner.accuracy import record_flags

DATA = Path(__file__).resolve().parents[1] / "data" / "validation"

# how users spelled a checkpoint in the record -> (catalog id, --quantization they ran with)
# (QwQ-32B-unsloth-bnb-4bit is not mapped: that copy's config.json accepts max_model_len 60000,
# the published QwQ-32B config in the catalog stops at 40960, so it is a different checkpoint.)
MODEL_NAMES: dict[str, tuple[str, str | None]] = {
    "Qwen2.5-32B-Instruct-INT8-W8A16": ("RedHatAI/Qwen2.5-32B-Instruct-quantized.w8a16", None),
    "RedHatAI/Qwen2.5-7B-Instruct-quantized.w8a8": (
        "RedHatAI/Qwen2.5-7B-Instruct-quantized.w8a8",
        None,
    ),
}
ENGINE_VERSIONS = {"V0": "0.6.4", "V1": "0.19.0"}


@dataclass(frozen=True)
class Case:
    record: dict[str, Any]
    model: ModelSpec
    gpu: GpuSpec
    flags: VllmFlags
    vllm_version: str

    @property
    def id(self) -> str:
        return str(self.record["id"])


def load_records(name: str = "vllm_startup_logs.jsonl") -> list[dict[str, Any]]:
    return [json.loads(line) for line in (DATA / name).read_text().splitlines() if line.strip()]


def _model(record: dict[str, Any]) -> tuple[ModelSpec, str | None]:
    name = record["model"] or ""
    if name in MODEL_NAMES:
        model_id, quant = MODEL_NAMES[name]
        return load_model(model_id), quant
    return load_model(name), None


def _gpu(record: dict[str, Any]) -> GpuSpec:
    gpu = find_gpu(record["gpu"] or "")
    if record.get("gpu_total_gib"):
        gpu = custom_gpu(record["gpu_total_gib"], like=gpu)
    return gpu


def _version(record: dict[str, Any]) -> str:
    version = record.get("vllm_version")
    if version and version[0].isdigit():
        return str(version.split(" ")[0])
    return ENGINE_VERSIONS[record.get("engine") or "V1"]


def _flags(record: dict[str, Any], quant: str | None) -> VllmFlags:
    # the flags as stated, with the --quantization the user ran with (MODEL_NAMES)
    return replace(record_flags(record), quantization=quant)


def to_case(record: dict[str, Any]) -> Case | str:
    """A Case, or the reason the record cannot be planned."""
    try:
        model, quant = _model(record)
    except KvwiseError as exc:
        return f"model: {exc}"
    try:
        gpu = _gpu(record)
    except KvwiseError as exc:
        return f"gpu: {exc}"
    case = Case(record, model, gpu, _flags(record, quant), _version(record))
    try:  # a set-up the planner refuses (Qwen2.5-VL's multi-frame dummy video: "not modelled")
        plan(model, gpu, case.flags, vllm_version=case.vllm_version)
    except UnsupportedModelError as exc:
        return f"plan: {exc}"
    return case


def free_gib_from_error(record: dict[str, Any]) -> float | None:
    """The free memory another process left, as the record's nvidia-smi or error text states it."""
    text = record.get("error_text") or ""
    marker = "Free memory on device"
    if marker not in text:
        return None
    inside = text.split("(", 1)[1].split(")", 1)[0]  # "60.87/79.19 GiB"
    return float(inside.split("/")[0])


__all__ = ["GIB", "Case", "free_gib_from_error", "load_records", "to_case"]
