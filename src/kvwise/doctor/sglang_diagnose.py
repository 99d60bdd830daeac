"""`kvwise doctor` on an SGLang log: the root cause in SGLang's terms, with the lines that show it.

Kinds are the doctor's vocabulary (kinds.py): SGLang's "Not enough memory" (and 0.5.14+'s
"Loaded weights leave no GPU memory for the KV cache") is `no_kv_cache_memory`; an out-of-memory
error while capturing CUDA graphs is `cuda_oom_cuda_graph_capture`; "Input length (N tokens)
exceeds the maximum allowed length (M tokens)" is `context_length_exceeded`; "KV cache pool is
full. Retract requests." is `preemption`. The fix is re-planned with `plan_sglang`
(sglang_fix.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from kvwise.doctor import kinds
from kvwise.doctor.sglang_log import SglangLog
from kvwise.doctor.signals import SIGNALS
from kvwise.doctor.text import LogLine

NOT_ENOUGH = (
    r"Not enough memory\. Please try to increase --mem-fraction-static|"
    r"Loaded weights leave no GPU memory for the KV cache|"
    r"is larger than the profiled value -\d+|Memory pool size is too small"
)
OOM = r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory"
INPUT_TOO_LONG = (
    r"Input length \((\d+) tokens\) exceeds the maximum allowed length \((\d+) tokens\)"
)
RETRACT = r"KV cache pool is full\. Retract requests"
# a user saying OOM without pasting the error: the vLLM doctor's wordings (signals.py)
OOM_REPORTED = "|".join(f"(?:{p})" for p in SIGNALS["oom_mentioned"])


@dataclass(frozen=True)
class SglangDiagnosis:
    kind: str
    summary: str
    evidence: tuple[LogLine, ...]
    prompt_tokens: int | None = None  # an over-long request's length, when the log shows it


def _not_enough(log: SglangLog) -> SglangDiagnosis | None:
    hit = log.first(NOT_ENOUGH)
    if hit is None:
        return None
    fraction = log.arg_float("mem_fraction_static")
    stated = f" at --mem-fraction-static {fraction}" if fraction else ""
    weights = log.figures.get("weights_gib")
    loaded = f" (the weights took {weights:.2f} GiB per GPU)" if weights else ""
    summary = (
        f"SGLang refused to start: after loading the weights{loaded}, nothing of the static "
        f"pool{stated} was left for the KV cache. mem_fraction_static is the share of free "
        "memory for weights + KV cache, so the fix is a larger fraction (or less weight per GPU)."
    )
    return SglangDiagnosis(kinds.NO_KV_CACHE_MEMORY, summary, (hit[0],))


def _graph_oom(log: SglangLog) -> SglangDiagnosis | None:
    oom = log.first(OOM)
    if oom is None:
        return None
    capture = log.first(r"Capture cuda graph (?:begin|failed)")
    done = log.first(r"Capture cuda graph end")
    in_capture = "Capture cuda graph failed" in oom[1].string[oom[1].start() - 200 : oom[1].end()]
    if not in_capture and (
        capture is None or done is not None or capture[0].number > oom[0].number
    ):
        return None
    summary = (
        "SGLang ran out of GPU memory while capturing CUDA graphs, after the KV pool was "
        "allocated: the graphs (up to --cuda-graph-max-bs) and activations live outside "
        "mem_fraction_static, and the fraction left them too little."
    )
    lines = tuple(x[0] for x in (capture, oom) if x is not None)
    return SglangDiagnosis(kinds.CUDA_OOM_CUDA_GRAPH_CAPTURE, summary, lines)


def _input_too_long(log: SglangLog) -> SglangDiagnosis | None:
    hit = log.first(INPUT_TOO_LONG)
    if hit is None:
        return None
    asked, allowed = int(hit[1].group(1)), int(hit[1].group(2))
    pool = log.figures.get("max_total_num_tokens")
    cause = (
        f"the KV pool ({int(pool):,} tokens) caps it below the context length"
        if pool and allowed >= pool - 6
        else "it is the context length less SGLang's 6 reserved tokens (or a smaller pool)"
    )
    summary = (
        f"SGLang rejected a {asked:,}-token prompt: the longest it accepts is {allowed:,} tokens; "
        f"{cause}."
    )
    return SglangDiagnosis(kinds.CONTEXT_LENGTH, summary, (hit[0],), prompt_tokens=asked)


def _other_oom(log: SglangLog) -> SglangDiagnosis | None:
    hit = log.first(OOM)
    if hit is None:
        return None
    served = log.first(r"max_total_num_tokens=|The server is fired up")
    kind = kinds.CUDA_OOM_RUNTIME if served and served[0].number < hit[0].number else kinds.CUDA_OOM
    summary = (
        "SGLang ran out of GPU memory outside its static pool (activations of a prefill chunk "
        "or a decode batch): SGLang's tuning guide lowers --chunked-prefill-size for prefill, "
        "--max-running-requests for decode, or --mem-fraction-static for both."
    )
    return SglangDiagnosis(kind, summary, (hit[0],))


def _retract(log: SglangLog) -> SglangDiagnosis | None:
    hit = log.first(RETRACT)
    if hit is None:
        return None
    summary = (
        "SGLang's KV pool filled while serving and it retracted running requests to the "
        "queue (they are recomputed later): the pool is small for this load."
    )
    return SglangDiagnosis(kinds.PREEMPTION, summary, (hit[0],))


def _oom_reported(log: SglangLog) -> SglangDiagnosis | None:
    hit = log.first(OOM_REPORTED)
    if hit is None:
        return None
    summary = (
        "The text reports running out of memory but contains no error message from SGLang or "
        "PyTorch to place it; the stage is unknown."
    )
    return SglangDiagnosis(kinds.CUDA_OOM, summary, (hit[0],))


def classify_sglang(log: SglangLog) -> SglangDiagnosis:
    for rule in (_not_enough, _graph_oom, _input_too_long, _other_oom, _retract, _oom_reported):
        found = rule(log)
        if found is not None:
            return found
    started = log.first(r"max_total_num_tokens=(\d+)")
    if started is not None:
        summary = f"SGLang started: its KV pool holds {int(started[1].group(1)):,} tokens."
        return SglangDiagnosis(kinds.UNKNOWN, summary, (started[0],))
    return SglangDiagnosis(kinds.UNKNOWN, "No SGLang error this doctor knows is in the log.", ())
