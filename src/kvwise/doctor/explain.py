"""One or two sentences per root cause, with the log's own numbers filled in."""

from __future__ import annotations

import re

from kvwise.doctor import kinds
from kvwise.doctor.figures import GIB
from kvwise.doctor.parse import ParsedLog
from kvwise.doctor.text import LogLine

# figures quoted as evidence next to each kind's error line
FIGURES_FOR_KIND = {
    kinds.MAX_MODEL_LEN_EXCEEDS_KV_CACHE: ("kv_cache_bytes", "kv_cache_tokens", "weights_bytes"),
    kinds.NO_KV_CACHE_MEMORY: (
        "budget_bytes",
        "weights_bytes",
        "activation_peak_bytes",
        "num_gpu_blocks",
    ),
    kinds.INSUFFICIENT_FREE_MEMORY: (),
    kinds.CUDA_OOM_SAMPLER_WARMUP: ("kv_cache_bytes", "cuda_graph_bytes"),
}
_STATS = re.compile(
    r"Running: (?P<running>\d+) reqs,(?: Swapped: (?P<swapped>\d+) reqs,)? "
    r"(?:Pending|Waiting): (?P<waiting>\d+) reqs,(?: [A-Za-z ]+: \d+,)*"  # V1: "Preemptions: 3,"
    r"(?: GPU KV cache usage: (?P<usage>[\d.]+)%)?"
)
_EXCEPTION = re.compile(r"^(?:[\w.]+(?:Error|Exception|Interrupt)|AssertionError)\b:?")


def _gib(value: float) -> str:
    return f"{value / GIB:.2f} GiB"


def _num(value: float) -> str:
    return f"{int(value):,}"


def _around(text: str, value: float | None, fmt: str = "({})") -> str:
    """` (4.71 GiB)` after `text` when the value is known, else `text` alone (no placeholder)."""
    return text if value is None else f"{text} {fmt.format(_gib(value))}"


def _sized(value: float | None, label: str, fallback: str) -> str:
    return fallback if value is None else f"{label} {_gib(value)}"


def summarize(kind: str, parsed: ParsedLog, anchor: int | None) -> str:
    writer = _WRITERS.get(kind, _generic_oom)
    return writer(parsed, anchor)


def _max_model_len(parsed: ParsedLog, at: int | None) -> str:
    length = parsed.flags(at).get("max_model_len")
    size = "max_model_len" if length is None else f"max_model_len={_num(length)}"
    text = f"vLLM refused to start: one request of {size} tokens does not fit the KV cache"
    kv, tokens = parsed.figure("kv_cache_bytes", at), parsed.figure("kv_cache_tokens", at)
    if kv is not None or tokens is not None:
        parts = [
            p
            for p in (
                _gib(kv) if kv is not None else None,
                f"{_num(tokens)} tokens" if tokens is not None else None,
            )
            if p
        ]
        text += f" ({', '.join(parts)})"
    needed = parsed.figure("kv_needed_bytes", at)
    if needed is not None:
        text += f"; that request alone needs {_gib(needed)}"
    estimate = parsed.figure("estimated_max_model_len", at)
    if estimate is not None:
        text += f". vLLM estimates the longest max_model_len that fits at {_num(estimate)}"
    return text + "."


def _no_kv(parsed: ParsedLog, at: int | None) -> str:
    budget = parsed.figure("budget_bytes", at)
    util = parsed.flags(at).get("gpu_memory_utilization")
    parts = [
        _sized(parsed.figure(name, at), label, fallback)
        for name, label, fallback in (
            ("weights_bytes", "weights", "the weights"),
            ("activation_peak_bytes", "activation peak", "the profile run's activation peak"),
            ("non_torch_bytes", "non-torch memory", "non-torch memory"),
        )
    ]
    where = "the gpu_memory_utilization budget"
    if util is not None:
        where += f" ({util:g} of the GPU" + (f" = {_gib(budget)})" if budget else ")")
    return (
        f"vLLM refused to start: {', '.join(parts)} took all of {where}, leaving no memory "
        "for the KV cache."
    )


