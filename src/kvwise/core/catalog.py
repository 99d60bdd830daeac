"""Finding a model: a local config.json or directory, the offline catalog, or the hub.

The catalog ships the published config.json copies from `shared/models/` verbatim
(`data/models/*.json`, each with its sources), plus `data/catalog_extra.json`: keys filled in for
partial entries and quantized variants derived from a base model, each with a note saying so.
"""

from __future__ import annotations

import difflib
import json
import os
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from kvwise.core.models import ModelSpec, spec_from_config
from kvwise.errors import DataError, UnknownModelError


@dataclass(frozen=True)
class CatalogEntry:
    model_id: str
    config: dict[str, Any]
    sources: tuple[str, ...]
    published_params: int | None
    notes: str

    def spec(self) -> ModelSpec:
        source = self.sources[0] if self.sources else "catalog"
        return spec_from_config(
            self.config, self.model_id, source=source, published_params=self.published_params
        )


def _data_dir() -> Any:
    return resources.files("kvwise.core").joinpath("data")


@cache
def _entries() -> dict[str, CatalogEntry]:
    entries: dict[str, CatalogEntry] = {}
    for item in _data_dir().joinpath("models").iterdir():
        if not item.name.endswith(".json"):
            continue
        raw = json.loads(item.read_text())
        entries[raw["id"].lower()] = CatalogEntry(
            model_id=raw["id"],
            config=raw["config"],
            sources=tuple(raw.get("sources") or ()),
            published_params=raw.get("published_params"),
            notes=raw.get("notes", ""),
        )
    extra = json.loads(_data_dir().joinpath("catalog_extra.json").read_text())
    for model_id, fill in extra["fill"].items():
        entry = entries[model_id.lower()]
        # the copied keys win; fill only what the partial copy lacks
        config = fill["keys"] | entry.config
        entries[model_id.lower()] = CatalogEntry(
            entry.model_id,
            config,
            entry.sources,
            entry.published_params,
            f"{fill['note']}. {entry.notes}",
        )
    for derived in extra["derived"]:
        base = entries[derived["base"].lower()]
        entries[derived["id"].lower()] = CatalogEntry(
            derived["id"], base.config | derived["keys"], base.sources, None, derived["note"]
        )
    return entries


def catalog_entries() -> list[CatalogEntry]:
    return sorted(_entries().values(), key=lambda e: e.model_id.lower())


def _load_local(path: Path) -> ModelSpec:
    config_path = path / "config.json" if path.is_dir() else path
    if not config_path.is_file():
        raise UnknownModelError(f"{path}: no config.json there")
    try:
        config = json.loads(config_path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataError(f"{config_path}: not a readable JSON config ({exc})") from exc
    if not isinstance(config, dict):
        raise DataError(f"{config_path}: expected a JSON object")
    name = path.name if path.is_dir() else path.parent.name or path.stem
    return spec_from_config(config, name, source=str(config_path))


def _find_in_catalog(name: str) -> CatalogEntry | None:
    entries = _entries()
    key = name.lower().strip()
    if key in entries:
        return entries[key]
    # Without the organisation: "Qwen2.5-7B-Instruct"
    by_tail = {mid.split("/")[-1]: e for mid, e in entries.items()}
    return by_tail.get(key.split("/")[-1])


def _hub_reachable(timeout_s: float = 1.0) -> bool:
    """One TCP connection to the hub; offline machines fail at DNS at once."""
    import socket

    try:
        socket.create_connection(("huggingface.co", 443), timeout=timeout_s).close()
    except OSError:
        return False
    return True


def _from_hub(name: str) -> ModelSpec | None:
    """config.json from the Hugging Face hub, when huggingface_hub is installed and reachable."""
    if "/" not in name or os.environ.get("HF_HUB_OFFLINE") == "1":
        return None
    try:
        from huggingface_hub import hf_hub_download
    except ImportError:
        return None
    if not _hub_reachable():
        return None  # fail fast: the hub client would spend seconds in retries
    try:
        path = hf_hub_download(name, "config.json", etag_timeout=3)
    except Exception:  # any hub failure means "not found online": fall through to the error
        return None
    try:
        config = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return spec_from_config(config, name, source=f"hub:{name}")


def closest_models(name: str, n: int = 3) -> list[str]:
    ids = [e.model_id for e in catalog_entries()]
    lowered = {i.lower(): i for i in ids}
    tails = {i.split("/")[-1].lower(): i for i in ids}
    want = name.lower()
    hits = difflib.get_close_matches(want, list(lowered), n=n, cutoff=0.4)
    hits += difflib.get_close_matches(want.split("/")[-1], list(tails), n=n, cutoff=0.4)
    names = [lowered.get(h) or tails[h] for h in hits]
    return list(dict.fromkeys(names))[:n]


def load_model(name: str) -> ModelSpec:
    """Resolve a model argument: a path, a catalog id (with or without org), or a hub id."""
    path = Path(name).expanduser()
    if path.exists():
        return _load_local(path)
    entry = _find_in_catalog(name)
    if entry is not None:
        return entry.spec()
    spec = _from_hub(name)
    if spec is not None:
        return spec
    close = closest_models(name)
    hint = f"; closest catalog entries: {', '.join(close)}" if close else ""
    raise UnknownModelError(
        f"unknown model {name!r} (not a local path, not in the offline catalog, "
        f"hub not reachable){hint}"
    )
