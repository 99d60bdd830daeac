"""config.json and the weight size of a hub model, with the standard library alone.

No optional dependency: `urllib.request` with TLS verification (the default SSL context), a
~3 s timeout per request, `HF_TOKEN` (or the token file `huggingface-cli login` writes) as a
bearer token that is never forwarded on a redirect, and `HF_ENDPOINT` for mirrors. The weight
size comes from `model.safetensors.index.json` (`metadata.total_size`), else from the header of a
single `model.safetensors`, read with two HTTP Range requests (8 bytes, then the header).

Files are fetched from `{endpoint}/{org}/{name}/resolve/main/{file}`, the URL huggingface_hub
itself uses. `HF_HUB_OFFLINE=1` means no connection at all; an unreachable hub fails in about a
second instead of spending the request timeout on every file.
"""

from __future__ import annotations

import json
import os
import socket
import ssl
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from kvwise.core.models import ModelSpec
from kvwise.core.safetensors_meta import (
    HEADER_LENGTH_BYTES,
    INDEX_FILE,
    SINGLE_FILE,
    header_length,
    held_bytes,
    index_bytes,
    is_held_as_stored,
    parse_header,
)
from kvwise.errors import DataError, UnknownModelError

DEFAULT_ENDPOINT = "https://huggingface.co"
REQUEST_TIMEOUT_S = 3.0
CONNECT_TIMEOUT_S = 1.0
MAX_CONFIG_BYTES = 10_000_000
_TRUE = ("1", "true", "yes", "on")  # huggingface_hub's reading of boolean variables


def is_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in _TRUE


def endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def _token() -> str | None:
    if os.environ.get("HF_TOKEN"):
        return os.environ["HF_TOKEN"].strip()
    home = Path(os.environ.get("HF_HOME") or "~/.cache/huggingface").expanduser()
    path = Path(os.environ.get("HF_TOKEN_PATH") or home / "token").expanduser()
    try:
        return path.read_text().strip() or None
    except OSError:
        return None


def _reachable(url: str) -> bool:
    """One TCP connection to the endpoint; offline machines fail at DNS at once."""
    parts = urllib.parse.urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        socket.create_connection((parts.hostname or "", port), timeout=CONNECT_TIMEOUT_S).close()
    except OSError:
        return False
    return True


def _file_url(model_id: str, filename: str) -> str:
    return f"{endpoint()}/{urllib.parse.quote(model_id)}/resolve/main/{filename}"


def _request(url: str, byte_range: tuple[int, int] | None = None) -> urllib.request.Request:
    request = urllib.request.Request(url, headers={"User-Agent": "kvwise"})
    if byte_range is not None:
        request.add_header("Range", f"bytes={byte_range[0]}-{byte_range[1]}")
    token = _token()
    if token:
        # unredirected: the token goes to the hub only, not to the CDN a file redirects to
        request.add_unredirected_header("Authorization", f"Bearer {token}")
    return request


def _get(url: str, limit_bytes: int, byte_range: tuple[int, int] | None = None) -> bytes | None:
    """The body (at most `limit_bytes` read), None on 404; UnknownModelError on other failures."""
    context = ssl.create_default_context()
    try:
        with urllib.request.urlopen(
            _request(url, byte_range), timeout=REQUEST_TIMEOUT_S, context=context
        ) as response:
            body: bytes = response.read(limit_bytes)
            return body
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        if exc.code in (401, 403):
            raise UnknownModelError(
                f"the hub refused it (HTTP {exc.code}: no such repository, or gated/private: "
                "set HF_TOKEN)"
            ) from exc
        raise UnknownModelError(f"the hub answered HTTP {exc.code}") from exc
    except (urllib.error.URLError, OSError) as exc:
        raise UnknownModelError(f"the hub did not answer ({exc})") from exc


def fetch_config(model_id: str) -> dict[str, Any]:
    """config.json of `org/name` on the hub; UnknownModelError saying why when there is none."""
    if is_offline():
        raise UnknownModelError("HF_HUB_OFFLINE is set, the hub was not asked")
    if not _reachable(endpoint()):
        raise UnknownModelError(f"the hub ({endpoint()}) is not reachable")
    body = _get(_file_url(model_id, "config.json"), MAX_CONFIG_BYTES)
    if body is None:
        raise UnknownModelError("not on the hub (HTTP 404)")
    try:
        config = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataError(f"{model_id}: the hub's config.json is not JSON ({exc})") from exc
    if not isinstance(config, dict):
        raise DataError(f"{model_id}: the hub's config.json is not a JSON object")
    return config


def _single_file_bytes(model_id: str, spec: ModelSpec) -> int | None:
    url = _file_url(model_id, SINGLE_FILE)
    first = _get(url, HEADER_LENGTH_BYTES, (0, HEADER_LENGTH_BYTES - 1))
    if first is None:
        return None
    length = header_length(first)
    raw = _get(url, length, (HEADER_LENGTH_BYTES, HEADER_LENGTH_BYTES + length - 1))
    return None if raw is None else held_bytes(parse_header(raw), spec) or None


def fetch_checkpoint_bytes(model_id: str, spec: ModelSpec) -> int | None:
    """The hub checkpoint's weight bytes as vLLM holds them; None when the hub cannot say."""
    if not is_held_as_stored(spec):
        return None
    try:
        body = _get(_file_url(model_id, INDEX_FILE), MAX_CONFIG_BYTES)
        if body is not None:
            index = json.loads(body)
            return index_bytes(index, spec) if isinstance(index, dict) else None
        return _single_file_bytes(model_id, spec)
    except (UnknownModelError, DataError, ValueError, KeyError, TypeError):
        return None  # the config is known: without a size, plan from the parameter count
