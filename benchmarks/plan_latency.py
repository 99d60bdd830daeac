"""`kvwise plan` from a cold process, side by side with kvfit and llmfit on the same config.json.

    python3 -m venv .venv-peers && .venv-peers/bin/pip install kvfit llmfit
    .venv/bin/python benchmarks/plan_latency.py [--runs 15] [--peers .venv-peers] [--out FILE]

Every tool plans Qwen2.5-7B-Instruct at 32k context on one H100 80GB from one local
config.json (written from kvwise's offline catalog into a scratch folder):
- kvwise reads the folder (`kvwise plan DIR`);
- kvfit reads only from the Hugging Face hub, so its hub address (`kvfit.hf.HF_BASE`) is
  pointed at a loopback server that serves that config.json and the repository metadata
  (weights counted from the parameters, bf16) — a local read, like kvwise's;
- llmfit (a Rust binary) plans only models of its database; `LLMFIT_CUSTOM_MODELS` adds one
  entry built from the same config.json.
The runs are interleaved (one of each tool in turn, the order rotating), so a busy machine
slows all three alike. Every Python tool reads its modules' bytecode, as after a pip install
(which byte-compiles what it installs): the untimed first run of each writes it into a scratch
folder (PYTHONPYCACHEPREFIX), also where the environment says PYTHONDONTWRITEBYTECODE, which
would otherwise leave kvwise's sources (a checkout, an editable install) compiled anew in every
run while kvfit's installed bytecode is read. `--no-bytecode-cache` keeps the environment's
setting, as every run before this option did. It prints each tool's median and
worst wall time and kvwise's ratio to each peer's median; `--out` also writes them with the
date, machine and command.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import http.server
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

REPO = Path(__file__).resolve().parents[1]
CATALOG_ENTRY = REPO / "src/kvwise/core/data/models/Qwen--Qwen2.5-7B-Instruct.json"
REPO_ID = "local/qwen2.5-7b-instruct"  # the name each peer is given for the local config
CONTEXT = 32768
# kvwise's console script beside this Python (as a user runs it), else `python -m kvwise.cli`
_SCRIPT = Path(sys.executable).with_name("kvwise")
KVWISE = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "kvwise.cli"]
# kvfit's console script, with the hub address taken from the first argument
KVFIT = "import sys, kvfit.hf as h; h.HF_BASE = sys.argv.pop(1); from kvfit.cli import main; sys.exit(main())"


def dense_parameters(config: dict[str, int]) -> int:
    """Parameters of a dense decoder with q/k/v biases (Qwen2): what the hub's metadata
    reports for the checkpoint, which kvfit sizes the weights from."""
    hidden, layers, vocab = config["hidden_size"], config["num_hidden_layers"], config["vocab_size"]
    head_dim = hidden // config["num_attention_heads"]
    kv = config["num_key_value_heads"] * head_dim
    attention = hidden * hidden + hidden + 2 * (hidden * kv + kv) + hidden * hidden  # q, k, v, o
    mlp = 3 * hidden * config["intermediate_size"]  # gate, up, down
    per_layer = attention + mlp + 2 * hidden  # and two RMSNorm weights
    embeddings = vocab * hidden * (1 if config.get("tie_word_embeddings") else 2)
    return embeddings + layers * per_layer + hidden  # and the final norm


class _Hub(http.server.BaseHTTPRequestHandler):
    """The two hub answers kvfit asks for: config.json and the repository's metadata."""

    config: ClassVar[dict[str, object]] = {}
    metadata: ClassVar[dict[str, object]] = {}

    def do_GET(self) -> None:
        body = self.config if self.path.endswith("/config.json") else self.metadata
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@contextlib.contextmanager
def local_hub(config: dict[str, int]) -> Iterator[str]:
    _Hub.config = dict(config)
    parameters = {"BF16": dense_parameters(config)}
    _Hub.metadata = {"sha": "local", "siblings": [], "safetensors": {"parameters": parameters}}
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


def llmfit_entry(config: dict[str, int]) -> dict[str, object]:
    parameters = dense_parameters(config)
    return {
        "name": REPO_ID,
        "provider": "local",
        "parameter_count": f"{parameters / 1e9:.1f}B",
        "parameters_raw": parameters,
        "min_ram_gb": 16.0,
        "recommended_ram_gb": 24.0,
        "min_vram_gb": round(parameters * 2 / 1e9, 1),
        "quantization": "F16",
        "format": "safetensors",
        "context_length": config["max_position_embeddings"],
        "use_case": "Instruction following, chat",
        "capabilities": [],
        "languages": ["en"],
        "pipeline_tag": "text-generation",
        "architecture": config["model_type"],
        "num_hidden_layers": config["num_hidden_layers"],
        "num_attention_heads": config["num_attention_heads"],
        "num_key_value_heads": config["num_key_value_heads"],
        "head_dim": config["hidden_size"] // config["num_attention_heads"],
        "hidden_size": config["hidden_size"],
        "vocab_size": config["vocab_size"],
    }


