"""Host memory, from /proc/meminfo (Linux); None elsewhere."""

from __future__ import annotations

from pathlib import Path

_MEMINFO = Path("/proc/meminfo")
_KIB = 1024


def host_memory() -> dict[str, float] | None:
    """Total and available memory in GiB (MemAvailable: what can be had without swapping)."""
    try:
        lines = _MEMINFO.read_text().splitlines()
    except OSError:
        return None
    kib = {}
    for line in lines:
        name, _, rest = line.partition(":")
        fields = rest.split()
        if fields and fields[0].isdigit():
            kib[name] = int(fields[0])
    if "MemTotal" not in kib or "MemAvailable" not in kib:
        return None
    total_gib, available_gib = (kib[k] * _KIB / 2**30 for k in ("MemTotal", "MemAvailable"))
    return {
        "total_gib": round(total_gib, 1),
        "used_gib": round(total_gib - available_gib, 1),
        "available_gib": round(available_gib, 1),
    }
