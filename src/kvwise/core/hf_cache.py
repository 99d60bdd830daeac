"""Models already downloaded into the local Hugging Face cache, found without the network.

The layout is huggingface_hub's (https://huggingface.co/docs/huggingface_hub/guides/manage-cache):
`<cache>/models--{org}--{name}/refs/main` holds the commit hash of the snapshot that `main`
resolved to, and `snapshots/<commit>/` holds the files (links into `blobs/`). The cache folder
is `HF_HUB_CACHE`, else `HF_HOME/hub`, else `~/.cache/huggingface/hub`.
"""

from __future__ import annotations

import os
from pathlib import Path


def hub_cache_dir() -> Path:
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    return Path("~/.cache/huggingface/hub").expanduser()


def _repo_dir(model_id: str) -> Path | None:
    if model_id.count("/") != 1:
        return None
    org, name = model_id.split("/")
    repo = hub_cache_dir() / f"models--{org}--{name}"
    if repo.is_dir():
        return repo
    # hub ids are case-insensitive ("qwen/qwen2.5-7b-instruct"); the cache keeps one spelling
    wanted = repo.name.lower()
    try:
        return next((d for d in repo.parent.iterdir() if d.name.lower() == wanted), None)
    except OSError:
        return None


def snapshot_dir(model_id: str) -> Path | None:
    """The cached snapshot of `org/name` holding a config.json: `main`'s, else the newest one."""
    repo = _repo_dir(model_id)
    if repo is None:
        return None
    snapshots = repo / "snapshots"
    try:
        commit = (repo / "refs" / "main").read_text().strip()
    except OSError:
        commit = ""
    if commit and (snapshots / commit / "config.json").is_file():
        return snapshots / commit
    # downloaded at a pinned revision (no refs/main): the most recently written snapshot
    candidates = [d for d in snapshots.glob("*") if (d / "config.json").is_file()]
    return max(candidates, key=lambda d: d.stat().st_mtime) if candidates else None
