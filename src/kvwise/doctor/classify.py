"""Naming the root cause of a failed (or struggling) vLLM start-up, with the lines that show it.

Order of precedence: an error vLLM raised on purpose (its own start-up checks) names itself; a
CUDA out-of-memory error is placed at the start-up stage it happened in (traceback frames first,
then the last progress line before it) unless another process visibly held the memory; then the
host-RAM kills; then, while serving, requests over max_model_len (HTTP 400), preemption, a dead
engine and timeouts; a bare mention of "OOM" last.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvwise.doctor import explain, kinds, runtime, torch_oom
from kvwise.doctor.figures import GIB
from kvwise.doctor.parse import ParsedLog
from kvwise.doctor.signals import (
    PHASE_ORDER,
    STAGE_FRAMES,
    Hit,
    frames_after,
    frames_and_calls,
    frames_before,
    stage_of_frames,
)
from kvwise.doctor.text import LogLine

# a GPU holding this much before vLLM starts has something else on it (a CUDA context is < 1 GiB)
OTHER_PROCESS_MIN_BYTES = 2 * GIB
# ... and named in PyTorch's OOM message, this much makes it the cause (a desktop session's
# Xorg holds a few hundred MiB; that still counts in the fix's free memory, not as the cause)
OTHER_PROCESS_MIN_OOM_BYTES = GIB
# memory PyTorch's OOM message leaves unaccounted (total - free - this process - named ones):
# below this it is rounding of the figures it prints
UNACCOUNTED_MIN_BYTES = 256 * 2**20


@dataclass(frozen=True)
class Diagnosis:
    kind: str
    summary: str
    evidence: tuple[LogLine, ...]
    anchor: int | None  # line number of the failure; the configuration is read up to it
    stage: str | None = None  # start-up stage of an out-of-memory error


@dataclass(frozen=True)
class OtherProcess:
    held_bytes: int
    who: str
    lines: tuple[LogLine, ...]


def classify(parsed: ParsedLog) -> Diagnosis:
    for check in (
        _startup_error,
        _cuda_oom,
        _host_ram,
        _context_length,
        _preemption,
        _engine_dead,
        _timeout,
        _oom_mentioned,
    ):
        diagnosis = check(parsed)
        if diagnosis is not None:
            return diagnosis
    return _unknown(parsed)


def _first(parsed: ParsedLog, signal: str) -> Hit | None:
    hits = parsed.signals.get(signal, ())
    return hits[0] if hits else None


def _lines(*items: LogLine | Hit | None) -> tuple[LogLine, ...]:
    lines = [item.line if isinstance(item, Hit) else item for item in items if item is not None]
    unique: dict[str, LogLine] = {}
    for line in lines:
        unique.setdefault(line.message, line)
    return tuple(sorted(unique.values(), key=lambda line: line.number))


def _startup_error(parsed: ParsedLog) -> Diagnosis | None:
    for kind in (
        kinds.MAX_MODEL_LEN_EXCEEDS_KV_CACHE,
        kinds.NO_KV_CACHE_MEMORY,
        kinds.INSUFFICIENT_FREE_MEMORY,
        kinds.CUDA_OOM_SAMPLER_WARMUP,
    ):
        hit = _first(parsed, kind)
        if hit is not None:
            return _explained(parsed, kind, hit.line)
    blocks_line = _zero_or_negative_kv(parsed)
    if blocks_line is not None:
        return _explained(parsed, kinds.NO_KV_CACHE_MEMORY, blocks_line)
    disturbed = _first(parsed, "profiling_disturbed")
    if disturbed is not None:
        return Diagnosis(
            kinds.ANOTHER_PROCESS,
            "vLLM's memory profiling saw free memory change under it: another process on the "
            "GPU allocated or released memory while vLLM started.",
            _lines(disturbed),
            disturbed.line.number,
        )
    return None


def _zero_or_negative_kv(parsed: ParsedLog) -> LogLine | None:
    for name in ("num_gpu_blocks", "kv_cache_bytes"):
        for occurrence in parsed.figures.get(name, ()):
            if occurrence.value <= 0:
                return occurrence.line
    return None


def _explained(parsed: ParsedLog, kind: str, line: LogLine) -> Diagnosis:
    anchor = line.number
    # the lines that logged the figures, before the error line that may repeat them
    figure_lines = [
        parsed.figure_line(name, anchor - 1) for name in explain.FIGURES_FOR_KIND.get(kind, ())
    ]
    evidence = _lines(line, *(f for f in figure_lines if f is not None))
    summary = explain.summarize(kind, parsed, anchor)
    other = other_process(parsed, anchor)
    if other is not None and kind == kinds.INSUFFICIENT_FREE_MEMORY:
        summary += f" {_capitalized(other.who)} holds {other.held_bytes / GIB:.2f} GiB of it."
        evidence = _lines(*evidence, *other.lines)
    # vLLM's own OOM error at a stage: the sampler warm-up re-raises CUDA's with its message
    stage = "sampler_warmup" if kind == kinds.CUDA_OOM_SAMPLER_WARMUP else None
    return Diagnosis(kind, summary, evidence, anchor, stage)


def _capitalized(text: str) -> str:
    return text[:1].upper() + text[1:]


def _cuda_oom(parsed: ParsedLog) -> Diagnosis | None:
    hits = parsed.signals.get("cuda_oom", ())
    if not hits:
        return None
    anchor_hit = hits[0]
    anchor = anchor_hit.line.number
    if parsed.signals.get("pinned_memory"):
        pinned = _first(parsed, "pinned_memory")
        return _host(parsed, _lines(anchor_hit, pinned), "pinned host memory (swap space)")
    stage, stage_line = _oom_stage(parsed, anchor_hit)
    other = other_process(parsed, anchor)
    if other is not None:
        summary = explain.another_process(stage)
        summary += f" {_capitalized(other.who)} holds {other.held_bytes / GIB:.2f} GiB."
        evidence = _lines(anchor_hit, stage_line, *other.lines)
        return Diagnosis(kinds.ANOTHER_PROCESS, summary, evidence, anchor, stage)
    kind = kinds.KIND_OF_STAGE.get(stage or "", kinds.CUDA_OOM)
    summary = explain.summarize(kind, parsed, anchor)
    return Diagnosis(kind, summary, _lines(anchor_hit, stage_line), anchor, stage)


def _oom_stage(parsed: ParsedLog, hit: Hit) -> tuple[str | None, LogLine | None]:
    """Where the OOM happened: its traceback's frames, else the last stage vLLM reported."""
    for oom in parsed.signals.get("cuda_oom", ()):
        if "weights" in oom.line.message:  # "Failed to create unquantized linear weights: ..."
            return "weights", oom.line
        names = frames_before(parsed.log, oom.index) or frames_after(parsed.log, oom.index)
        stage = stage_of_frames(names)
        if stage is not None:
            return stage, _frame_line(parsed, oom.index, STAGE_FRAMES[stage])
    reached = _last_phase_before(parsed, hit.line)
    if reached is None:
        return None, None
    phase, line = reached
    return kinds.stage_after_phase(phase, parsed.engine), line


