"""PyTorch's out-of-memory message: what it tried to allocate, what was free, who held the rest.

    torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total
    capacity of 23.65 GiB of which 12.81 MiB is free. Process 2291 has 1.62 GiB memory in use.
    Including non-PyTorch memory, this process has 21.99 GiB memory in use. ...

PyTorch (2.1+) names the failing process "this process" and every other one on the GPU by pid;
whatever neither accounts for (total - free - this process - listed others) is held by
processes PyTorch cannot see, such as other containers.
"""

from __future__ import annotations

import re

from kvwise.doctor.figures import GIB

_UNIT = r"(GiB|MiB|KiB|bytes)"
_AMOUNT = r"(\d+(?:\.\d+)?) " + _UNIT
_HOLDER = re.compile(r"Process (\d+) has " + _AMOUNT + " memory in use")
_SELF = re.compile(r"this process has " + _AMOUNT + " memory in use")
# PyTorch 2.1 prints "total capacty" (corrected in 2.2)
_TOTAL = re.compile(r"total capaci?ty of " + _AMOUNT + " of which " + _AMOUNT + " is free")
_SIZES = re.compile(
    r"Tried to allocate (?P<tried>\d+(?:\.\d+)?) (?P<tried_unit>GiB|MiB|KiB|bytes)[^\n]*?"
    r"of which (?P<free>\d+(?:\.\d+)?) (?P<free_unit>GiB|MiB|KiB|bytes) is free"
)


def _bytes(amount: str, unit: str) -> float:
    return float(amount) * {"GiB": GIB, "MiB": 2**20, "KiB": 2**10}.get(unit, 1)


def sizes(message: str) -> tuple[float, float] | None:
    """(bytes PyTorch tried to allocate, bytes free on the GPU)."""
    match = _SIZES.search(message)
    if match is None:
        return None
    return _bytes(match["tried"], match["tried_unit"]), _bytes(match["free"], match["free_unit"])


def processes(message: str) -> dict[int, float]:
    """Every process PyTorch names by pid: pid -> bytes."""
    return {int(pid): _bytes(amount, unit) for pid, amount, unit in _HOLDER.findall(message)}


def others(message: str) -> dict[int, float]:
    """The processes other than the one that failed.

    With "this process has X" in the message, every pid is another process. Without it (a
    container, where PyTorch sees vLLM under a pid of its own), a lone pid is vLLM itself, and
    of several the largest is taken to be vLLM.
    """
    holders = processes(message)
    if _SELF.search(message):
        return holders
    if len(holders) < 2:
        return {}
    largest = max(holders, key=lambda pid: holders[pid])
    return {pid: held for pid, held in holders.items() if pid != largest}


def unaccounted(message: str) -> float:
    """Bytes neither free nor held by this process nor by a listed one (0 if it cannot tell)."""
    total, own = _TOTAL.search(message), _SELF.search(message)
    if total is None or own is None:
        return 0.0
    held = _bytes(*total.group(1, 2)) - _bytes(*total.group(3, 4)) - _bytes(*own.group(1, 2))
    return max(0.0, held - sum(others(message).values()))
