"""Turning whatever a user pastes into clean log lines.

Logs arrive with ANSI colours, Docker/Kubernetes/journald prefixes, Ray and worker tags such as
`(EngineCore_DP0 pid=123)`, vLLM's own `INFO 12-13 19:54:18 [file.py:243]` header, `[rank0]:`,
progress bars that redraw with carriage returns, and sometimes every newline collapsed into a
space (GitHub issue bodies). `read_log` returns one `LogLine` per logical line with the prefixes
removed; `LogText` keeps them joined so that a message wrapped over several lines can still be
matched, and maps a match back to the lines it came from.

Very large files are read as a head and a tail (the start-up lines and the final error); the
middle is only counted for the run-time markers that matter there (see `MIDDLE_COUNTERS`).
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

HEAD_BYTES = 2 * 2**20  # start-up: engine config, profiling, KV sizing, graph capture
NOISE_ABOVE_BYTES = 2**20  # logs larger than this drop repetitive per-request lines
TAIL_BYTES = 2 * 2**20  # the final error and its traceback
MAX_LINE_CHARS = 20_000  # longer lines are cut: nothing vLLM prints is that long

# Markers counted in the unread middle of a huge log (bytes, as they appear in the file)
MIDDLE_COUNTERS = {
    "preempted_v0": b"is preempted by PreemptionMode",
    "kv_usage_full": b"GPU KV cache usage: 100.0%",
}

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")
_CONTROL = re.compile(r"[\x00-\x08\x0e-\x1f\x7f]")
_LEVEL_WORD = r"(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)"
# vLLM's header: `INFO 12-13 19:54:18 [worker.py:243]` (newer) or `INFO 12-13 19:54:18 worker.py:243]`
_VLLM_HEADER = re.compile(
    rf"^(?P<level>{_LEVEL_WORD})\s+(?P<stamp>\d\d-\d\d\s+\d\d:\d\d:\d\d)(?:[.,]\d+)?\s+"
    r"(?:\[(?P<src1>[^\]\s]*?)(?::\d+)?\]|(?P<src2>[\w./-]+?)(?::\d+)?\])\s?"
)
# the header after a tag cut in half by a paste: `RayWorkerWrapper pid=1) INFO 03-27 ...`
_LATE_HEADER = re.compile(r"(?<=\) )" + _VLLM_HEADER.pattern.lstrip("^"))
# A header in the middle of a line means the newlines were lost: split there.
_COLLAPSED = re.compile(
    rf"(?<=\S)[ \t]+(?=(?:\([^()\n]{{0,60}}pid=\d+[^()\n]{{0,40}}\)\s+)?{_LEVEL_WORD}"
    r" \d\d-\d\d \d\d:\d\d:\d\d)"
)
_PREFIX = re.compile(
    "|".join(
        (
            # ISO timestamps (Kubernetes, CI, loggers): `2025-01-28T22:58:08.123Z`, `[2025-...]`
            r"\[?\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?\]?(?:\s+|$)",
            # journald / syslog: `Jan 28 22:58:08 host vllm[1234]: `
            r"[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \S+ [\w./-]+(?:\[\d+\])?:\s*",
            # docker compose: `vllm-1  | `
            r"[\w.-]{1,60}\s+\|\s?",
            # Ray / vLLM process tags: `(VllmWorker rank=3 pid=1090)`, `(RayWorkerWrapper pid=1, ...)`
            r"\((?:[^()\n]{0,60}\bpid=\d+[^()\n]{0,60}|raylet[^()\n]{0,60})\)\s*",
            r"\[rank\d+\]:\s*",
            r">\s?",  # quoted paste in an issue
        )
    )
)
COLLAPSED_ABOVE_CHARS = 160  # shorter lines hold one log line: no lost newlines to look for
_REPEATED = re.compile(r"\s*\[repeated \d+x across cluster\]\s*$")
# what makes a log huge: access lines, per-request lines, periodic stats (checked as substrings)
_NOISE = ('HTTP/1.1"', "Added request ", "Received request ", "Finished request ", "throughput: ")
_KEEP = ("usage: 99.", "usage: 100")  # stats lines with the KV cache full are evidence


@dataclass(frozen=True)
class LogLine:
    number: int  # 1-based line number in what was read
    level: str | None  # INFO / WARNING / ERROR ... when vLLM's header was present
    source: str | None  # the file vLLM named in its header, e.g. "gpu_worker.py"
    message: str  # the line without prefixes
    # "MM-DD HH:MM:SS" of vLLM's header (or of the last header before a bare line): orders the
    # lines of processes that interleave their output
    stamp: str | None = None

    def quote(self, limit: int = 300) -> str:
        text = self.message if len(self.message) <= limit else self.message[: limit - 3] + "..."
        return f"line {self.number}: {text}"


@dataclass(frozen=True)
class LogText:
    """The lines of a log, plus the same text joined for patterns that span lines."""

    lines: tuple[LogLine, ...]
    joined: str  # messages joined by "\n"
    starts: tuple[int, ...]  # offset of each line's message in `joined`
    is_binary: bool = False
    is_truncated: bool = False  # a huge file: only its head and tail were read line by line
    middle_counts: tuple[tuple[str, int], ...] = ()

    def index_at(self, offset: int) -> int:
        return max(0, bisect.bisect_right(self.starts, offset) - 1)

    def line_at(self, offset: int) -> LogLine:
        return self.lines[self.index_at(offset)]

    def middle_count(self, name: str) -> int:
        return dict(self.middle_counts).get(name, 0)


def decode(data: bytes) -> tuple[str, bool]:
    """Text from bytes of any encoding a log arrives in; the flag says it looked binary."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):  # PowerShell's `>` writes UTF-16
        return data.decode("utf-16", errors="replace"), False
    text = data.decode("utf-8", errors="replace")
    sample = text[:65536]
    # undecodable bytes and control characters (not tab, newlines, form feed or ANSI escape)
    odd = sample.count("\ufffd") + len(_CONTROL.findall(sample.replace("\x1b", "")))
    return text, odd > len(sample) // 20


