"""The real start-up records (tests/data/validation, public logs with their sources), as a user pastes them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parents[1] / "data" / "validation" / "vllm_startup_logs.jsonl"


def load(path: Path = DATA) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def by_id(record_id: str) -> dict[str, Any]:
    return next(record for record in load() if record["id"] == record_id)


def pasted(record: dict[str, Any]) -> bytes:
    """What a user pastes: the log excerpt and the error text."""
    return "\n".join(filter(None, (record["excerpt"], record["error_text"]))).encode()
