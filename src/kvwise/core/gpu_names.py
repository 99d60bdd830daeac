"""From the name a driver prints to one catalog entry, or a clear refusal; never a guess.

Names come from `nvidia-smi --query-gpu=name`, NVML and `torch.cuda.get_device_name` (the same
strings: "NVIDIA A100-SXM4-40GB", "Tesla T4", "NVIDIA GeForce RTX 4060 Laptop GPU"), from
`rocm-smi --showproductname` ("AMD Instinct MI300X OAM", "gfx942") and from users (`a100-80gb`).

1. The whole name, normalized, equals an entry's key, name or alias: that entry.
2. Otherwise the name less its memory size ("40GB", "144G") names a group: the entries whose
   name, key or alias is that name less a memory size, plus the entry's declared `groups`
   ("A100", "gfx942"). A bare GeForce number ("4090", "4060 Ti") is the RTX card of that number,
   or the GTX one where no RTX card has it ("1080 Ti").
   The memory size, or the total the caller knows (--gpu-memory-gib), narrows the group.
3. One entry left: that entry. Several of one memory size that differ only in form factor (SXM
   and PCIe): the one the catalog marks `preferred`, whose name says which it is. Several memory
   sizes, or no preferred one: a one-line error listing them. Nothing: a one-line error with the
   closest keys as suggestions only.

Matching is by equality of normalized strings, never by substring or similarity: "RTX 4060 Ti"
is not "RTX 4060", "GH200" is not "H200", "RTX 6000 Ada" is not "RTX A6000".
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from kvwise.errors import UnknownGpuError

# vendor and filler words drivers print around the model name; dropped before comparing
FILLER_WORDS = frozenset(
    {"nvidia", "geforce", "tesla", "amd", "instinct", "radeon", "gpu", "graphics", "tm", "r"}
)
_MEMORY = re.compile(r"(?<![a-z0-9.])(\d+(?:\.\d+)?)\s*(?:gb|gib|g)(?![a-z0-9])")
_MEBIBYTES = re.compile(r"(?<![a-z0-9.])(\d+)\s*mib(?![a-z0-9])", re.IGNORECASE)
_PARENTHESES = re.compile(r"\([^()]*\)")
_BRACKETS = re.compile(r"\[([^\[\]]+)\]")
# a count of cards: "2x RTX 3090", "4xH100", "8 x A100", "A100 80GB x2" (never the x of "XTX")
_COUNT = re.compile(r"^\s*\d+\s*[x×*]\s+|^\s*\d+[x×*](?=[a-z])|\s+[x×*]\s*\d+\s*$", re.IGNORECASE)


SIZE_TOLERANCE = 0.1  # a size in a name may be GB or GiB, rounded: 48 GB is 44.7 GiB


def normalize(name: str) -> str:
    """Lower case, filler words dropped, only letters and digits: "NVIDIA A10G" -> "a10g"."""
    words = re.split(r"[^a-z0-9]+", name.lower())
    return "".join(word for word in words if word and word not in FILLER_WORDS)


def split_memory(name: str) -> tuple[str, float | None]:
    """The name without a memory size, and that size in GB: "A100-SXM4-40GB" -> ("A100-SXM4-", 40)."""
    text = name.lower()
    found = _MEMORY.search(text)
    if found is None:
        return text, None
    return text[: found.start()] + " " + text[found.end() :], float(found.group(1))


def _without_remarks(name: str) -> str:
    """The product name alone: lspci and rocm-smi bracket it ("GH100 [H200 SXM 141GB]",
    "Arcturus GL-XL [AMD Instinct MI100]"); torch and users add remarks in parentheses
    ("AMD Instinct MI300X (gfx942:sramecc+:xnack-)", "NVIDIA DGX Spark (GB10)"); users add a
    count ("2x RTX 3090")."""
    bracketed = _BRACKETS.search(name)
    text = bracketed.group(1) if bracketed else name
    while _PARENTHESES.search(text):
        text = _PARENTHESES.sub(" ", text)
    text = _COUNT.sub(" ", text)
    return text if normalize(text) else name.replace("(", " ").replace(")", " ")


def split_measured_total(name: str) -> tuple[str, float | None]:
    """A total in MiB, as `nvidia-smi --query-gpu=name,memory.total` prints it after the name
    ("NVIDIA GeForce RTX 4080, 16376 MiB"), in GiB; it narrows like --gpu-memory-gib."""
    found = _MEBIBYTES.search(name)
    if found is None:
        return name, None
    return name[: found.start()] + " " + name[found.end() :], int(found.group(1)) / 1024


@dataclass(frozen=True)
class NameIndex:
    entries: tuple[dict[str, Any], ...]
    exact: dict[str, int]  # normalized key, name or alias -> entry
    groups: dict[str, tuple[int, ...]]  # normalized name less memory size -> entries

    def find(self, name: str, memory_gib: float | None = None) -> dict[str, Any]:
        cleaned, measured_gib = split_measured_total(_without_remarks(name))
        memory_gib = memory_gib if memory_gib is not None else measured_gib
        wanted = normalize(cleaned)
        if not wanted:
            raise UnknownGpuError("empty GPU name")
        if wanted in self.exact:
            return self.entries[self.exact[wanted]]
        rest, memory_gb = split_memory(cleaned)
        family = normalize(rest)
        found = self._group(family) or (self._bare_number(family) if family[:1].isdigit() else ())
        if not found:
            raise UnknownGpuError(self._unknown(name, wanted))
        return self.entries[self._narrow(name, found, memory_gb, memory_gib)]

    def _bare_number(self, family: str) -> tuple[int, ...]:
        """A bare GeForce number: the RTX card ("4090"), else the GTX one ("1080 Ti")."""
        return self._group("rtx" + family) or self._group("gtx" + family)

    def _group(self, family: str) -> tuple[int, ...]:
        exact = (self.exact[family],) if family in self.exact else ()
        return tuple(dict.fromkeys(exact + self.groups.get(family, ())))

    def _narrow(
        self, name: str, found: tuple[int, ...], memory_gb: float | None, memory_gib: float | None
    ) -> int:
        left = found
        if memory_gb is not None:
            left = self._by_stated_size(found, memory_gb)
            if not left:
                raise UnknownGpuError(
                    f"no {memory_gb:g} GB card named {name!r} in the catalog; "
                    f"it has: {self._choices(found)}" + self._same_generation(found, memory_gb)
                )
        if memory_gib is not None and len(left) > 1:
            gap = {i: abs(float(self.entries[i]["memory_gib"]) - memory_gib) for i in left}
            left = tuple(i for i in left if gap[i] == min(gap.values()))
        if len(left) == 1:
            return left[0]
        return self._preferred(name, left)

    def _same_generation(self, found: tuple[int, ...], size: float) -> str:
        """Cards of the stated size and of the named cards' compute capability, under other
        names ("H100 96GB": the H100 NVL, the GH200, the H20), listed for the user to choose
        from; never picked."""
        generations = {self.entries[i].get("compute_capability") for i in found} - {None}
        others = tuple(
            i
            for i, entry in enumerate(self.entries)
            if i not in found and entry.get("compute_capability") in generations
        )
        near = self._by_size_within_tolerance(others, size)
        if not near:
            return ""
        return (
            f"; cards of about {size:g} GB of the same generation: {self._choices(near)}; "
            "give --gpu KEY for one of these, or --gpu-memory-gib with the total for a card "
            "of non-standard memory"
        )

    def _by_size_within_tolerance(self, indexes: tuple[int, ...], size: float) -> tuple[int, ...]:
        return tuple(
            i
            for i in indexes
            if min(
                abs(float(self.entries[i]["memory_gb"]) - size),
                abs(float(self.entries[i]["memory_gib"]) - size),
            )
            <= SIZE_TOLERANCE * size
        )

    def _by_stated_size(self, found: tuple[int, ...], size: float) -> tuple[int, ...]:
        """The cards a size in a name means: the marketed GB ("48GB"), or the GiB a tool showed
        ("L40S 46GB" from nvidia-smi's 46068 MiB), within SIZE_TOLERANCE; the nearest wins."""
        gap = {
            i: min(
                abs(float(self.entries[i]["memory_gb"]) - size),
                abs(float(self.entries[i]["memory_gib"]) - size),
            )
            for i in found
        }
        near = {i: g for i, g in gap.items() if g <= SIZE_TOLERANCE * size}
        return tuple(i for i, g in near.items() if g == min(near.values()))

    def _preferred(self, name: str, left: tuple[int, ...]) -> int:
        sizes = {self.entries[i]["memory_gb"] for i in left}
        preferred = [i for i in left if self.entries[i].get("preferred")]
        if len(sizes) == 1 and len(preferred) == 1:
            return preferred[0]  # same card, another form factor: the one whose name says so
        ask = "give --gpu KEY" + (
            " or --gpu-memory-gib with the card's memory" if len(sizes) > 1 else ""
        )
        raise UnknownGpuError(
            f"GPU name {name!r} fits {len(left)} catalog cards: {self._choices(left)}; {ask}"
        )

    def _choices(self, indexes: tuple[int, ...]) -> str:
        return ", ".join(
            f"{self.entries[i]['key']} ({self.entries[i]['name']}, {self.entries[i]['memory_gb']:g} GB)"
            for i in indexes
        )

    def _unknown(self, name: str, wanted: str) -> str:
        by_spelling = {
            normalize(str(e[k])): str(e["key"]) for e in self.entries for k in ("key", "name")
        }
        import difflib  # only for a name that is not found

        close = difflib.get_close_matches(wanted, list(by_spelling), n=4, cutoff=0.6)
        hint = (
            f"; did you mean {', '.join(dict.fromkeys(by_spelling[c] for c in close))}?"
            if close
            else ""
        )
        return (
            f"unknown GPU {name!r}{hint} (`kvwise gpus` lists the keys; "
            "--gpu-memory-gib X plans any other card)"
        )


def build_index(entries: tuple[dict[str, Any], ...]) -> NameIndex:
    exact: dict[str, int] = {}
    groups: dict[str, list[int]] = {}
    for index, entry in enumerate(entries):
        spellings = [str(entry["key"]), str(entry["name"]), *map(str, entry.get("aliases", ()))]
        for spelling in spellings:
            claimed = exact.setdefault(normalize(spelling), index)
            assert claimed == index, f"{spelling!r} names two catalog GPUs"
        families = [normalize(split_memory(s)[0]) for s in spellings]
        for family in dict.fromkeys(families + [normalize(g) for g in entry.get("groups", ())]):
            groups.setdefault(family, []).append(index)
    return NameIndex(entries, exact, {k: tuple(v) for k, v in groups.items()})