def _strip_prefixes(line: str) -> tuple[str | None, str | None, str | None, str]:
    for _ in range(8):
        match = _PREFIX.match(line)
        if match is None or match.end() == 0:
            break
        line = line[match.end() :]
    header = _VLLM_HEADER.match(line) or _LATE_HEADER.search(line, 0, 120)
    if header is None:
        return None, None, None, _REPEATED.sub("", line).rstrip()
    level = "WARNING" if header["level"] == "WARN" else header["level"]
    source = header["src1"] or header["src2"]
    rest = line[header.end() :]
    # a second tag may follow the header (`INFO ... [x.py:1] (Worker pid=2) ...`) - rare, keep it
    stamp = " ".join(header["stamp"].split())
    return level, source, stamp, _REPEATED.sub("", rest).rstrip()


def split_lines(text: str, first_number: int = 1, drop_noise: bool = False) -> list[LogLine]:
    text = _ANSI.sub("", text)
    # markdown bold around numbers in pasted issue text: "# GPU blocks: **20865**"
    text = _CONTROL.sub("", text.replace("\t", "    ").replace("**", ""))
    lines: list[LogLine] = []
    last_noise: str | None = None
    last_stamp: str | None = None
    for number, raw in enumerate(text.splitlines(), start=first_number):
        noise = drop_noise and _noise_kind(raw)
        if noise and noise == last_noise:
            continue  # a run of the same repetitive line: its first one stands for it
        last_noise = noise or None
        # pieces of one physical line whose newlines were lost keep its number
        raw = raw[:MAX_LINE_CHARS]
        for piece in _COLLAPSED.split(raw) if len(raw) > COLLAPSED_ABOVE_CHARS else (raw,):
            level, source, stamp, message = _strip_prefixes(piece.strip())
            last_stamp = stamp or last_stamp
            if message or level:
                lines.append(LogLine(number, level, source, message.strip(), last_stamp))
    return lines


def _noise_kind(raw: str) -> str:
    for marker in _NOISE:
        if marker in raw and not any(keep in raw for keep in _KEEP):
            return marker
    return ""


def build(
    lines: list[LogLine],
    *,
    is_binary: bool = False,
    is_truncated: bool = False,
    middle_counts: tuple[tuple[str, int], ...] = (),
) -> LogText:
    starts, offset = [], 0
    for line in lines:
        starts.append(offset)
        offset += len(line.message) + 1
    joined = "\n".join(line.message for line in lines)
    return LogText(tuple(lines), joined, tuple(starts), is_binary, is_truncated, middle_counts)


def read_log(data: bytes) -> LogText:
    """Clean lines from raw bytes; a huge file contributes its head and tail."""
    drop_noise = len(data) > NOISE_ABOVE_BYTES
    if len(data) <= HEAD_BYTES + TAIL_BYTES:
        text, is_binary = decode(data)
        return build(split_lines(text, drop_noise=drop_noise), is_binary=is_binary)
    head, is_binary = decode(data[:HEAD_BYTES])
    tail, _ = decode(data[-TAIL_BYTES:])
    middle = data[HEAD_BYTES:-TAIL_BYTES]
    counts = tuple((name, middle.count(marker)) for name, marker in MIDDLE_COUNTERS.items())
    # the tail starts mid-line: drop its first partial line, number the rest as in the file
    tail = tail.split("\n", 1)[1] if "\n" in tail else ""
    first_tail_number = data[: len(data) - TAIL_BYTES].count(b"\n") + 2
    lines = split_lines(head, drop_noise=True) + split_lines(tail, first_tail_number, True)
    return build(lines, is_binary=is_binary, is_truncated=True, middle_counts=counts)
