"""One reader per unseen source: record -> `Case` (or `Skipped` with the reason).

What each source states is in validation/unseen/SERVING_SOURCES.md; see fidelity_unseen.py for
the rules the readers follow.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from kvwise.core.flags import VllmFlags
from kvwise.errors import KvwiseError
from kvwise.planner.kv import attention_page_bytes_per_token
from kvwise.sim.workloads import WorkloadSpec
from tests.sim.fidelity import Case, Skipped
from tests.sim.fidelity_unseen import (
    CLOUDRIFT_LATEST,
    kv_blocks,
    load_spec,
    means,
    measured,
    model_name,
    rate,
    split,
    version,
)

CHAT_NOTE = "chat endpoint: the chat template's extra prompt tokens not modelled"
GIB = 1 << 30


def _tp(record: dict[str, Any]) -> int:
    return int(record.get("tensor_parallel") or 1)


def _sent(w: dict[str, Any]) -> int:
    return int(w["num_prompts"])


def _random(w: dict[str, Any], m: dict[str, Any], **changes: Any) -> tuple[WorkloadSpec, str]:
    """vLLM's random dataset: the stated lengths (no range ratio given: its default draws fixed
    lengths). Without --ignore-eos a request may stop early: the run's mean output tokens per
    request are used, capped at max_tokens."""
    max_tokens = int(w["random_output_len"])
    output = max_tokens if w.get("ignore_eos") else min(max_tokens, means(m, _sent(w))[1])
    spec = WorkloadSpec(
        "random",
        num_prompts=_sent(w),
        request_rate=rate(w),
        max_concurrency=w.get("max_concurrency"),
        input_len=int(w["random_input_len"]),
        output_len=max(output, 1),
        max_tokens=max_tokens,
    )
    note = (
        "random prompts of the stated length; output = max_tokens (--ignore-eos)"
        if w.get("ignore_eos")
        else "random prompts of the stated length; output: the run's mean tokens per request"
    )
    return replace(spec, **changes), note


def _sharegpt(w: dict[str, Any], m: dict[str, Any], **changes: Any) -> tuple[WorkloadSpec, str]:
    prompt, output = means(m, _sent(w))
    spec = WorkloadSpec(
        "sharegpt",
        num_prompts=_sent(w),
        request_rate=rate(w),
        max_concurrency=w.get("max_concurrency"),
        burstiness=float(w.get("burstiness") or 1.0),
        input_len=prompt,
        output_len=max(output, 1),
        **changes,
    )
    return spec, "ShareGPT lengths synthetic with the run's mean prompt and output tokens"


def _workload(w: dict[str, Any], m: dict[str, Any]) -> tuple[WorkloadSpec, str]:
    return _random(w, m) if w["dataset"] == "random" else _sharegpt(w, m)


def _case(
    record: dict[str, Any],
    source: str,
    gpu: str,
    flags: VllmFlags,
    workload: WorkloadSpec,
    notes: list[str],
    **extra: Any,
) -> Case:
    sent = _sent(record["workload"])
    share = extra.pop("share", 1.0)
    return Case(
        record["id"],
        source,
        gpu,
        model_name(record),
        extra.pop("vllm_version", version(record.get("engine_version"))),
        flags,
        workload,
        measured(record["metrics"], sent, share),
        extra.pop("num_gpu_blocks", None),
        tuple(notes),
        **extra,
    )


def gpustack(record: dict[str, Any], gpu: str) -> Case | Skipped:
    f, w = record["server_flags"], record["workload"]
    if int(f.get("pipeline_parallel") or 1) > 1:
        return Skipped(
            record["id"], "pipeline parallelism across GPUs: not read (one TP engine only)"
        )
    flags = VllmFlags(
        tensor_parallel_size=_tp(record),
        max_model_len=f.get("max_model_len"),
        max_num_batched_tokens=f.get("max_num_batched_tokens"),
        gpu_memory_utilization=f.get("gpu_memory_utilization"),
    )
    workload, how = _workload(w, record["metrics"])
    notes = [how, CHAT_NOTE, "unset flags: the release's defaults (the doc's serving script)"]
    if w["dataset"] == "random":
        notes.append("num_prompts = the successful requests (the doc prints no --num-prompts)")
    if f.get("async_scheduling"):
        notes.append("--async-scheduling: not modelled (the step loop is synchronous)")
    return _case(record, "gpustack", gpu, flags, workload, notes)


def dennislee22(record: dict[str, Any], gpu: str) -> Case | Skipped:
    f, w = record["server_flags"], record["workload"]
    if "different nodes" in record.get("source_note", ""):
        return Skipped(record["id"], "tensor parallelism across nodes over Ray: not modelled")
    if w.get("random_output_len") is None:
        return Skipped(record["id"], "workload lengths not stated (--random-output-len missing)")
    notes = []
    blocks = kv_blocks(f)
    if blocks:
        notes.append("KV pool from vLLM's log (GPU KV cache size, block 16)")
    elif f.get("available_kv_cache_memory"):
        # "Available KV cache memory: X GiB" per GPU, bf16 pages of 16 tokens
        gib = float(str(f["available_kv_cache_memory"]).split()[0])
        try:
            spec = load_spec(model_name(record))
        except KvwiseError as exc:
            return Skipped(record["id"], f"not in the catalog: {str(exc).split(':')[0]}")
        per_layer = attention_page_bytes_per_token(spec, _tp(record), 2)
        blocks = int(gib * GIB) // (16 * per_layer * spec.num_layers)
        notes.append("KV pool from the logged available KV cache memory per GPU (bf16 pages)")
    max_model_len = f.get("max_model_len")
    if max_model_len is None:
        max_model_len = 16384
        notes.append("max_model_len 16384 assumed (not logged; every logged test of the campaign)")
    flags = VllmFlags(
        tensor_parallel_size=_tp(record),
        max_model_len=max_model_len,
        gpu_memory_utilization=f.get("gpu_memory_utilization"),
    )
    workload, how = _random(w, record["metrics"])
    notes += [how, "all prompts sent at once (request rate inf)"]
    if gpu == "A100 PCIe 80GB":
        notes.append(
            "A100 80GB form factor not stated: PCIe, as the campaign's TP2 log says the GPUs "
            "lack peer-to-peer (an SXM4 board has NVLink)"
        )
    interconnect = None
    if _tp(record) > 1 and record.get("gpu_peer_to_peer") is False:
        # vLLM: "Custom allreduce is disabled because your platform lacks GPU P2P capability"
        interconnect = "pcie-nop2p"
        notes.append("GPUs without peer-to-peer (record's gpu_peer_to_peer): NCCL via host memory")
    return _case(
        record,
        "dennislee22",
        gpu,
        flags,
        workload,
        notes,
        num_gpu_blocks=blocks,
        interconnect=interconnect,
        earlier_runs=_earlier_runs(record, workload, notes),
    )


def _earlier_runs(
    record: dict[str, Any], workload: WorkloadSpec, notes: list[str]
) -> tuple[WorkloadSpec, ...]:
    """What the server had computed before the measured requests, in order: the earlier runs
    of the sweep on the same server (the record's `server_history`, read from the vLLM log
    lines the source pasted under each run), then the client's test request.

    benchmark_serving.py's benchmark() first sends input_requests[0] as an "initial single
    prompt test run" (vllm benchmarks/benchmark_serving.py, 0.5-0.10; vllm/benchmarks/serve.py),
    so prompt 0 is always cached (prefix caching is on in the logged engine config). vLLM's
    random data set draws the same first prompts for any --num-prompts (same seed, range ratio
    0), so a run after a smaller one finds that run's prompts cached, as far as the pool kept
    them: the log's cumulative prefix-cache hit rate matches (test 4: 8.9 % after 10 prompts,
    40.6 % after 20 more of which 10 repeat)."""
    history = record.get("server_history") or {}
    earlier = [
        replace(
            workload,
            num_prompts=int(run["num_prompts"]),
            input_len=int(run["random_input_len"]),
            output_len=int(run["random_output_len"]),
            max_tokens=int(run["random_output_len"]),
        )
        for run in history.get("earlier_runs", ())
    ]
    if earlier:
        notes.append(
            f"{len(earlier)} earlier run(s) on the same server (vLLM log): their prompts start cached"
        )
    elif not history:
        notes.append("earlier runs on this server not logged: the prefix cache starts cold")
    test_run = replace(workload, num_prompts=1)
    notes.append("the client's test request (prompt 0) runs first: prompt 0 starts cached")
    return (*earlier, test_run)


def livinfly(record: dict[str, Any], gpu: str) -> Case | Skipped:
    w, m = record["workload"], record["metrics"]
    notes = ["V0 engine (VLLM_USE_V1=0), 0.9.1 defaults for every unset flag"]
    if w["dataset"] == "random":
        # sglang bench_serving's random lengths: uniform in [max(L * ratio, 1), L], ratio 0 here
        length_in, length_out = int(w["random_input_len"]), int(w["random_output_len"])
        workload = WorkloadSpec(
            "random",
            num_prompts=_sent(w),
            request_rate=rate(w),
            input_len=round((length_in + 1) / 2),
            output_len=round((length_out + 1) / 2),
            range_ratio=0.99,
            max_tokens=length_out,
        )
        notes.append("sglang random lengths: uniform in [1, L] (range ratio 0), ignore_eos")
    else:
        workload, how = _sharegpt(w, m)
        notes.append(how)
    if model_name(record).startswith("Mistral-7B-Instruct"):
        notes.append("Mistral-7B-Instruct version not stated: v0.3 shapes assumed")
    if model_name(record).startswith("deepseek-ai/DeepSeek-R1-0528"):
        notes.append("Qwen3-8B shapes (the model is its fine-tune), Qwen3-8B's context length")
    # benchmark/README.md: "VLLM_USE_V1=0"; without it 0.9.1 would run V1
    use_v1 = None if "VLLM_USE_V1=0" not in record["server_flags"].get("env", "") else False
    return _case(record, "livinfly", gpu, VllmFlags(), workload, notes, vllm_use_v1=use_v1)


def zhjunqin(record: dict[str, Any], gpu: str) -> Case | Skipped:
    f = record["server_flags"]
    if "AWQ" in record["model"]:
        return Skipped(record["id"], "AWQ checkpoint and its server flags not stated")
    log = f.get("args_from_log") or {}
    flags = VllmFlags(
        dtype="bfloat16",
        gpu_memory_utilization=log.get("gpu_memory_utilization"),
        max_num_seqs=log.get("max_num_seqs"),
        enable_prefix_caching=False,
        enable_chunked_prefill=False,
    )
    workload, how = _sharegpt(record["workload"], record["metrics"])
    notes = [
        how,
        "KV pool from vLLM's log (# GPU blocks)",
        "every request assumed completed (the table prints no count)",
        "XFormers attention backend (log): not modelled",
    ]
    return _case(
        record, "zhjunqin", gpu, flags, workload, notes, num_gpu_blocks=f.get("gpu_blocks_from_log")
    )


def lambdalabs(record: dict[str, Any], gpu: str) -> Case | Skipped:
    if not record.get("engine_version"):
        return Skipped(
            record["id"], "vLLM version not recorded (dated after 0.6.0, report says 0.5.4)"
        )
    flags = VllmFlags(
        tensor_parallel_size=_tp(record), max_model_len=record["server_flags"]["max_model_len"]
    )
    workload, how = _sharegpt(record["workload"], record["metrics"])
    notes = [
        how,
        "--gpu-memory-utilization / --max-num-seqs not recorded: 0.5.4 defaults (0.9, 256)",
        "FP8 / Instruct checkpoints read as catalog models with the same shapes",
    ]
    return _case(record, "lambdalabs", gpu, flags, workload, notes)


def cloudrift(record: dict[str, Any], gpu: str) -> Case | Skipped:
    f, w = record["server_flags"], record["workload"]
    replicas, stages = int(f.get("replicas") or 1), int(f.get("pipeline_parallel") or 1)
    if stages > 1:
        return Skipped(
            record["id"], "pipeline-parallel replicas: not read (single-GPU replicas only)"
        )
    flags = VllmFlags(
        tensor_parallel_size=_tp(record),
        max_model_len=f.get("max_model_len"),
        max_num_seqs=f.get("max_num_seqs"),
        gpu_memory_utilization=f.get("gpu_memory_utilization"),
        kv_cache_dtype=f.get("kv_cache_dtype"),
        enable_prefix_caching=f.get("enable_prefix_caching"),
    )
    concurrency = int(w["max_concurrency"])
    workload, how = _random(
        w,
        record["metrics"],
        num_prompts=split(_sent(w), replicas),
        max_concurrency=split(concurrency, replicas),
    )
    notes = [how, CHAT_NOTE, "image `latest` (Oct 2025, version not printed): 0.11.0 assumed"]
    notes.append("AWQ int4: base model shapes + AutoAWQ group-128 config (checkpoint not read)")
    if replicas > 1:
        notes.append(
            f"{replicas} replicas behind NGINX: load split evenly, one replica simulated "
            f"({split(concurrency, replicas)} of {concurrency} in flight), fleet throughput / {replicas}"
        )
    return _case(
        record,
        "cloudrift",
        gpu,
        flags,
        workload,
        notes,
        vllm_version=version(record.get("engine_version")) or CLOUDRIFT_LATEST,
        share=1.0 / replicas,
    )


def kubeai(record: dict[str, Any], gpu: str) -> Case | Skipped:
    if int((record.get("server_flags") or {}).get("replicas") or 1) > 1:
        return Skipped(
            record["id"],
            "fleet of 8 replicas with multi-turn prompts whose turn structure is not stated",
        )
    return Skipped(record["id"], "server flags not stated (multimodal model served text-only)")


def vllm_thread(record: dict[str, Any], gpu: str) -> Case | Skipped:
    f = record["server_flags"]
    flags = VllmFlags(
        dtype="bfloat16",
        max_model_len=f.get("max_model_len"),
        max_num_seqs=f.get("max_num_seqs"),
        enable_prefix_caching=f.get("enable_prefix_caching"),
        enable_chunked_prefill=f.get("enable_chunked_prefill"),
    )
    workload, how = _sharegpt(record["workload"], record["metrics"])
    notes = [how, "--gpu-memory-utilization not stated: 0.9 (default)"]
    return _case(record, "vllm-issue", gpu, flags, workload, notes)


def digitalocean(record: dict[str, Any], gpu: str) -> Case | Skipped:
    f, w = record["server_flags"], record["workload"]
    if not str(w["dataset"]).startswith("sharegpt"):
        return Skipped(
            record["id"],
            "multi-turn conversation set: its shared-prefix structure is not stated (only the mean)",
        )
    flags = VllmFlags(
        max_model_len=f.get("max_model_len"),
        max_num_seqs=f.get("max_num_seqs"),
        max_num_batched_tokens=f.get("max_num_batched_tokens"),
        gpu_memory_utilization=f.get("gpu_memory_utilization"),
        kv_cache_dtype="fp8",
        enable_prefix_caching=True,
    )
    workload, how = _sharegpt(w, record["metrics"])
    notes = [
        how,
        "KV pool from vLLM's log (GPU KV cache size, block 16), fp8 KV cache",
        "modelopt FP8 checkpoint read as the catalog's FP8 Llama-3.3-70B (same shapes)",
        "10 warm-up prompts before each rate (server not restarted): prefix cache starts cold",
    ]
    return _case(record, "digitalocean", gpu, flags, workload, notes, num_gpu_blocks=kv_blocks(f))


def set_e(record: dict[str, Any], gpu: str) -> Case | Skipped:
    """Set e (unseen/serving_benchmarks_e.jsonl, SERVING_SOURCES_e.md): one layout for every
    source, so one reader. The flags the record states, the release's defaults otherwise;
    vLLM's random dataset at the stated lengths (every set-e record is one)."""
    f, w, m = record["server_flags"], record["workload"], record["metrics"]
    if w.get("dataset") != "random":
        return Skipped(record["id"], f"dataset {w.get('dataset')}: no set-e reader for it")
    notes = ["random prompts of the stated length", "unset flags: the release's defaults"]
    sent = w.get("num_prompts")
    if sent is None:
        if w.get("max_concurrency") != 1:
            return Skipped(record["id"], "number of prompts not stated")
        sent = 10
        notes.append("num_prompts not stated: 10 simulated (one at a time, so no request waits)")
    max_tokens = int(w["random_output_len"])
    output = max_tokens
    if not w.get("ignore_eos") and m.get("total_output_tokens") and m.get("completed"):
        output = min(max_tokens, round(m["total_output_tokens"] / m["completed"]))
    elif not w.get("ignore_eos"):
        notes.append("--ignore-eos not stated: every request assumed to reach max_tokens")
    workload = WorkloadSpec(
        "random",
        num_prompts=int(sent),
        request_rate=rate(w),
        max_concurrency=w.get("max_concurrency"),
        burstiness=float(w.get("burstiness") or 1.0),
        input_len=int(w["random_input_len"]),
        output_len=max(output, 1),
        max_tokens=max_tokens,
    )
    flags = VllmFlags(
        tensor_parallel_size=_tp(record),
        max_model_len=f.get("max_model_len"),
        max_num_seqs=f.get("max_num_seqs"),
        max_num_batched_tokens=f.get("max_num_batched_tokens"),
        gpu_memory_utilization=f.get("gpu_memory_utilization"),
        enable_prefix_caching=f.get("enable_prefix_caching"),
        enforce_eager=f.get("enforce_eager"),
    )
    if f.get("enable_expert_parallel"):
        notes.append("--enable-expert-parallel: not modelled (read as plain TP)")
    if w.get("num_warmups"):
        notes.append(f"{w['num_warmups']} warm-up requests before the run: not simulated")
    if w.get("warm_prefix_replay"):
        notes.append(
            "same seed at every sweep point on one server: possible prefix-cache hits not modelled"
        )
    source = record["id"].split("-")[1]
    measured_ = measured(m, int(sent))
    return Case(
        record["id"],
        source,
        gpu,
        model_name(record),
        version(record.get("engine_version")),
        flags,
        workload,
        measured_,
        None,
        tuple(notes),
    )