def _frame_line(parsed: ParsedLog, index: int, words: tuple[str, ...]) -> LogLine | None:
    """The traceback frame that shows the stage, the most telling function first."""
    window = parsed.log.lines[max(0, index - 400) : index + 1]
    for word in words:
        for line in reversed(window):
            if line.message.endswith(f"in {word}"):
                return line
    return None


def _stage_line(parsed: ParsedLog, start: int, words: tuple[str, ...]) -> LogLine | None:
    """The traceback line (a frame or the call in it) that shows the stage."""
    window = parsed.log.lines[start : start + 400]
    for word in words:
        for line in window:
            if line.message.endswith(f"in {word}") or f"{word}(" in line.message:
                return line
    return None


def _last_phase_before(parsed: ParsedLog, line: LogLine) -> tuple[str, LogLine] | None:
    """The last stage vLLM reported before `line`, by vLLM's timestamps when every line has
    one (processes interleave their output), else by position."""
    reached = [(phase, seen) for phase in PHASE_ORDER for seen in parsed.phases.get(phase, ())]
    timed = line.stamp is not None and all(seen.stamp for _, seen in reached)

    def order(seen: LogLine) -> tuple[str, int]:
        return ((seen.stamp or "") if timed else "", seen.number)

    earlier = [(phase, seen) for phase, seen in reached if order(seen) <= order(line)]
    return max(earlier, key=lambda item: order(item[1])) if earlier else None


