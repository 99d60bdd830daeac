"""SGLang's start-up defaults per release family, read from `core/data/sglang_versions.json`.

Each family is the rule in SGLang's `server_args.py` at the releases it names: the default
`mem_fraction_static` (a constant per TP size in early 0.4.x, a reserve in MiB later), the
default `chunked_prefill_size` and `cuda_graph_max_bs` per card class.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from kvwise.core.data_files import read_json
from kvwise.errors import UsageError

MIB = 2**20


@dataclass(frozen=True)
class SglangRelease:
    family: str
    data: dict[str, Any]

    @property
    def error_text(self) -> str:
        return str(self.data["error_text"])


@cache
def _table() -> dict[str, Any]:
    return dict(read_json("sglang_versions.json"))


def release_key(version: str) -> tuple[int, ...]:
    """(major, minor, patch) of a release string: v0.5.2rc1, 0.4.6.post1 -> (0, 5, 2), (0, 4, 6)."""
    core = version.lstrip("v").split("rc")[0].split(".post")[0].split("+")[0]
    try:
        return tuple(int(part) for part in core.split(".")[:3])
    except ValueError as exc:
        raise UsageError(f"--sglang-version {version!r}: expected a release such as 0.4.6") from exc


def release_for(version: str | None) -> SglangRelease:
    """The family whose rules `version` runs; None means the newest family kvwise knows."""
    families = _table()["families"]
    if version is None:
        newest = families[-1]
        return SglangRelease(newest["family"], newest)
    wanted = release_key(version)
    for family in families:
        last = family["last"]
        if release_key(family["first"]) <= wanted and (last is None or wanted <= release_key(last)):
            return SglangRelease(family["family"], family)
    known = ", ".join(f["family"] for f in families)
    raise UsageError(f"--sglang-version {version}: not modelled (families known: {known})")


def newest_release() -> str:
    """The newest release whose source the table was read in (an image tag to pin to)."""
    return str(_table()["newest_release_read"])


def reserve_constants() -> dict[str, Any]:
    return dict(_table()["reserve_formula"])


def tp_buffer_constants() -> dict[str, Any]:
    return dict(_table()["tp_buffers"])


def applies_vlm_factor(version: str | None) -> bool:
    """Whether this release scales the default by the vision tower's size (0.4.10+; unmodelled)."""
    return version is None or release_key(version) >= release_key(
        str(_table()["vlm_factor_first_release"])
    )


@dataclass(frozen=True)
class MultimodalRule:
    """How a release lowers mem_fraction_static for a multimodal model."""

    factor: float
    given_too: bool  # True: the user's --mem-fraction-static is scaled too (up to 0.4.8)


def multimodal_rule(version: str | None) -> MultimodalRule | None:
    """The release's multimodal reduction (None: none, as up to 0.2.14); None version: newest."""
    rules = _table()["multimodal_rules"]["rules"]
    if version is None:
        _, _, factor, scope = rules[-1]
        return MultimodalRule(float(factor), scope == "given")
    wanted = release_key(version)
    for first, last, factor, scope in rules:
        if release_key(first) <= wanted and (last is None or wanted <= release_key(last)):
            return MultimodalRule(float(factor), scope == "given")
    return None


def input_reserved_tokens() -> int:
    return int(_table()["input_cap"]["reserved_tokens"])


def launch_flags(family: str) -> frozenset[str] | None:
    """The flags kvwise writes that this family's server_args accepts (None: every one of them)."""
    for data in _table()["families"]:
        if data["family"] == family and "launch_flags" in data:
            return frozenset(data["launch_flags"])
    return None


def _tier(tiers: list[list[Any]], gpu_mib: float) -> list[Any]:
    for tier in tiers:
        if tier[0] is None or gpu_mib < tier[0]:
            return tier
    raise AssertionError("the last tier has no upper limit")


def default_chunked_prefill_size(release: SglangRelease, gpu_mib: float) -> int:
    return int(_tier(release.data["chunk_tiers"], gpu_mib)[1])


def default_cuda_graph_max_bs(release: SglangRelease, gpu_mib: float, tp: int) -> int:
    tier = _tier(release.data["graph_bs_tiers"], gpu_mib)
    return int(tier[1] if tp < 4 else tier[2])


def outside_pool_constants() -> dict[str, Any]:
    return dict(_table()["outside_pool"])