# Set f (SERVING_SOURCES_f.md). IsseiHasegawa/vLLM-experiment built vLLM at commit 702f4814
# with a logging-only patch; the record calls it a main-branch build with no release. That
# commit is the v0.25.0 tag (vllm-project/vllm tag v0.25.0 -> 702f4814fe54fabff350d43cb753ae3e47c0c276),
# and the author's own README said so: "Pinned to vLLM v0.25.0 (commit 702f4814fe54...)"
# (github.com/IsseiHasegawa/vLLM-experiment/blob/c46717b24c49da200820f1a8e1446c25454b413c/README.md).
# Set f's rule 2 takes a pinned image tag as the release; a pinned release commit is the same
# code, so the release's defaults apply (the fork only adds phase logging: the -noinstr control).
ISSEI_RELEASE = "0.25.0"

# Raditya's ShareGPT runs publish no token totals. benchmark_serving (0.4.1 and the v0.8.5 copy
# it ran) shuffles the ShareGPT file with the seed (0 by default) and keeps the first prompts
# that pass the same filter (4..1024 prompt tokens, prompt + output <= 2048), tokenised with the
# model's tokenizer: Llama 3.2 uses the Llama 3 tokenizer, so its 100 prompts are those of
# zhjunqin-3090-llama3-8b-base-rr1-n100 (serving_benchmarks_unseen.jsonl: 100 prompts, default
# seed, Meta-Llama-3-8B-Instruct), which sent 22,925 prompt tokens and got 21,789 back. The
# output is that model's (Llama-3.2-3B's own stops are not published): an assumption.
SHAREGPT_100_SEED0_LLAMA3 = (229, 218)

