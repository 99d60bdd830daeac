"""Reading an `nvidia-smi` dump: the table (old and new layouts) or `--query-gpu` CSV.

Gives each GPU's name, used and total memory, and the processes holding memory. A dump taken
after a failed start-up shows what else was on the card: a desktop, another server, or a vLLM
instance that never exited.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MIB = 2**20

# `|   0  NVIDIA GeForce RTX 4090        Off |   00000000:01:00.0  On |   Off |`
_GPU_ROW = re.compile(
    r"^\|\s*(?P<index>\d+)\s+(?P<name>(?:NVIDIA|GeForce|Tesla|Quadro)[^|]*?)\s+(?:On|Off)\s*\|"
)
# `|  0%   45C    P8    20W /  450W |    1234MiB /  24564MiB |   0%   Default |`
_MEMORY_ROW = re.compile(r"\|\s*(?P<used>\d+)\s*MiB\s*/\s*(?P<total>\d+)\s*MiB\s*\|")
# `|    0   N/A  N/A      5678      C   python3                        20000MiB |`
_PROCESS_ROW = re.compile(
    r"^\|\s*(?P<gpu>\d+)\s+(?:\S+\s+\S+\s+)?(?P<pid>\d+)\s+(?P<type>C\+G|C|G)\s+"
    r"(?P<name>\S.*?)\s+(?P<used>\d+)\s*MiB\s*\|"
)
_CSV_NUMBER = re.compile(r"(\d+(?:\.\d+)?)\s*MiB")


@dataclass(frozen=True)
class SmiGpu:
    index: int
    name: str
    used_bytes: int
    total_bytes: int


@dataclass(frozen=True)
class SmiProcess:
    gpu: int
    pid: int
    kind: str  # C compute, G graphics (a desktop), C+G both
    name: str
    used_bytes: int

    @property
    def looks_like_vllm(self) -> bool:
        return "vllm" in self.name.lower()


@dataclass(frozen=True)
class NvidiaSmi:
    gpus: tuple[SmiGpu, ...]
    processes: tuple[SmiProcess, ...]

    @property
    def is_empty(self) -> bool:
        return not self.gpus and not self.processes


def parse_nvidia_smi(text: str) -> NvidiaSmi:
    lines = [line.strip() for line in text.splitlines()]
    gpus = _table_gpus(lines) or _csv_gpus(lines)
    processes = tuple(
        SmiProcess(int(m["gpu"]), int(m["pid"]), m["type"], m["name"].strip(), int(m["used"]) * MIB)
        for m in (_PROCESS_ROW.match(line) for line in lines)
        if m is not None
    )
    return NvidiaSmi(tuple(gpus), processes)


def _table_gpus(lines: list[str]) -> list[SmiGpu]:
    gpus: list[SmiGpu] = []
    for position, line in enumerate(lines):
        row = _GPU_ROW.match(line)
        if row is None:
            continue
        memory = next(
            (m for m in map(_MEMORY_ROW.search, lines[position : position + 3]) if m), None
        )
        if memory is not None:
            gpus.append(
                SmiGpu(
                    int(row["index"]),
                    row["name"].strip(),
                    int(memory["used"]) * MIB,
                    int(memory["total"]) * MIB,
                )
            )
    return gpus


def _csv_gpus(lines: list[str]) -> list[SmiGpu]:
    """`nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv` (any column order)."""
    header_at = next((i for i, line in enumerate(lines) if "memory.total" in line), None)
    if header_at is None:
        return []
    columns = [c.strip().split(" ")[0] for c in lines[header_at].split(",")]
    gpus: list[SmiGpu] = []
    for line in lines[header_at + 1 :]:
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != len(columns):
            break
        row = dict(zip(columns, cells, strict=False))
        used, total = _mib(row.get("memory.used")), _mib(row.get("memory.total"))
        if total is None:
            break
        index = int(row["index"]) if row.get("index", "").isdigit() else len(gpus)
        gpus.append(SmiGpu(index, row.get("name", ""), used or 0, total))
    return gpus


def _mib(cell: str | None) -> int | None:
    if cell is None:
        return None
    match = _CSV_NUMBER.search(cell) or re.fullmatch(r"(\d+(?:\.\d+)?)", cell)
    return None if match is None else int(float(match.group(1)) * MIB)
