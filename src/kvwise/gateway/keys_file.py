"""The API keys file: who may ask, under which name, within which limits.

YAML (a JSON file is YAML too): the format operators already write for Kubernetes, with
comments, and `pyyaml` is a dependency of kvwise anyway (`kvwise deploy`). TOML would need a
second parser on Python 3.10. A file that is not a YAML mapping is read as the older format,
one key per line (`#` comments), each key named by a digest of itself.

    defaults:            # for every key that does not set its own; all optional
      rate_rps: 5        # requests per second, sustained (token bucket)
      burst: 10          # requests at once above that rate
      max_concurrency: 8 # requests in progress (queued or running) at once
      queue_share: 0.25  # at most this share of the gateway's queue (--max-queue)
      weight: 1          # share of the KV tokens served when keys compete (fair queue)
    keys:
      - name: team-a     # what /metrics and the logs show; the key itself is never shown
        key: sk-team-a-...
        rate_rps: 20
      - name: batch
        key: sk-batch-...
        weight: 0.5

Validated once per read (pydantic, unknown fields refused); a bad file is one line naming the
field, e.g. `keys.yaml: keys[1].rate_rps: Input should be greater than 0`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from kvwise.errors import UsageError

KeyText = Annotated[
    str, StringConstraints(strip_whitespace=True, min_length=16)
]  # guessing stays hopeless
Name = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")]


class _Limits(BaseModel):
    model_config = ConfigDict(extra="forbid")

    rate_rps: float | None = Field(default=None, gt=0)
    burst: int | None = Field(default=None, ge=1)
    max_concurrency: int | None = Field(default=None, ge=1)
    queue_share: float | None = Field(default=None, gt=0, le=1)
    weight: float | None = Field(default=None, gt=0)


class _Key(_Limits):
    name: Name
    key: KeyText


class _File(BaseModel):
    model_config = ConfigDict(extra="forbid")

    defaults: _Limits = _Limits()
    keys: list[_Key]


@dataclass(frozen=True)
class KeyLimits:
    """Per-key limits; None: not limited (beyond the gateway-wide flags)."""

    rate_rps: float | None = None
    burst: int | None = None
    max_concurrency: int | None = None
    queue_share: float | None = None
    weight: float = 1.0


@dataclass(frozen=True)
class KeyEntry:
    name: str
    key: str
    limits: KeyLimits = KeyLimits()


def name_of_unnamed_key(key: str) -> str:
    """A key given without a name (--api-key, a one-key-per-line file) is shown by a digest:
    stable across reloads, and telling nothing about the key."""
    return "key-" + hashlib.blake2b(key.encode(), digest_size=4).hexdigest()


def read_keys_file(path: Path) -> tuple[KeyEntry, ...]:
    """The keys of `path`, or UsageError in one line (unreadable, not valid, duplicates)."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or "not UTF-8 text"
        raise UsageError(f"cannot read keys file {path}: {reason}") from exc
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise UsageError(f"keys file {path}: not valid YAML{where}") from None
    if not isinstance(document, dict):
        return _read_lines(text)
    entries = _validated(path, document)
    _check_unique(path, entries)
    return entries


def _read_lines(text: str) -> tuple[KeyEntry, ...]:
    keys = (line.strip() for line in text.splitlines())
    return tuple(KeyEntry(name_of_unnamed_key(k), k) for k in keys if k and not k.startswith("#"))


def _validated(path: Path, document: dict[str, Any]) -> tuple[KeyEntry, ...]:
    try:
        parsed = _File.model_validate(document)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error["loc"])
        raise UsageError(f"keys file {path}: {where.lstrip('.')}: {error['msg']}") from None
    defaults = parsed.defaults.model_dump()
    entries = []
    for key in parsed.keys:
        own = key.model_dump(exclude={"name", "key"}, exclude_none=True)
        merged = {k: v for k, v in {**defaults, **own}.items() if v is not None}
        entries.append(KeyEntry(key.name, key.key, KeyLimits(**merged)))
    return tuple(entries)


def _check_unique(path: Path, entries: tuple[KeyEntry, ...]) -> None:
    names: set[str] = set()
    keys: set[str] = set()
    for i, entry in enumerate(entries):
        if entry.name in names:
            raise UsageError(f"keys file {path}: keys[{i}].name: {entry.name!r} is used twice")
        if entry.key in keys:  # two names for one key: which limits would apply?
            raise UsageError(f"keys file {path}: keys[{i}].key: the same key is listed twice")
        names.add(entry.name)
        keys.add(entry.key)