# Sweeps run against one server in a fixed order with the client's default seed, prefix
# caching on: a run finds the prompts of the runs before it cached (`_earlier_runs` above,
# `kvwise.sim.warm.replay_earlier_runs`). Per source, in run order:
# (random input length or None for ShareGPT, output length, max concurrency, prompts).
SET_F_SWEEPS: dict[str, tuple[tuple[int | None, int | None, int, int], ...]] = {
    # SongXP111/vllm-serving-lab scripts/benchmark.sh @d6bdedf4: one `docker compose` server,
    # 32 prompts per run: 128/128 at concurrency 1, 2, 4, 8, then 2048/128 at 1, 2, 4, 8
    "songxp": tuple((i, 128, c, 32) for i in (128, 2048) for c in (1, 2, 4, 8)),
    # ahmedwaleedmalik/k8s-llm-inference-platform benchmarks/job.yaml @221552cc: one Job
    # against one deployment, `for C in 1 2 4 8 16 32`, N = min(20 C, 320), seed 42
    "k8splat": tuple((256, 128, c, min(20 * c, 320)) for c in (1, 2, 4, 8, 16, 32)),
    # Raditya0902/vLLM-inference-benchmarking-harness benchmarks/run_matrix.sh @9dc807b7: one
    # server per config, the same 100 ShareGPT prompts at concurrency 1, 4, 8, 16, 32
    "raditya": tuple((None, None, c, 100) for c in (1, 4, 8, 16, 32)),
}