def other_process(parsed: ParsedLog, anchor: int) -> OtherProcess | None:
    """Memory held on the GPU by something other than this vLLM instance, when the log shows it."""
    if parsed.smi.processes:
        held = sum(p.used_bytes for p in parsed.smi.processes)
        if held >= GIB:
            names = ", ".join(f"{p.name} (pid {p.pid})" for p in parsed.smi.processes[:3])
            vllm = any(p.looks_like_vllm for p in parsed.smi.processes)
            who = f"an earlier vLLM instance ({names})" if vllm else f"other processes: {names}"
            return OtherProcess(held, who, ())
    smi_used = sum(gpu.used_bytes for gpu in parsed.smi.gpus[:1])
    if smi_used >= OTHER_PROCESS_MIN_BYTES:
        return OtherProcess(smi_used, "another process (nvidia-smi)", ())
    return _other_from_log(parsed, anchor)


def _other_from_log(parsed: ParsedLog, anchor: int) -> OtherProcess | None:
    total = parsed.figure("total_bytes", anchor)
    free = parsed.figure("free_at_startup_bytes", anchor)
    if total is not None and free is not None and total - free >= OTHER_PROCESS_MIN_BYTES:
        line = parsed.figure_line("free_at_startup_bytes", anchor)
        return OtherProcess(int(total - free), "something else on the GPU", _lines(line))
    others = oom_others(parsed)
    if others is not None and others.held_bytes >= OTHER_PROCESS_MIN_OOM_BYTES:
        return others
    return None


def oom_others(parsed: ParsedLog) -> OtherProcess | None:
    """Memory other processes hold, from the first PyTorch OOM message that shows any: the
    pids it names, and what neither it nor this process accounts for (other containers)."""
    for hit in parsed.signals.get("cuda_oom", ()):
        named = torch_oom.others(hit.line.message)
        hidden = torch_oom.unaccounted(hit.line.message)
        if not named and hidden < UNACCOUNTED_MIN_BYTES:
            continue
        who = [f"pid {pid}" for pid in named]
        if hidden >= UNACCOUNTED_MIN_BYTES:
            who.append(f"{hidden / GIB:.2f} GiB no listed process accounts for")
            named = named | {0: hidden}
        plural = "processes" if len(named) > 1 else "process"
        return OtherProcess(
            int(sum(named.values())), f"another {plural} ({', '.join(who)})", _lines(hit)
        )
    return None


def _host(parsed: ParsedLog, evidence: tuple[LogLine, ...], what: str) -> Diagnosis:
    anchor = evidence[0].number if evidence else None
    summary = explain.summarize_host(parsed, what, anchor)
    return Diagnosis(kinds.HOST_RAM, summary, evidence, anchor)


def _host_ram(parsed: ParsedLog) -> Diagnosis | None:
    hits = parsed.signals.get("host_ram", ())
    shm = parsed.signals.get("shared_memory", ())
    if not hits and not shm:
        return None
    if shm and not hits:
        return _host(parsed, _lines(*shm[:2]), "shared memory (/dev/shm)")
    swap = _first(parsed, "swap_space_warning")
    loading = _last_phase_before(parsed, hits[0].line)
    what = "RAM" if loading is None else f"RAM (stage: {loading[0].replace('_', ' ')})"
    return _host(parsed, _lines(*hits[:3], swap), what)