def _insufficient_free(parsed: ParsedLog, at: int | None) -> str:
    free, total = parsed.figure("free_at_startup_bytes", at), parsed.figure("total_bytes", at)
    util, budget = parsed.flags(at).get("gpu_memory_utilization"), parsed.figure("budget_bytes", at)
    seen = "less memory was free on the GPU at start-up"
    if free is not None:
        seen = f"only {_gib(free)}" + (f" of {_gib(total)}" if total is not None else "")
        seen += " was free on the GPU at start-up"
    asked = "gpu_memory_utilization" + (f"={util:g}" if util is not None else "")
    return (
        f"vLLM refused to start: {seen}, less than {_around(asked + ' asks for', budget)}; "
        "gpu_memory_utilization is a share of the whole GPU, so memory held by anything else "
        "must fit beside it."
    )


def _sampler(parsed: ParsedLog, at: int | None) -> str:
    seqs = parsed.flags(at).get("max_num_seqs")
    dummies = "max_num_seqs dummy requests" if seqs is None else f"{_num(seqs)} dummy requests"
    kv = _around("the KV cache", parsed.figure("kv_cache_bytes", at))
    return (
        f"CUDA ran out of memory while vLLM warmed up the sampler with {dummies} "
        f"(max_num_seqs rows of vocabulary-sized logits), after {kv} had taken the rest of the "
        "budget."
    )


def _capture(parsed: ParsedLog, at: int | None) -> str:
    kv = parsed.figure("kv_cache_bytes", at)
    text = "CUDA ran out of memory while capturing CUDA graphs"
    if kv is not None:
        text += f", after the KV cache ({_gib(kv)}) was allocated"
    return text + (
        ": the graph pool needs memory that gpu_memory_utilization did not leave (older vLLM "
        "puts it on top of the budget; newer vLLM estimates it, sometimes too low)."
    )


def _kv_alloc(parsed: ParsedLog, at: int | None) -> str:
    kv = _around("the KV cache", parsed.figure("kv_cache_bytes", at))
    return (
        f"CUDA ran out of memory while allocating {kv}: less memory was free than the profile "
        "run measured, usually because something else took GPU memory meanwhile."
    )


def _profile_run(parsed: ParsedLog, at: int | None) -> str:
    weights = parsed.figure("weights_bytes", at)
    loaded = f" after the weights ({_gib(weights)} per GPU) loaded" if weights is not None else ""
    return (
        f"CUDA ran out of memory in the profile run{loaded}: the dummy forward pass over "
        "max_num_batched_tokens tokens (max_model_len without chunked prefill) needs more "
        "activation memory than the GPU has left."
    )


def _weights(parsed: ParsedLog, at: int | None) -> str:
    total = parsed.figure("total_bytes", at)
    on = f" ({_gib(total)})" if total is not None else ""
    return f"CUDA ran out of memory while loading the weights: they do not fit the GPU{on}."


def _runtime(parsed: ParsedLog, at: int | None) -> str:
    return (
        "CUDA ran out of memory after start-up, while serving: a batch needed more memory than "
        "the budget leaves outside the KV cache."
    )


def _another(parsed: ParsedLog, at: int | None) -> str:
    return another_process(None)


# where an out-of-memory error happened, in words (stage names as in kinds.KIND_OF_STAGE)
STAGE_WORDS = {
    "weights": "while loading the weights",
    "profile_run": "in the profile run",
    "kv_cache_allocation": "while allocating the KV cache",
    "cuda_graph_capture": "while capturing CUDA graphs",
    "sampler_warmup": "while warming up the sampler",
    "runtime": "while serving",
}


def another_process(stage: str | None) -> str:
    where = f" {STAGE_WORDS[stage]}" if stage in STAGE_WORDS else ""
    return f"CUDA ran out of memory{where} while another process held memory on the same GPU."


def _generic_oom(parsed: ParsedLog, at: int | None) -> str:
    return "CUDA ran out of memory; the log does not show at which start-up stage."


