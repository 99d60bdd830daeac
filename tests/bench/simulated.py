"""Measurements made by the simulator itself, with known coefficients: the ground truth that
calibration must recover."""

from __future__ import annotations

import random
from pathlib import Path

from kvwise.bench.records import RequestRecord
from kvwise.core.catalog import load_model
from kvwise.core.flags import VllmFlags
from kvwise.core.gpus import find_gpu
from kvwise.sim.deploy import deployment
from kvwise.sim.request import Request
from kvwise.sim.runner import SimConfig, simulate
from kvwise.sim.steptime import StepTimeCoefficients
from kvwise.sim.workloads import Workload, WorkloadSpec, build_workload

# the tiny Qwen2's config.json, in a directory named like the model (its model_id)
TINY_CONFIG = str(Path(__file__).resolve().parents[1] / "data" / "tiny-qwen2")


# the CPU engine's flags (tests/engine_fixture.py) and the scheduler defaults vLLM picks on CPU
TINY_FLAGS = VllmFlags(
    dtype="float32",
    max_model_len=2048,
    max_num_seqs=128,
    max_num_batched_tokens=2048,
    enforce_eager=True,
    kv_cache_memory_bytes=256 * 2**20,
)
TINY_CACHE_CONFIG = {"num_gpu_blocks": "1024", "block_size": "128"}  # as its /metrics says


def tiny_config(coefficients: StepTimeCoefficients | None = None) -> SimConfig:
    """The tiny Qwen2 as the CPU engine serves it (1024 blocks of 128 tokens, 128 seqs, 2048
    tokens per step), timed as if on an RTX 4090."""
    model, gpu = load_model(TINY_CONFIG), find_gpu("rtx4090")
    flags = TINY_FLAGS.merged(block_size=128)
    return deployment(model, gpu, flags, coefficients=coefficients, num_gpu_blocks=1024).config


def records_of(workload: Workload, requests: list[Request]) -> list[RequestRecord]:
    """Bench records of simulated requests: what bench would have written for them."""
    records = []
    turns_seen: dict[int, int] = {}
    for request in sorted(requests, key=lambda r: (r.sent_s, r.request_id)):
        session = request.owner.index  # type: ignore[attr-defined]
        turn = turns_seen.get(session, 0)
        turns_seen[session] = turn + 1
        assert request.first_token_s is not None
        out = request.num_output_tokens
        decode_s = request.finish_s - request.first_token_s
        records.append(
            RequestRecord(
                session=session,
                turn=turn,
                sent_s=request.sent_s,
                ttft_s=request.first_token_s - request.sent_s,
                itl_s=[decode_s / (out - 1)] * (out - 1),
                e2el_s=request.finish_s - request.sent_s,
                prompt_tokens=request.num_prompt_tokens,
                output_tokens=out,
                planned_prompt_tokens=request.num_prompt_tokens,
                planned_output_tokens=out,
                new_segments=list(workload.sessions[session].turns[turn].new_segments),
            )
        )
    return records


def simulated_records(
    spec: WorkloadSpec, truth: StepTimeCoefficients, seed: int = 0
) -> list[RequestRecord]:
    workload = build_workload(spec, random.Random(seed))
    result = simulate(tiny_config(truth), workload, seed)
    return records_of(workload, result.engine.finished)
