"""Readers for each source in serving_benchmarks.jsonl: record -> fidelity `Case` (or why not).

Only what a source states is used; what it leaves open takes vLLM's default for its release
(through the planner) or an assumption written in the case's notes.
"""

from __future__ import annotations

import re
from typing import Any

from kvwise.core.flags import VllmFlags
from kvwise.errors import KvwiseError
from kvwise.sim.workloads import WorkloadSpec
from tests.sim.fidelity import Case, Measured, Skipped, gpu_name, model_spec

# IOG serves "--max-model-len as needed" (not recorded): ShareGPT requests stay under 2048
# tokens, so any length that starts works; 8192 (or the model's own limit) is assumed.
IOG_MAX_MODEL_LEN = 8192


def case_from_record(
    record: dict[str, Any], capacities: dict[str, dict[str, Any]]
) -> Case | Skipped:
    record_id = record["id"]
    if record.get("engine") != "vllm":
        return Skipped(record_id, f"engine {record.get('engine')}, not vLLM")
    readers = {
        "iog-": _iog,
        "infsim-train-": _infsim_train,
        "infsim-s2r-": _infsim_s2r,
        "sglang-readme-": _sglang_readme,
        "a10g-single-": _a10g_single,
        "blog-mushfiq-": _blog_mushfiq,
    }
    for prefix, reader in readers.items():
        if record_id.startswith(prefix):
            try:
                model_spec(record["model"])
                gpu = gpu_name(record["gpu"])
            except (KvwiseError, KeyError) as exc:
                return Skipped(record_id, f"not in the catalog: {exc}")
            return reader(record, gpu, capacities)
    # no reader for this source: the in-sample ones without one do not state their workload's
    # lengths (blog-inferencebench); a new source needs a reader above before it can be scored
    return Skipped(
        record_id, "no reader for this source (workload lengths not stated, or not read)"
    )


def _tp(record: dict[str, Any]) -> int:
    return int(record.get("tensor_parallel") or 1)


def _iog(record: dict[str, Any], gpu: str, capacities: dict[str, dict[str, Any]]) -> Case | Skipped:
    m, w = record["metrics"], record["workload"]
    completed = int(m["completed"])
    model = model_spec(record["model"])
    flags = VllmFlags(
        dtype="float16",
        tensor_parallel_size=_tp(record),
        max_model_len=min(IOG_MAX_MODEL_LEN, model.max_position_embeddings),
    )
    workload = WorkloadSpec(
        "sharegpt",
        num_prompts=int(w["num_prompts"]),
        request_rate=float(w["request_rate_rps"]),
        burstiness=float(w.get("burstiness") or 1.0),
        input_len=round(m["total_input_tokens"] / completed),
        output_len=round(m["total_output_tokens"] / completed),
    )
    measured = Measured(
        output_throughput=m["output_throughput_tok_s"],
        mean_tpot_ms=m["tpot_mean_ms"],
        median_ttft_ms=m["ttft_median_ms"],
        mean_ttft_ms=m["ttft_mean_ms"],
        failures=int(w["num_prompts"]) - completed,
    )
    notes = (
        "max_model_len assumed 8192 (not recorded)",
        "ShareGPT lengths synthetic with the run's means",
    )
    return Case(
        record["id"], "iog", gpu, record["model"], "0.8.5", flags, workload, measured, None, notes
    )


def _shared_prefix_workload(w: dict[str, Any], m: dict[str, Any]) -> WorkloadSpec:
    rate = float(w["stage_rate_rps"])
    system = int(w["system_prompt_len"])
    # the lengths the run actually sent, where published (inference-perf draws them around the
    # configured means, clipped)
    prompt_mean = m.get("prompt_len_mean")
    question = round(prompt_mean - system) if prompt_mean else int(w["question_len"])
    output = round(m.get("output_len_mean") or w["output_len"])
    return WorkloadSpec(
        "shared-prefix",
        num_prompts=round(rate * float(w["stage_duration_s"])),
        request_rate=rate,
        arrival="constant",
        system_prompt_tokens=system,
        user_tokens=question,
        output_len=output,
        num_groups=int(w["num_unique_system_prompts"]),
        prompts_per_group=int(w["num_users_per_system_prompt"]),
    )


def _server_flags(record: dict[str, Any]) -> VllmFlags:
    f = record.get("server_flags") or {}
    return VllmFlags(
        max_model_len=f.get("max_model_len"),
        max_num_batched_tokens=f.get("max_num_batched_tokens"),
        max_num_seqs=f.get("max_num_seqs"),
        tensor_parallel_size=_tp(record),
    )


def _infsim_train(record: dict[str, Any], gpu: str, capacities: dict[str, dict[str, Any]]) -> Case:
    m, w = record["metrics"], record["workload"]
    stamp = re.match(r"infsim-train-(\d{8}-\d{6})", record["id"])
    capacity = capacities.get(f"infsim-kvcap-{stamp.group(1)}") if stamp else None
    blocks = capacity["metrics"]["gpu_kv_blocks_block16"] if capacity else None
    output = m.get("output_len_mean") or w["output_len"]
    # inference-perf's tpot here is the mean gap between streamed chunks, about two per token
    # (it equals itl_chunk_mean and is half of E2E / tokens): TPOT is derived from the E2E
    measured = Measured(
        output_throughput=m["output_tokens_per_s"],
        mean_tpot_ms=(m["e2e_mean_s"] - m["ttft_mean_s"]) / (output - 1) * 1000,
        median_ttft_ms=m["ttft_median_s"] * 1000,
        mean_ttft_ms=m["ttft_mean_s"] * 1000,
        mean_e2el_ms=m["e2e_mean_s"] * 1000,
        failures=int(m.get("failures") or 0),
    )
    notes = (
        "KV pool from vLLM's log" if blocks else "KV pool from the planner",
        "mean TPOT derived from mean E2E, TTFT and output length",
    )
    return Case(
        record["id"],
        "infsim-train",
        gpu,
        record["model"],
        "0.15.1",
        _server_flags(record),
        _shared_prefix_workload(w, m),
        measured,
        blocks,
        notes,
    )


