"""kvwise's data files (`core/data/`: GPUs, models, vLLM release rules), read from the package
folder itself. A plain path rather than importlib.resources: kvwise is never imported from a
zip archive (the simulator is a compiled extension), and importlib.resources brought tempfile,
zipfile, shutil and random into every `kvwise plan` for nothing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

DATA_DIR = Path(__file__).parent / "data"


def read_json(name: str) -> Any:
    """The parsed contents of `core/data/NAME`."""
    return json.loads((DATA_DIR / name).read_text(encoding="utf-8"))