def _set_f_earlier_runs(
    record: dict[str, Any], workload: WorkloadSpec, notes: list[str]
) -> tuple[WorkloadSpec, ...]:
    """The runs before this one on the same server (SET_F_SWEEPS), then the client's test
    request (prompt 0), as `_earlier_runs` reads dennislee22's logged history."""
    w, source = record["workload"], record["id"].split("-")[1]
    sweep = SET_F_SWEEPS.get(source, ())
    here = (w.get("random_input_len"), w.get("random_output_len"), w.get("max_concurrency"))
    position = next(
        (k for k, run in enumerate(sweep) if run[:3] == here and run[3] == w["num_prompts"]),
        None,
    )
    earlier: list[WorkloadSpec] = []
    if sweep and position is None:
        notes.append("run not found in the source's sweep order: prefix cache starts cold")
    for prompt, output, concurrency, count in sweep[:position] if position else ():
        run = replace(workload, max_concurrency=concurrency, num_prompts=count)
        if prompt is not None and output is not None:
            # the same chat-template overhead as this run's prompts
            extra = workload.input_len - int(w["random_input_len"])
            run = replace(run, input_len=prompt + extra, output_len=output, max_tokens=output)
        earlier.append(run)
    if earlier:
        notes.append(
            f"{len(earlier)} earlier run(s) on the same server, same seed: their prompts start "
            "cached (the source's run order)"
        )
    elif sweep:
        notes.append("first run of the source's sweep: prefix cache assumed cold before it")
    elif source == "vob":
        # src/vob/cli.py _run_one: "Launch server -> telemetry -> bench -> reduce -> store one
        # cell"; src/vob/server.py warm_up sends two 8-token "Warm up." completions first
        notes.append("a server launched per run (src/vob/cli.py), 2 tiny warm-ups: no earlier runs")
    elif not w.get("warm_prefix_replay"):
        notes.append("runs before this one on its server not stated: prefix cache starts cold")
    notes.append("the client's test request (prompt 0) runs first: prompt 0 starts cached")
    return (*earlier, replace(workload, num_prompts=1))