def _infsim_s2r(record: dict[str, Any], gpu: str, capacities: dict[str, dict[str, Any]]) -> Case:
    m, w = record["metrics"], record["workload"]
    blocks = (record.get("server_flags") or {}).get("total_kv_blocks_gpu(block=16)")
    measured = Measured(
        mean_tpot_ms=m["itl_mean_ms"],
        mean_ttft_ms=m["ttft_mean_ms"],
        mean_e2el_ms=m["e2e_mean_ms"],
    )
    notes = ("only mean ITL published: compared as mean TPOT", "CPU KV offload not modelled")
    return Case(
        record["id"],
        "infsim-s2r",
        gpu,
        record["model"],
        "0.15.1",
        _server_flags(record),
        _shared_prefix_workload(w, {}),
        measured,
        blocks,
        notes,
    )


# vLLM 0.6.0 with `--num-scheduler-steps 10` (multi-step, not modelled). SGLang's bench_serving
# does not report lengths; ShareGPT means of the IOG Meta-Llama-3-8B-Instruct runs (same
# tokenizer and ShareGPT filter): 206 prompt and 202 output tokens per request.
SHAREGPT_MEANS_LLAMA3 = (206, 202)


def _sglang_readme(record: dict[str, Any], gpu: str, capacities: dict[str, dict[str, Any]]) -> Case:
    m, w = record["metrics"], record["workload"]
    rate = w["request_rate_rps"]
    workload = WorkloadSpec(
        "sharegpt",
        num_prompts=int(w["num_prompts"]),
        request_rate=None if rate == "inf" else float(rate),
        input_len=SHAREGPT_MEANS_LLAMA3[0],
        output_len=SHAREGPT_MEANS_LLAMA3[1],
    )
    measured = Measured(
        output_throughput=m.get("output_throughput_tok_s"),
        median_ttft_ms=m.get("ttft_median_ms"),
    )
    flags = VllmFlags(max_model_len=4096, tensor_parallel_size=_tp(record))
    steps = re.search(
        r"--num-scheduler-steps (\d+)", str((record.get("server_flags") or {}).get("vllm", ""))
    )
    notes = ("ShareGPT means assumed from IOG Llama-3 runs",)
    return Case(
        record["id"],
        "sglang-readme",
        gpu,
        record["model"],
        "0.6.0",
        flags,
        workload,
        measured,
        None,
        notes,
        num_scheduler_steps=int(steps.group(1)) if steps else 1,
    )


def _a10g_single(record: dict[str, Any], gpu: str, capacities: dict[str, dict[str, Any]]) -> Case:
    m = record["metrics"]
    output = m["mean_output_tokens_per_request"]
    workload = WorkloadSpec(
        "random",
        num_prompts=int(record["workload"]["num_requests"]),
        max_concurrency=1,
        input_len=64,
        output_len=round(output),
        max_tokens=128,
    )
    # TPOT from the published means: (E2E - TTFT) / (output tokens - 1)
    tpot_ms = (m["e2e_mean_ms"] - m["ttft_mean_ms"]) / (output - 1)
    measured = Measured(
        output_throughput=m["output_tokens_per_s"],
        mean_tpot_ms=tpot_ms,
        median_ttft_ms=m["ttft_median_ms"],
        mean_ttft_ms=m["ttft_mean_ms"],
        mean_e2el_ms=m["e2e_mean_ms"],
    )
    flags = VllmFlags(
        enable_prefix_caching=True,
        max_model_len=8192,
        gpu_memory_utilization=0.85,
        dtype="bfloat16",
    )
    notes = ("mean TPOT derived from mean E2E, TTFT and output length",)
    return Case(
        record["id"], "a10g", gpu, record["model"], "0.18.0", flags, workload, measured, None, notes
    )


def _blog_mushfiq(record: dict[str, Any], gpu: str, capacities: dict[str, dict[str, Any]]) -> Case:
    m, w = record["metrics"], record["workload"]
    # requests stop at EOS before max_tokens: the blog's own throughputs give the mean output
    # (output / request throughput, ~100 of 128); lengths assumed uniform up to max_tokens
    max_tokens = int(w["output_len"])
    mean_output = m["output_throughput_tok_s"] / m["request_throughput_rps"]
    ratio = max_tokens / mean_output - 1
    workload = WorkloadSpec(
        "random",
        num_prompts=int(w["num_prompts"]),
        max_concurrency=int(w["max_concurrency"]),
        input_len=int(w["input_len"]),
        output_len=round(mean_output),
        range_ratio=ratio,
        max_tokens=max_tokens,
    )
    measured = Measured(
        output_throughput=m["output_throughput_tok_s"],
        median_ttft_ms=m["ttft_median_ms"],
        mean_ttft_ms=m["ttft_mean_ms"],
    )
    notes = (
        "vLLM version and flags not stated: latest defaults",
        "output lengths uniform with the mean the blog's throughputs imply",
    )
    return Case(
        record["id"],
        "blog-4090",
        gpu,
        record["model"],
        None,
        VllmFlags(),
        workload,
        measured,
        None,
        notes,
    )
