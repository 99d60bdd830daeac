"""The stdlib hub client against a loopback HTTP server standing in for the hub (HF_ENDPOINT):
config.json, the safetensors index, Range requests on a single file, 404s, slow answers, and
that nothing is asked while HF_HUB_OFFLINE is set."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from kvwise.cli import main
from kvwise.core import hub
from kvwise.core.catalog import load_model
from kvwise.errors import UnknownModelError
from tests.core.checkpoints import (
    awq_tensors,
    catalog_config,
    hf_cache_snapshot,
    tensor_bytes,
    write_safetensors,
)

BASE = "Qwen/Qwen2.5-7B-Instruct"
AWQ = {"bits": 4, "group_size": 128, "quant_method": "awq", "version": "gemm", "zero_point": True}


@dataclass
class FakeHub:
    """Files by URL path (`/org/name/resolve/main/file`), what was asked, and a delay."""

    files: dict[str, bytes] = field(default_factory=dict)
    requests: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    status: dict[str, int] = field(default_factory=dict)  # error codes by URL path
    redirects: dict[str, str] = field(default_factory=dict)  # URL path -> Location (a CDN)
    delay_s: float = 0.0

    def add(self, model_id: str, filename: str, body: bytes) -> None:
        self.files[f"/{model_id}/resolve/main/{filename}"] = body


def _handler(fake: FakeHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            fake.requests.append((self.path, dict(self.headers)))
            time.sleep(fake.delay_s)
            if self.path in fake.redirects:
                self.send_response(302)
                self.send_header("Location", fake.redirects[self.path])
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            body = fake.files.get(self.path)
            if body is None:
                self.send_error(fake.status.get(self.path, 404))
                return
            status, ranged = 200, self.headers.get("Range")
            if ranged:  # "bytes=a-b", inclusive, as RFC 9110 defines it
                start, end = (int(x) for x in ranged.removeprefix("bytes=").split("-"))
                status, body = 206, body[start : end + 1]
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    return Handler


@pytest.fixture
def fake_hub(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[FakeHub]:
    fake = FakeHub()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(fake))
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.server_address[1]}")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))  # no token file, an empty cache
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    yield fake
    server.shutdown()
    server.server_close()
    thread.join()


def _awq_config() -> bytes:
    return json.dumps(
        catalog_config(BASE) | {"torch_dtype": "float16", "quantization_config": AWQ}
    ).encode()


def test_config_and_index_from_the_hub(fake_hub: FakeHub) -> None:
    model_id = "acme/Qwen2.5-7B-Instruct-AWQ"
    tensors = awq_tensors(catalog_config(BASE))
    total = sum(tensor_bytes(d, s) for d, s in tensors.values())
    index = {"metadata": {"total_size": total}, "weight_map": dict.fromkeys(tensors, "m1.st")}
    fake_hub.add(model_id, "config.json", _awq_config())
    fake_hub.add(model_id, "model.safetensors.index.json", json.dumps(index).encode())

    spec = load_model(model_id)

    assert spec.quant is not None and spec.quant.method == "awq"
    assert spec.checkpoint_weight_bytes == total
    assert spec.source.startswith("hub:")


def test_single_safetensors_header_read_with_range_requests(
    fake_hub: FakeHub, tmp_path: Path
) -> None:
    model_id = "acme/Qwen2.5-7B-Instruct-AWQ-single"
    data_bytes = write_safetensors(tmp_path / "m.st", awq_tensors(catalog_config(BASE)))
    with (tmp_path / "m.st").open("rb") as f:
        header_end = 8 + int.from_bytes(f.read(8), "little")
        f.seek(0)
        # the hub's copy: header plus the first bytes of data (the rest is never asked for)
        fake_hub.add(model_id, "model.safetensors", f.read(header_end + 64))
    fake_hub.add(model_id, "config.json", _awq_config())

    spec = load_model(model_id)

    assert spec.checkpoint_weight_bytes == data_bytes
    ranges = [h.get("Range") for p, h in fake_hub.requests if p.endswith("model.safetensors")]
    assert ranges == ["bytes=0-7", f"bytes=8-{header_end - 1}"]


def test_hf_token_is_sent_as_bearer(fake_hub: FakeHub, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_test_token")
    fake_hub.add("acme/gated-7b", "config.json", json.dumps(catalog_config(BASE)).encode())
    load_model("acme/gated-7b")
    assert fake_hub.requests[0][1].get("Authorization") == "Bearer hf_test_token"


def test_no_request_at_all_while_offline(
    fake_hub: FakeHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    fake_hub.add("acme/online-only", "config.json", json.dumps(catalog_config(BASE)).encode())
    with pytest.raises(UnknownModelError, match="HF_HUB_OFFLINE"):
        load_model("acme/online-only")
    assert fake_hub.requests == []


def test_404_is_the_clear_unknown_model_line(
    fake_hub: FakeHub, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["plan", "acme/nope", "--gpu", "rtx4090"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "unknown model 'acme/nope'" in err and "HTTP 404" in err


def test_slow_hub_times_out_into_the_unknown_model_line(
    fake_hub: FakeHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(hub, "REQUEST_TIMEOUT_S", 0.2)
    fake_hub.delay_s = 1.0
    fake_hub.add("acme/slow", "config.json", json.dumps(catalog_config(BASE)).encode())
    start = time.perf_counter()
    with pytest.raises(UnknownModelError, match=r"unknown model 'acme/slow'.*did not answer"):
        load_model("acme/slow")
    assert time.perf_counter() - start < 1.0


def test_catalog_copy_is_used_without_asking_the_hub(fake_hub: FakeHub) -> None:
    # a verbatim catalog config.json is what the hub would send: no round trip on every plan
    assert load_model(BASE).num_layers == 28
    assert fake_hub.requests == []


def test_derived_catalog_entry_asks_the_hub_first(fake_hub: FakeHub) -> None:
    # the catalog's AWQ entry is derived (base shapes + documented config): the hub's own wins
    model_id = "Qwen/Qwen2.5-7B-Instruct-AWQ"
    config = json.loads(_awq_config()) | {"quantization_config": AWQ | {"group_size": 64}}
    fake_hub.add(model_id, "config.json", json.dumps(config).encode())
    spec = load_model(model_id)
    assert spec.quant is not None and spec.quant.group_size == 64


def test_hf_cache_is_read_before_the_hub(
    fake_hub: FakeHub, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    hf_cache_snapshot(tmp_path / "cache", "acme/cached-7b", catalog_config(BASE), "c0de")
    fake_hub.add("acme/cached-7b", "config.json", b"{}")
    assert load_model("acme/cached-7b").source.startswith("hf-cache:")
    assert fake_hub.requests == []


def test_gated_repo_says_to_set_hf_token(fake_hub: FakeHub) -> None:
    fake_hub.status["/acme/gated/resolve/main/config.json"] = 401
    with pytest.raises(UnknownModelError, match=r"HTTP 401.*set HF_TOKEN"):
        load_model("acme/gated")


def test_redirect_to_the_cdn_keeps_the_range_and_drops_the_token(
    fake_hub: FakeHub, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # the hub answers weight files with a redirect to its CDN; the token must stay with the hub
    monkeypatch.setenv("HF_TOKEN", "hf_secret")
    model_id = "acme/redirected-awq"
    write_safetensors(tmp_path / "m.st", {"model.norm.weight": ("F16", (64,))})
    fake_hub.add(model_id, "config.json", _awq_config())
    fake_hub.redirects[f"/{model_id}/resolve/main/model.safetensors"] = "/cdn/blob"
    fake_hub.files["/cdn/blob"] = (tmp_path / "m.st").read_bytes()

    assert load_model(model_id).checkpoint_weight_bytes == 128

    cdn = [headers for path, headers in fake_hub.requests if path == "/cdn/blob"]
    assert [h.get("Range") for h in cdn] == [
        "bytes=0-7",
        f"bytes=8-{len(fake_hub.files['/cdn/blob']) - 129}",
    ]
    assert all("Authorization" not in h for h in cdn)
