"""Finding a model: a local config.json or directory, the Hugging Face cache, the offline
catalog, or the hub (`load_model` gives the order).

The catalog ships published config.json copies verbatim
(`data/models/*.json`, each with its sources), plus `data/catalog_extra.json`: keys filled in for
partial entries and quantized variants derived from a base model, each with a note saying so.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any

from kvwise.core.data_files import DATA_DIR, read_json
from kvwise.core.models import ModelSpec, spec_from_config
from kvwise.errors import DataError, UnknownModelError


@dataclass(frozen=True)
class CatalogEntry:
    model_id: str
    config: dict[str, Any]
    sources: tuple[str, ...]
    published_params: int | None
    notes: str
    is_derived: bool = False  # shapes of a base model + a documented quantization_config

    def spec(self) -> ModelSpec:
        source = self.sources[0] if self.sources else "catalog"
        return spec_from_config(
            self.config, self.model_id, source=source, published_params=self.published_params
        )


def _read_entry(item: Path) -> CatalogEntry:
    raw = json.loads(item.read_text())
    return CatalogEntry(
        model_id=raw["id"],
        config=raw["config"],
        sources=tuple(raw.get("sources") or ()),
        published_params=raw.get("published_params"),
        notes=raw.get("notes", ""),
    )


def _filled(entry: CatalogEntry, fill: dict[str, Any]) -> CatalogEntry:
    # the copied keys win; fill only what the partial copy lacks
    config = fill["keys"] | entry.config
    return CatalogEntry(
        entry.model_id,
        config,
        entry.sources,
        entry.published_params,
        f"{fill['note']}. {entry.notes}",
    )


@cache
def _extra() -> dict[str, Any]:
    extra: dict[str, Any] = read_json("catalog_extra.json")
    return extra


@cache
def _entries() -> dict[str, CatalogEntry]:
    entries: dict[str, CatalogEntry] = {}
    for item in (DATA_DIR / "models").iterdir():
        if not item.name.endswith(".json"):
            continue
        entry = _read_entry(item)
        entries[entry.model_id.lower()] = entry
    extra = _extra()
    for model_id, fill in extra["fill"].items():
        entries[model_id.lower()] = _filled(entries[model_id.lower()], fill)
    for derived in extra["derived"]:
        base = entries[derived["base"].lower()]
        entries[derived["id"].lower()] = CatalogEntry(
            derived["id"],
            base.config | derived["keys"],
            base.sources,
            None,
            derived["note"],
            is_derived=True,
        )
    return entries


def catalog_entries() -> list[CatalogEntry]:
    return sorted(_entries().values(), key=lambda e: e.model_id.lower())


def _read_config(config_path: Path) -> dict[str, Any]:
    try:
        config = json.loads(config_path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataError(f"{config_path}: not a readable JSON config ({exc})") from exc
    if not isinstance(config, dict):
        raise DataError(f"{config_path}: expected a JSON object")
    return config


def _with_checkpoint_bytes(spec: ModelSpec, folder: Path) -> ModelSpec:
    from kvwise.core.safetensors_meta import local_checkpoint_bytes

    return replace(spec, checkpoint_weight_bytes=local_checkpoint_bytes(folder, spec))


def _load_local(path: Path) -> ModelSpec:
    config_path = path / "config.json" if path.is_dir() else path
    if not config_path.is_file():
        raise UnknownModelError(f"{path}: no config.json there")
    name = path.name if path.is_dir() else path.parent.name or path.stem
    spec = spec_from_config(_read_config(config_path), name, source=str(config_path))
    return _with_checkpoint_bytes(spec, config_path.parent)


def _from_hf_cache(name: str) -> ModelSpec | None:
    """`org/name` from the local Hugging Face cache, without the network."""
    from kvwise.core.hf_cache import snapshot_dir

    snapshot = snapshot_dir(name)
    if snapshot is None:
        return None
    config_path = snapshot / "config.json"
    spec = spec_from_config(_read_config(config_path), name, source=f"hf-cache:{config_path}")
    return _with_checkpoint_bytes(spec, snapshot)


def _verbatim_copy(name: str) -> CatalogEntry | None:
    """The catalog's verbatim copy of `org/name`'s config.json, read from its own file
    (`data/models/org--name.json`, the name of every catalog file) instead of with the whole
    catalog: the entry `_find_in_catalog` gives for that id. None for anything else (another
    spelling, no such file, an id a derived variant takes), which the whole catalog decides."""
    if name.count("/") != 1:
        return None
    item = DATA_DIR / "models" / f"{name.replace('/', '--')}.json"
    if not item.is_file():
        return None
    entry = _read_entry(item)
    extra = _extra()
    if entry.model_id != name or any(d["id"].lower() == name.lower() for d in extra["derived"]):
        return None
    for model_id, fill in extra["fill"].items():
        if model_id.lower() == name.lower():
            entry = _filled(entry, fill)
    return entry


def _find_in_catalog(name: str) -> CatalogEntry | None:
    entries = _entries()
    key = name.lower().strip()
    if key in entries:
        return entries[key]
    # Without the organisation: "Qwen2.5-7B-Instruct"
    by_tail = {mid.split("/")[-1]: e for mid, e in entries.items()}
    return by_tail.get(key.split("/")[-1])


def _from_hub(name: str) -> ModelSpec:
    """config.json and the weight size from the hub; UnknownModelError saying why not."""
    from kvwise.core import hub

    config = hub.fetch_config(name)
    spec = spec_from_config(config, name, source=f"hub:{hub.endpoint()}/{name}")
    return replace(spec, checkpoint_weight_bytes=hub.fetch_checkpoint_bytes(name, spec))


def closest_models(name: str, n: int = 3) -> list[str]:
    ids = [e.model_id for e in catalog_entries()]
    lowered = {i.lower(): i for i in ids}
    tails = {i.split("/")[-1].lower(): i for i in ids}
    want = name.lower()
    import difflib  # only for a name that is not found

    hits = difflib.get_close_matches(want, list(lowered), n=n, cutoff=0.4)
    hits += difflib.get_close_matches(want.split("/")[-1], list(tails), n=n, cutoff=0.4)
    names = [lowered.get(h) or tails[h] for h in hits]
    return list(dict.fromkeys(names))[:n]


def _as_path(name: str) -> Path | None:
    """The local file or folder a model argument names, if it names one. A hub id can be too
    long to be a path (OSError) or start with `~` and no such user (RuntimeError): not a path."""
    try:
        path = Path(name).expanduser()
        return path if path.exists() else None
    except (OSError, RuntimeError):
        return None


def load_model(name: str) -> ModelSpec:
    """Resolve a model argument, in this order: a local folder or config.json; `org/name` in the
    local Hugging Face cache; a verbatim catalog copy of that config.json; the hub; any other
    catalog entry (derived quantized variants, ids without the organisation)."""
    path = _as_path(name)
    if path is not None:
        return _load_local(path)
    spec = _from_hf_cache(name)
    if spec is not None:
        return spec
    # A verbatim copy is what the hub would send: no round trip (cold start stays offline), and
    # no need to read the other catalog files either
    verbatim = _verbatim_copy(name)
    if verbatim is not None:
        return verbatim.spec()
    entry = _find_in_catalog(name)
    if entry is not None and not entry.is_derived and entry.model_id.lower() == name.lower():
        return entry.spec()
    hub_miss = "not an org/name id, the hub was not asked"
    if name.count("/") == 1:
        try:
            return _from_hub(name)
        except UnknownModelError as miss:
            hub_miss = str(miss)
    if entry is not None:
        return entry.spec()
    close = closest_models(name)
    hint = f"; closest catalog entries: {', '.join(close)}" if close else ""
    raise UnknownModelError(
        f"unknown model {name!r}: no such local path, not in the Hugging Face cache "
        f"({_cache_dir_text()}), not in the offline catalog, hub: {hub_miss}{hint}"
    )


def _cache_dir_text() -> str:
    from kvwise.core.hf_cache import hub_cache_dir

    return str(hub_cache_dir())