def _set_f_workload(record: dict[str, Any], notes: list[str]) -> WorkloadSpec | str:
    """What the client sent, or why it cannot be read (a Skipped reason)."""
    w, m = record["workload"], record["metrics"]
    sent = int(w["num_prompts"])
    done = int(m.get("completed") or sent)
    load: dict[str, Any] = {
        "num_prompts": sent,
        "request_rate": rate(w),
        "max_concurrency": w.get("max_concurrency"),
        "burstiness": float(w.get("burstiness") or 1.0),
    }
    chat = w.get("backend") == "openai-chat"
    dataset = str(w["dataset"])
    if dataset == "random":
        max_tokens = int(w["random_output_len"])
        prompt = int(w["random_input_len"])
        if m.get("total_input_tokens"):
            # what the server counted: the chat template's tokens included
            prompt = round(m["total_input_tokens"] / done)
            notes.append(f"prompt {prompt} tokens per request (total_input_tokens / completed)")
        elif chat:
            notes.append(CHAT_NOTE)
        output = max_tokens
        if w.get("ignore_eos"):
            notes.append("output = max_tokens (--ignore-eos)")
        elif m.get("total_output_tokens"):
            output = min(max_tokens, round(m["total_output_tokens"] / done))
            notes.append("output: the run's tokens per request (total_output_tokens / completed)")
        else:
            notes.append("--ignore-eos not passed: every request assumed to reach max_tokens")
        notes.append("vLLM's random prompts (range ratio 0: every prompt the same length)")
        return WorkloadSpec(
            "random", input_len=prompt, output_len=max(output, 1), max_tokens=max_tokens, **load
        )
    if not dataset.startswith("sharegpt"):
        return f"dataset {dataset}: no set-f reader for it"
    if "copies of one" in dataset:
        # wjj's "agent" file: one conversation repeated, its timestamp first (SERVING_SOURCES_f)
        prompt = round(m["total_input_tokens"] / done)
        output = round(m["total_output_tokens"] / done)
        notes.append(
            f"100 copies of one ShareGPT turn: every prompt {prompt} tokens, every answer "
            f"{output} (the run's totals / completed; max_tokens = the dataset's reply)"
        )
        if "different date" in dataset:
            notes.append(
                "dynamic: each copy starts with its own date, so no prompt shares its first "
                "16-token block with another: the prefix cache finds no hits (distinct prompts)"
            )
        else:
            notes.append("static: identical prompts, prefix caching off (nothing reused)")
        return WorkloadSpec(
            "random", input_len=prompt, output_len=output, max_tokens=output, **load
        )
    if m.get("total_input_tokens") and m.get("total_output_tokens"):
        prompt = round(m["total_input_tokens"] / done)
        output = round(m["total_output_tokens"] / done)
        notes.append("ShareGPT lengths synthetic with the run's mean prompt and output tokens")
        if chat:
            notes.append("chat endpoint: prompt totals include the template (counted as sent)")
    elif "llama-3" in model_name(record).lower() and sent == 100 and not w.get("seed"):
        prompt, output = SHAREGPT_100_SEED0_LLAMA3
        notes.append(
            "ShareGPT totals not published: the same 100 prompts (seed 0, Llama 3 tokenizer) "
            "as zhjunqin-3090-llama3-8b-base-rr1-n100 sent, 229 tokens each on average; "
            "output 218 (Llama-3-8B-Instruct's answers there, assumed)"
        )
    else:
        return "ShareGPT token totals not published (prompt and output lengths unknown)"
    if w.get("ignore_eos"):
        notes.append("--ignore-eos: each answer is the dataset reply's length")
    return WorkloadSpec("sharegpt", input_len=prompt, output_len=max(output, 1), **load)