def commands(model_dir: Path, hub_url: str, peers: Path) -> dict[str, list[str]]:
    return {
        "kvwise": [
            *KVWISE, "plan", str(model_dir), "--gpu", "h100-sxm",
            "--max-model-len", str(CONTEXT), "--json",
        ],
        "kvfit": [
            str(peers / "bin/python"), "-c", KVFIT, hub_url, REPO_ID, "--hardware", "h100-80",
            "--gpus", "1", "--context", str(CONTEXT), "--json",
        ],
        "llmfit": [str(peers / "bin/llmfit"), "plan", REPO_ID, "--context", str(CONTEXT), "--json"],
    }  # fmt: skip


def timed(command: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall, CPU) seconds of one cold process: the CPU time (user + system) is what a busy
    machine's other work cannot add to."""
    cpu_before = _children_cpu_s()
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{command[0]} failed ({done.returncode}): {done.stderr.strip()[-400:]}")
    return elapsed, _children_cpu_s() - cpu_before


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure(runs: int, peers: Path, bytecode_cache: bool) -> dict[str, list[tuple[float, float]]]:
    config = json.loads(CATALOG_ENTRY.read_text())["config"]
    with tempfile.TemporaryDirectory() as scratch, local_hub(config) as hub_url:
        model_dir = Path(scratch) / "qwen2.5-7b-instruct"
        model_dir.mkdir()
        (model_dir / "config.json").write_text(json.dumps(config))
        custom = Path(scratch) / "llmfit_custom_models.json"
        custom.write_text(json.dumps([llmfit_entry(config)]))
        env = os.environ | {"LLMFIT_CUSTOM_MODELS": str(custom), "HOME": scratch}
        if bytecode_cache:  # one bytecode folder for all: the untimed run below fills it
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            env["PYTHONPYCACHEPREFIX"] = str(Path(scratch) / "pycache")
        tools = commands(model_dir, hub_url, peers)
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in tools}
        names = list(tools)
        for name in names:  # one untimed run each: files into the page cache
            timed(tools[name], env)
        for i in range(runs):
            for name in names[i % 3 :] + names[: i % 3]:
                times[name].append(timed(tools[name], env))
    return times


def report(
    times: dict[str, list[tuple[float, float]]], runs: int, bytecode_cache: bool
) -> list[str]:
    wall = {name: statistics.median(w for w, _ in t) for name, t in times.items()}
    cpu = {name: statistics.median(c for _, c in t) for name, t in times.items()}
    lines = [f"{runs} cold processes each, interleaved; medians (worst wall in brackets)"]
    lines.append(
        "bytecode: read from a cache each tool's first (untimed) run wrote"
        if bytecode_cache
        else f"bytecode: as the environment has it (PYTHONDONTWRITEBYTECODE="
        f"{os.environ.get('PYTHONDONTWRITEBYTECODE', '')!r})"
    )
    lines += [
        f"{name:7} wall {wall[name] * 1000:5.0f} ms ({max(w for w, _ in t) * 1000:5.0f})"
        f"   CPU {cpu[name] * 1000:5.0f} ms"
        for name, t in times.items()
    ]
    for peer in ("kvfit", "llmfit"):
        lines.append(
            f"kvwise / {peer}: wall {wall['kvwise'] / wall[peer]:.2f}x, CPU {cpu['kvwise'] / cpu[peer]:.2f}x"
        )
    fastest = min(("kvfit", "llmfit"), key=wall.__getitem__)
    lines.append(
        f"kvwise / fastest peer by wall ({fastest}): {wall['kvwise'] / wall[fastest]:.2f}x (bar: <= 1.0)"
    )
    return lines


def versions(peers: Path) -> str:
    found = subprocess.run(
        [str(peers / "bin/python"), "-m", "pip", "list", "--format=json"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    wanted = {p["name"]: p["version"] for p in json.loads(found.stdout)}
    return ", ".join(f"{name} {wanted.get(name, '?')}" for name in ("kvfit", "llmfit"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument(
        "--peers", type=Path, default=REPO / ".venv-peers", help="kvfit/llmfit venv"
    )
    parser.add_argument("--out", type=Path, help="also write the results here")
    parser.add_argument(
        "--no-bytecode-cache",
        action="store_true",
        help="keep the environment's PYTHONDONTWRITEBYTECODE (see the docstring)",
    )
    args = parser.parse_args()
    if not (args.peers / "bin/llmfit").exists():
        print(f"no kvfit/llmfit in {args.peers}: see this script's docstring", file=sys.stderr)
        return 2
    cache = not args.no_bytecode_cache
    lines = report(measure(args.runs, args.peers, cache), args.runs, cache)
    print("\n".join(lines))
    if args.out:
        load = ", ".join(f"{v:.1f}" for v in os.getloadavg())
        head = [
            f"date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC",
            f"machine: {platform.machine()}, {os.cpu_count()} CPUs, load average {load} at the end,"
            f" {platform.system()} {platform.release()}, Python {platform.python_version()}",
            f"peers: {versions(args.peers)} (PyPI)",
            f"command: python benchmarks/plan_latency.py {' '.join(sys.argv[1:])}",
            "model: Qwen2.5-7B-Instruct config.json (kvwise's catalog), 32k context, one H100 80GB",
            "",
        ]
        args.out.write_text("\n".join(head + lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