_WRITERS = {
    kinds.MAX_MODEL_LEN_EXCEEDS_KV_CACHE: _max_model_len,
    kinds.NO_KV_CACHE_MEMORY: _no_kv,
    kinds.INSUFFICIENT_FREE_MEMORY: _insufficient_free,
    kinds.CUDA_OOM_SAMPLER_WARMUP: _sampler,
    kinds.CUDA_OOM_CUDA_GRAPH_CAPTURE: _capture,
    kinds.CUDA_OOM_KV_CACHE_ALLOCATION: _kv_alloc,
    kinds.CUDA_OOM_PROFILE_RUN: _profile_run,
    kinds.WEIGHTS_EXCEED_MEMORY: _weights,
    kinds.CUDA_OOM_RUNTIME: _runtime,
    kinds.ANOTHER_PROCESS: _another,
}


def summarize_host(parsed: ParsedLog, what: str, at: int | None) -> str:
    text = f"The process was killed for lack of host memory ({what}), not GPU memory."
    if parsed.signals.get("swap_space_warning") or "swap" in what:
        text += " V0 pins --swap-space GiB of host RAM per GPU for preempted requests."
    return text


def full_kv_stats(parsed: ParsedLog) -> LogLine | None:
    """The first stats line with the KV cache (nearly) full while requests wait."""
    for line in parsed.log.lines:
        match = _STATS.search(line.message)
        if not match or not match["usage"] or float(match["usage"]) < 99.0:
            continue
        if int(match["waiting"]) > 0 or int(match["swapped"] or 0) > 0:
            return line
    return None


def summarize_preemption(parsed: ParsedLog) -> str:
    hits = parsed.signals.get("preemption", ())
    messages = [hit.line.message for hit in hits]
    # V0's warning carries the running total; V1's stats line the count since the last line
    totals = [int(n) for m in messages for n in re.findall(r"cumulative_preemption=(\d+)", m)]
    per_interval = [int(n) for m in messages for n in re.findall(r"Preemptions: (\d+)", m)]
    count = max(totals) if totals else sum(per_interval)
    if not totals and not per_interval:
        count = len(hits) + parsed.log.middle_count("preempted_v0")
    text = "vLLM started but ran out of KV cache while serving"
    if count:
        text += f" ({count:,} preemptions logged)"
    elif full_kv_stats(parsed) is not None:
        text += " (KV cache usage at 100% with requests waiting)"
    return text + (
        ": requests were preempted and their KV recomputed later, which is the latency cliff "
        "(time to first token jumps from fractions of a second to many seconds)."
    )


def running_at_full_kv(parsed: ParsedLog) -> int | None:
    """Requests running when the KV cache first filled up with others waiting."""
    line = full_kv_stats(parsed)
    match = None if line is None else _STATS.search(line.message)
    return None if match is None else int(match["running"])


def looks_like_exception(message: str) -> bool:
    return bool(_EXCEPTION.match(message))


def summarize_unknown(parsed: ParsedLog) -> str:
    other = _other_known_error(parsed)
    started = parsed.phases.get("serving") or parsed.phases.get("captured")
    kv, tokens = parsed.figure("kv_cache_bytes"), parsed.figure("kv_cache_tokens")
    if started and not other:
        sized = f" with a {_gib(kv)} KV cache" if kv is not None else ""
        sized += f" ({_num(tokens)} tokens)" if tokens is not None else ""
        return f"No failure found: vLLM started{sized} and shows no memory error."
    return f"No memory failure recognised{other}. Found: {_found(parsed)}."


def _found(parsed: ParsedLog) -> str:
    found = []
    if parsed.version:
        found.append(f"vLLM {parsed.version}")
    if parsed.engine:
        found.append(f"engine {parsed.engine}")
    if parsed.model():
        found.append(f"model {parsed.model()}")
    flags = parsed.flags()
    if flags:
        found.append(f"{len(flags)} flag(s)")
    figures = [name.removesuffix("_bytes") for name in parsed.figures]
    if figures:
        found.append("figures: " + ", ".join(sorted(figures)[:6]))
    return "; ".join(found) if found else "nothing vLLM-specific"


def _other_known_error(parsed: ParsedLog) -> str:
    if parsed.signals.get("max_model_len_exceeds_model"):
        return (
            " (max_model_len is larger than the model's own limit in config.json: lower it, "
            "or set VLLM_ALLOW_LONG_MAX_MODEL_LEN=1)"
        )
    if parsed.signals.get("dtype_unsupported"):
        return " (this GPU has no bfloat16: add --dtype half)"
    if parsed.log.is_binary:
        return " (the input looks binary, not a text log)"
    return ""


