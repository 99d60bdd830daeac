"""Scores `plan --engine sglang` against the public SGLang start-ups in
tests/data/validation/sglang_startup_logs.jsonl, run as a user would (stated flags + release)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvwise.core.catalog import load_model
from kvwise.core.flags import VllmFlags
from kvwise.core.gpus import resolve_gpu
from kvwise.errors import KvwiseError
from kvwise.planner.sglang import SglangFlags, plan_sglang

RECORDS = Path(__file__).parents[1] / "data" / "validation" / "sglang_startup_logs.jsonl"
# the card a record names, as `--gpu` takes it (only names that say the card unambiguously)
GPU_KEYS = {
    "NVIDIA L4": "l4",
    "H100": "h100",
    "H100 SXM": "h100",
    "H200": "h200",
    "B200": "b200",
    "4090": "rtx4090",
    "RTX 3090": "rtx3090",
    "RTX 5090": "rtx5090",
    "A100 80G": "a100-80gb",
}


@dataclass(frozen=True)
class Scored:
    id: str
    split: str
    family: str
    predicted_tokens: int
    logged_tokens: int | None
    predicted_starts: bool
    logged_starts: bool

    @property
    def token_error(self) -> float | None:
        if not self.logged_tokens:
            return None
        return (self.predicted_tokens - self.logged_tokens) / self.logged_tokens


def records() -> list[dict[str, Any]]:
    return [json.loads(line) for line in RECORDS.read_text().splitlines() if line.strip()]


def _version(record: dict[str, Any]) -> str | None:
    stated = record["sglang_version"]
    return stated.split("-")[0] if stated else None


def score(record: dict[str, Any]) -> Scored | None:
    """None when the record lacks what a user would type (model, card) or kvwise lacks the model."""
    gpu_key = GPU_KEYS.get(record["gpu"] or "")
    if record["model"] is None or gpu_key is None:
        return None
    try:
        model = load_model(record["model"])
    except KvwiseError:
        return None
    tp = record["tp_size"] or record["num_gpus"] or 1
    flags = VllmFlags(tensor_parallel_size=tp, max_model_len=record["context_length"])
    sglang = SglangFlags(
        version=_version(record),
        mem_fraction_static=record["mem_fraction_static"],
        chunked_prefill_size=record["chunked_prefill_size"],
        cuda_graph_max_bs=record["cuda_graph_max_bs"],
    )
    result = plan_sglang(model, resolve_gpu(gpu_key, None, None), flags, sglang)
    return Scored(
        record["id"],
        record["split"],
        result.family,
        result.max_total_num_tokens,
        record["max_total_num_tokens"],
        result.starts,
        record["outcome"].startswith("ok"),
    )


def scored(split: str) -> list[Scored]:
    return [s for r in records() if r["split"] == split and (s := score(r)) is not None]
