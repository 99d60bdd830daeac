"""The emulated hub behind the out-of-sample accuracy (tests/data/hub_cache) stays a Hugging Face
cache of published files, each folder saying where its files were copied from.

A folder without its source, or laid out so that the hub client would not find it, would turn a
record into "planned" (or "not planned") for a reason nobody can check.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from huggingface_hub import try_to_load_from_cache

from kvwise.core.catalog import catalog_entries
from tests.planner.accuracy import DATA, HUB_CACHE

REPOS = sorted(p for p in HUB_CACHE.glob("models--*") if p.is_dir())
README = (HUB_CACHE / "README.md").read_text()


def _repo_id(folder: Path) -> str:
    org, name = folder.name.removeprefix("models--").split("--", 1)
    return f"{org}/{name}"


def test_the_cache_is_not_empty() -> None:
    assert len(REPOS) >= 9


@pytest.mark.parametrize("folder", REPOS, ids=lambda p: p.name)
def test_each_folder_is_found_by_the_hub_client_and_names_its_source(folder: Path) -> None:
    repo_id = _repo_id(folder)
    revision = (folder / "refs" / "main").read_text().strip()
    assert re.fullmatch(r"[0-9a-f]{40}", revision), f"{folder.name}: refs/main is not a commit hash"

    # the real hub client, offline, resolves `main` to the copied file
    found = try_to_load_from_cache(repo_id, "config.json", cache_dir=HUB_CACHE)
    assert isinstance(found, str)
    assert Path(found) == folder / "snapshots" / revision / "config.json"

    config = json.loads(Path(found).read_text())
    assert isinstance(config, dict)
    assert config.get("architectures") or config.get("model_type")

    source = (folder / "SOURCE.md").read_text()
    assert source.splitlines()[0].startswith(f"# {repo_id} ")  # the source speaks of this repo
    assert "https://" in source  # and names where the file was copied from


@pytest.mark.parametrize("folder", REPOS, ids=lambda p: p.name)
def test_each_folder_is_listed_in_the_readme(folder: Path) -> None:
    assert f"`{_repo_id(folder)}`" in README


def test_every_mapped_repo_is_in_the_catalog_the_cache_or_the_not_found_table() -> None:
    mapped = set(json.loads((DATA / "unseen" / "model_ids.json").read_text()).values())
    catalog = {e.model_id for e in catalog_entries()}
    cached = {_repo_id(p) for p in REPOS}
    not_found = README.split("## Repo ids whose config.json was not found", 1)[1]
    missing = sorted(
        r for r in mapped - catalog - cached if f"| `{r}` |" not in not_found.split("\n## ", 1)[0]
    )
    assert not missing, f"repo ids with no config and not listed as not found: {missing}"