# what to do when no flag change can be computed (the model or GPU unknown, no figures logged)
ADVICE = {
    kinds.MAX_MODEL_LEN_EXCEEDS_KV_CACHE: (
        "lower --max-model-len to what the KV cache holds (vLLM's estimate when it printed one), "
        "or raise --gpu-memory-utilization, or use --kv-cache-dtype fp8"
    ),
    kinds.NO_KV_CACHE_MEMORY: (
        "raise --gpu-memory-utilization: it caps everything vLLM uses (weights, activations, "
        "CUDA graphs and the KV cache), not only the KV cache; or lower --max-num-seqs / "
        "--max-num-batched-tokens to shrink the profile run's activation peak"
    ),
    kinds.INSUFFICIENT_FREE_MEMORY: (
        "stop what else holds GPU memory (nvidia-smi lists it), or lower "
        "--gpu-memory-utilization below the free share of the GPU"
    ),
    kinds.WEIGHTS_EXCEED_MEMORY: (
        "the weights do not fit one GPU: use a quantized checkpoint (AWQ/GPTQ/FP8), more GPUs "
        "with --tensor-parallel-size, or --cpu-offload-gb"
    ),
    kinds.CUDA_OOM_SAMPLER_WARMUP: "lower --max-num-seqs, or --gpu-memory-utilization a little",
    kinds.CUDA_OOM_CUDA_GRAPH_CAPTURE: (
        "lower --gpu-memory-utilization by the graph memory (0.5-2 GiB), or --enforce-eager"
    ),
    kinds.CUDA_OOM_PROFILE_RUN: "lower --max-num-batched-tokens (or --max-model-len in V0)",
    kinds.CUDA_OOM_KV_CACHE_ALLOCATION: (
        "lower --gpu-memory-utilization; check nvidia-smi for other processes"
    ),
    kinds.CUDA_OOM_RUNTIME: (
        "lower --gpu-memory-utilization a little (more headroom for activations) or "
        "--max-num-batched-tokens"
    ),
    kinds.ANOTHER_PROCESS: (
        "stop the other process, or lower --gpu-memory-utilization so that this instance fits "
        "beside it"
    ),
    kinds.HOST_RAM: (
        "give the machine or container more RAM (Docker/Kubernetes memory limit), load "
        "safetensors checkpoints (memory-mapped), and in V0 lower --swap-space; for /dev/shm "
        "errors run Docker with --ipc=host or a larger --shm-size"
    ),
    kinds.PREEMPTION: (
        "grow the KV pool (--kv-cache-dtype fp8, a higher --gpu-memory-utilization) or admit "
        "fewer requests at once (--max-num-seqs, or kvwise serve's KV-token admission)"
    ),
    kinds.CONTEXT_LENGTH: (
        "trim the history each request carries to fit max_model_len, ask for fewer completion "
        "tokens, or raise --max-model-len where the model and the GPU hold it (kvwise plan "
        "says)"
    ),
    kinds.ENGINE_DEAD: (
        "the cause is the first traceback above the first EngineDeadError: run kvwise doctor "
        "on the whole log from start-up; a CUDA out-of-memory error while serving is fixed by "
        "a little less --gpu-memory-utilization or --max-num-batched-tokens"
    ),
    kinds.REQUEST_TIMEOUT: (
        "admit fewer requests at once (--max-num-seqs) or grow the KV pool, so that requests "
        "do not wait or get preempted past the client's timeout; for the engine's own "
        "watchdog, look for the step that hung (a huge prefill, a stuck collective)"
    ),
    kinds.CUDA_OOM: (
        "the log does not show where memory ran out: run `kvwise doctor` on the whole log from "
        "start-up (vLLM's memory lines and the traceback), and `kvwise plan` with the same flags "
        "to see where the memory goes; lowering --gpu-memory-utilization blindly shrinks the KV "
        "cache and helps only if something outside vLLM's budget ran out"
    ),
}
