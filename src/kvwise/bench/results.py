"""The bench results file: everything measured, and everything `kvwise calibrate` needs.

One JSON object (pydantic, extra="forbid": a file edge):

    {"format": "kvwise-bench/1", "date", "kvwise_version",
     "server": {url, model, model_root, backend, flags, cache_config},
     "workload": {WorkloadSpec fields}, "seed", "tokenizer", "gpu", "sim_model", "vllm_version",
     "runs": [{"max_concurrency", "request_rate",
               "metrics": {vLLM bench keys: completed, failed, duration, *_throughput,
                           mean/median/p90/p99 _ttft_ms/_tpot_ms/_itl_ms/_e2el_ms, errors},
               "server_metrics": {deltas from vLLM's /metrics} | null,
               "prediction": {simulate's figures for the same run} | null,
               "requests": [RequestRecord...]}]}
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kvwise.bench.records import RequestRecord
from kvwise.errors import DataError

RESULTS_FORMAT = "kvwise-bench/1"


class ServerInfo(BaseModel):
    model_config = ConfigDict(extra="forbid")
    url: str
    model: str  # the served model name requests were sent to
    model_root: str | None = None  # /v1/models "root": the path or hub id vLLM loaded
    max_model_len: int | None = None  # /v1/models "max_model_len" (vLLM lists it)
    backend: str = "openai"  # "vllm" when the server exposes vLLM's /metrics
    flags: dict[str, Any] = Field(default_factory=dict)  # vLLM flags the user stated (--flag)
    cache_config: dict[str, str] = Field(default_factory=dict)  # vllm:cache_config_info labels

    def num_gpu_blocks(self) -> int | None:
        value = self.cache_config.get("num_gpu_blocks", "")
        return int(value) if value.isdigit() else None

    def block_size(self) -> int | None:
        value = self.cache_config.get("block_size", "")
        return int(value) if value.isdigit() else None


class RunResult(BaseModel):
    model_config = ConfigDict(extra="forbid")
    max_concurrency: int | None
    request_rate: float | None
    metrics: dict[str, Any]
    server_metrics: dict[str, float] | None = None
    prediction: dict[str, Any] | None = None
    requests: list[RequestRecord]


class BenchResults(BaseModel):
    model_config = ConfigDict(extra="forbid")
    format: str = RESULTS_FORMAT
    date: str
    kvwise_version: str
    server: ServerInfo
    workload: dict[str, Any]
    seed: int
    tokenizer: str
    gpu: str | None = None  # for --predict and calibrate: the GPU the server runs on
    sim_model: str | None = None  # the model as kvwise loads it (catalog name, dir, config.json)
    vllm_version: str | None = None
    runs: list[RunResult]


def write_results(results: BenchResults, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(results.model_dump_json(indent=1) + "\n")


def read_results(path: Path) -> BenchResults:
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise DataError(f"{path}: cannot read ({exc.strerror})") from exc
    except json.JSONDecodeError as exc:
        raise DataError(f"{path}: not JSON ({exc.msg}, line {exc.lineno})") from exc
    if not isinstance(data, dict) or data.get("format") != RESULTS_FORMAT:
        raise DataError(f"{path}: not a kvwise bench results file (format {RESULTS_FORMAT!r})")
    try:
        return BenchResults.model_validate(data)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"])
        raise DataError(f"{path}: {where}: {error['msg']}") from exc
