"""Scores `plan --engine sglang` against the public SGLang start-ups in
tests/data/validation/sglang_startup_logs.jsonl, run as a user would (stated flags + release)."""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvwise.core.catalog import load_model
from kvwise.core.flags import VllmFlags
from kvwise.core.gpus import resolve_gpu
from kvwise.errors import KvwiseError
from kvwise.planner.sglang import SglangFlags, plan_sglang

RECORDS = Path(__file__).parents[1] / "data" / "validation" / "sglang_startup_logs.jsonl"
# collected after the SGLang planner's rules were fixed; nothing was tuned on it (out-of-sample)
UNSEEN = RECORDS.parent / "unseen" / "sglang_startup_logs_unseen.jsonl"
# second out-of-sample batch, collected before any rule change of 2026-12-02 afternoon
UNSEEN_B = RECORDS.parent / "unseen" / "sglang_startup_logs_b.jsonl"
# third out-of-sample batch, collected 2026-12-02 15:10-15:40 before its one scoring
UNSEEN_C = RECORDS.parent / "unseen" / "sglang_startup_logs_c.jsonl"
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
    "NVIDIA RTX A6000": "rtx-a6000",
    "NVIDIA A10G": "a10g",
    "A100-80G": "a100-80gb",
    "NVIDIA A800-SXM4-80GB": "a800-80gb-sxm",
    # the full-memory vGPU profile of an A40
    "NVIDIA A40-48Q": "a40",
    # names as batch c's sources print them (check_env or the reporter), added before its scoring
    "NVIDIA A100 80GB PCIe": "a100-80gb-pcie",
    "NVIDIA A100-SXM4-80GB": "a100-80gb-sxm",
    "NVIDIA H100 80GB HBM3": "h100-sxm",
    "H100 80GB": "h100",
    "NVIDIA H20": "h20",
    "A10": "a10",
    "A100 40GB": "a100-40gb-sxm",
    "NVIDIA GeForce RTX 3070 Laptop GPU": "rtx3070-laptop",
    "NVIDIA GeForce RTX 4070 Ti SUPER": "rtx4070tisuper",
}


@dataclass(frozen=True)
class Scored:
    id: str
    split: str
    family: str
    predicted_tokens: int
    logged_tokens: int | None
    predicted_starts: bool
    logged_starts: bool | None  # None: the source does not show whether it started

    @property
    def token_error(self) -> float | None:
        if not self.logged_tokens:
            return None
        return (self.predicted_tokens - self.logged_tokens) / self.logged_tokens


def records(path: Path = RECORDS) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _version(record: dict[str, Any]) -> str | None:
    stated = record["sglang_version"]
    return stated.split("-")[0] if stated else None


def unscored_reason(record: dict[str, Any]) -> str | None:
    """Why a record cannot be planned as a user would (None when it can)."""
    if record["model"] is None:
        return "the source names no model"
    if GPU_KEYS.get(record["gpu"] or "") is None:
        return f"the source names no card kvwise can resolve ({record['gpu']!r})"
    try:
        load_model(record["model"])
    except KvwiseError:
        return f"kvwise has no config for {record['model']}"
    return None


def score(record: dict[str, Any]) -> Scored | None:
    """None when the record lacks what a user would type (model, card) or kvwise lacks the model."""
    if unscored_reason(record) is not None:
        return None
    gpu_key = GPU_KEYS[record["gpu"]]
    model = load_model(record["model"])
    tp = record["tp_size"] or record["num_gpus"] or 1
    flags = VllmFlags(
        tensor_parallel_size=tp,
        max_model_len=record["context_length"],
        kv_cache_dtype=record["kv_cache_dtype"],
    )
    sglang = SglangFlags(
        version=_version(record),
        mem_fraction_static=record["mem_fraction_static"],
        chunked_prefill_size=record["chunked_prefill_size"],
        cuda_graph_max_bs=record["cuda_graph_max_bs"],
        max_running_requests=record["max_running_requests"],
    )
    result = plan_sglang(model, resolve_gpu(gpu_key, None, None), flags, sglang)
    return Scored(
        record["id"],
        record["split"],
        result.family,
        result.max_total_num_tokens,
        record["max_total_num_tokens"],
        result.starts,
        None if record["outcome"] is None else record["outcome"].startswith("ok"),
    )


def scored(split: str, path: Path = RECORDS) -> list[Scored]:
    return [s for r in records(path) if r["split"] == split and (s := score(r)) is not None]


@dataclass(frozen=True)
class BatchFigures:
    planned: int
    token_errors: tuple[float, ...]  # |relative error| of each planned record with a logged pool
    verdicts: tuple[bool, ...]  # right or not, for each planned record whose outcome is known


def score_batch(label: str, path: Path, width: int) -> BatchFigures:
    """Plan every record of an out-of-sample batch as a user would and print one line each
    (planned or not, and why not; KV tokens; verdict), then the batch's figures (pytest -s)."""
    errors: list[float] = []
    verdicts: list[bool] = []
    planned = 0
    for record in records(path):
        try:
            case = score(record)
        except KvwiseError as refused:  # what a user sees: kvwise declines the flags
            print(f"{label} {record['id']:{width}} not planned: kvwise says {refused}")
            continue
        if case is None:
            print(f"{label} {record['id']:{width}} not planned: {unscored_reason(record)}")
            continue
        planned += 1
        err = case.token_error
        right = None if case.logged_starts is None else case.predicted_starts == case.logged_starts
        print(
            f"{label} {case.family:12} {case.id:{width}} predicted {case.predicted_tokens:>9,} "
            f"logged {case.logged_tokens or 0:>9,} error {err if err is None else f'{err:+.1%}'} "
            f"starts {case.predicted_starts} verdict "
            f"{'unknown' if right is None else 'right' if right else 'WRONG'}"
        )
        if err is not None:
            errors.append(abs(err))
        if right is not None:
            verdicts.append(right)
    within = sum(e <= 0.10 for e in errors)
    median = statistics.median(errors) if errors else float("nan")
    worst = max(errors) if errors else float("nan")
    print(
        f"{label} KV tokens: n={len(errors)} median {median:.1%} worst {worst:.1%} "
        f"within 10%: {within}/{len(errors)}; verdicts right {sum(verdicts)}/{len(verdicts)}"
    )
    return BatchFigures(planned, tuple(errors), tuple(verdicts))
