"""The files a target produces, and writing them (nothing else touches the disk)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Artefact:
    path: str  # relative to --out
    text: str
    is_executable: bool = False


@dataclass(frozen=True)
class Rendered:
    """What one target wrote and what the user runs next."""

    artefacts: tuple[Artefact, ...]
    next_steps: tuple[str, ...]
    notes: tuple[str, ...] = ()


def write(out_dir: Path, artefacts: tuple[Artefact, ...]) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for artefact in artefacts:
        path = out_dir / artefact.path
        path.write_text(artefact.text)
        if artefact.is_executable:
            path.chmod(0o755)
        written.append(path)
    return written