def _preemption(parsed: ParsedLog) -> Diagnosis | None:
    hits = parsed.signals.get("preemption", ())
    full = explain.full_kv_stats(parsed)
    middle = parsed.log.middle_count("preempted_v0")
    if not hits and full is None and not middle:
        return None
    evidence = _lines(*hits[:2], *hits[-1:], full)
    anchor = evidence[-1].number if evidence else None
    return Diagnosis(kinds.PREEMPTION, explain.summarize_preemption(parsed), evidence, anchor)


def _context_length(parsed: ParsedLog) -> Diagnosis | None:
    hits = parsed.signals.get("context_length", ())
    if not hits:
        return None
    evidence = _lines(hits[0], hits[-1])
    summary = runtime.summarize_over_long(parsed)
    return Diagnosis(kinds.CONTEXT_LENGTH, summary, evidence, hits[0].line.number)


def _engine_dead(parsed: ParsedLog) -> Diagnosis | None:
    hit = _first(parsed, "engine_dead")
    if hit is None:
        return None
    summary = runtime.summarize_engine_dead(parsed)
    return Diagnosis(kinds.ENGINE_DEAD, summary, _lines(hit), hit.line.number)


def _timeout(parsed: ParsedLog) -> Diagnosis | None:
    hits = parsed.signals.get("request_timeout", ())
    if not hits:
        return None
    summary = runtime.summarize_timeout(parsed)
    return Diagnosis(kinds.REQUEST_TIMEOUT, summary, _lines(hits[0]), hits[0].line.number)


def _oom_mentioned(parsed: ParsedLog) -> Diagnosis | None:
    hits = parsed.signals.get("oom_mentioned", ())
    if not hits:
        return None
    stage, stage_line = _reported_oom_stage(parsed)
    if stage is None:
        summary = (
            "The text reports running out of memory but contains no error message from vLLM or "
            "PyTorch to place it; the stage is unknown."
        )
        return Diagnosis(kinds.CUDA_OOM, summary, _lines(*hits[:3]), hits[0].line.number)
    kind = kinds.KIND_OF_STAGE.get(stage, kinds.CUDA_OOM)
    anchor = stage_line.number if stage_line is not None else hits[0].line.number
    summary = (
        f"{explain.summarize(kind, parsed, anchor)} (The text reports running out of memory "
        "without PyTorch's message; the stage is read from the log pasted with it.)"
    )
    return Diagnosis(kind, summary, _lines(*hits[:2], stage_line), anchor, stage)


def _reported_oom_stage(parsed: ParsedLog) -> tuple[str | None, LogLine | None]:
    """Where an OOM the user reports (no error line pasted) happened: a traceback pasted with
    it, else the stage after the last one the log reached (the log stops where vLLM died)."""
    for index, line in enumerate(parsed.log.lines):
        if "Traceback" in line.message or 'File "' in line.message:
            stage = stage_of_frames(frames_and_calls(parsed.log, index))
            if stage is not None:
                return stage, _stage_line(parsed, index, STAGE_FRAMES[stage])
            break
    last = parsed.log.lines[-1] if parsed.log.lines else None
    reached = None if last is None else _last_phase_before(parsed, last)
    if reached is None:
        return None, None
    phase, line = reached
    stage = kinds.stage_after_phase(phase, parsed.engine)
    # a log that reached serving says nothing of a start-up OOM the text reports
    return (None, None) if stage in (None, "runtime") else (stage, line)


def _unknown(parsed: ParsedLog) -> Diagnosis:
    errors = [
        line
        for line in parsed.log.lines
        if line.level in ("ERROR", "CRITICAL") or explain.looks_like_exception(line.message)
    ]
    return Diagnosis(kinds.UNKNOWN, explain.summarize_unknown(parsed), _lines(*errors[-2:]), None)