def set_f(record: dict[str, Any], gpu: str) -> Case | Skipped:
    """Set f (unseen/serving_benchmarks_f.jsonl, SERVING_SOURCES_f.md): one layout for seven
    sources. The flags the record states, the release's defaults otherwise; the workload as
    sent (random, ShareGPT with the run's token totals, wjj's repeated turn); a warm replay
    starts with its prompts in the prefix cache."""
    f, w = record["server_flags"], record["workload"]
    source = record["id"].split("-")[1]
    notes: list[str] = ["unset flags: the release's defaults"]
    release = version(record.get("engine_version"))
    if release is None and source == "issei":
        release = ISSEI_RELEASE
        notes.append(
            "vLLM 0.25.0: commit 702f4814 is the v0.25.0 tag (the author's README pinned it), "
            "plus a phase-logging patch"
        )
    if release is None:
        return Skipped(record["id"], "vLLM release not stated")
    workload = _set_f_workload(record, notes)
    if isinstance(workload, str):
        return Skipped(record["id"], workload)
    env = f.get("env") or {}
    use_v1 = False if str(env.get("VLLM_USE_V1")) == "0" else None
    if use_v1 is False:
        notes.append("V0 engine (VLLM_USE_V1=0)")
    flags = VllmFlags(
        tensor_parallel_size=_tp(record),
        dtype=f.get("dtype"),
        max_model_len=f.get("max_model_len"),
        max_num_seqs=f.get("max_num_seqs"),
        max_num_batched_tokens=f.get("max_num_batched_tokens"),
        gpu_memory_utilization=f.get("gpu_memory_utilization"),
        kv_cache_dtype=f.get("kv_cache_dtype"),
        enable_prefix_caching=f.get("enable_prefix_caching"),
        enable_chunked_prefill=f.get("enable_chunked_prefill"),
    )
    if f.get("async_scheduling") is False:
        notes.append("--no-async-scheduling: the synchronous step loop kvwise models")
    if env.get("VLLM_PHASE_LOG_DIR") == "set":
        notes.append("phase logging on (the author's control: <= 3 % on TTFT p50): not modelled")
    if w.get("num_warmups"):
        left = (
            "nothing cached (prefix caching off)"
            if f.get("enable_prefix_caching") is False
            else "not simulated"
        )
        notes.append(f"{w['num_warmups']} warm-up requests before the run: {left}")
    warm = bool(w.get("warm_prefix_replay"))
    if warm:
        notes.append(
            "replay of the previous run's prompts on the same server: the prefix cache starts "
            "with them (their answers not cached)"
        )
    earlier: tuple[WorkloadSpec, ...] = ()
    if f.get("enable_prefix_caching") is not False:
        earlier = _set_f_earlier_runs(record, workload, notes)
    if "(" in str(record["model"]):
        notes.append(f"model: {str(record['model']).split(' (', 1)[1].rstrip(')')}")
    sent = int(w["num_prompts"])
    return Case(
        record["id"],
        source,
        gpu,
        model_name(record),
        release,
        flags,
        workload,
        measured(record["metrics"], sent),
        None,
        tuple(notes),
        warm_cache=warm,
        earlier_runs=earlier,
        vllm_use_v1=use_v1,
    )


READERS: dict[str, Callable[[dict[str, Any], str], Case | Skipped]] = {
    "gpustack-": gpustack,
    "dennislee22-": dennislee22,
    "livinfly-": livinfly,
    "zhjunqin-": zhjunqin,
    "lambdalabs-": lambdalabs,
    "cloudrift-": cloudrift,
    "kubeai-": kubeai,
    "vllm-issue-": vllm_thread,
    "vllm-pr-": vllm_thread,
    "do-gtc-": digitalocean,
    "e-": set_e,
    "f-": set_f,
}
