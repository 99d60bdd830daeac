"""What a relay adds to time-to-first-token, and the CPU it spends per relayed chunk: kvwise's
gateway with each candidate upstream HTTP client, vllm-router and a byte pump, in one run.

Against a fast local FAKE upstream (`tests/fake_upstream.py`: canned tokens at a fixed pace,
not an engine). That is deliberate: the figure is the relay's own cost, which an engine's jitter
(tens of ms on a real model) would drown. Every path takes the same load in turn, round after
round, so drift on a shared machine hits them all:

    direct        the load generator straight at the upstream: the reference
    pump          `byte_pump.py`, bytes copied both ways, nothing parsed: the floor of a Python
                  relay on this machine (one more process, two more hops)
    vllm-router   the Rust router (PyPI `vllm-router`), round robin over the one upstream
    kvwise-X      `kvwise serve` as users run it, with upstream HTTP client X
                  (`gateway_variant.py`: `shipped`, its own HTTP/1.1 client on asyncio;
                  `aiohttp`; `httpx` with its pool uncapped)

Per round and path: added TTFT p50 = the path's TTFT p50 - direct's in the same round; CPU per
chunk = the relay process's CPU time (Linux /proc, every thread) over the SSE events its clients
received. The report gives the median over rounds, and each relay's ratio to vllm-router.

The default pace (50 ms to the first token, then 30 ms per token, 64 tokens) is a 7B model on
one GPU decoding a batch of 64. The load generator is asyncio over raw sockets, so the client
adds as little as possible. Usage:

    python benchmarks/gateway_overhead.py [--streams 64,256] [--seconds 6] [--rounds 3]
        [--clients shipped,aiohttp,httpx] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BODY_TEMPLATE = {
    "model": "fake",
    "messages": [{"role": "user", "content": "Say something."}],
    "stream": True,
    "max_tokens": 64,
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_port(port: int, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing listening on port {port}")


@dataclass
class Tally:
    ttft_s: list[float] = field(default_factory=list)
    num_events: int = 0
    num_errors: int = 0


async def one_stream(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes, tally: Tally
) -> None:
    """One streamed request on a kept-alive connection, as the openai client (httpx) does."""
    started = time.perf_counter()
    writer.write(request)
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200") or b"chunked" not in head.lower():
        raise ConnectionError(head[:60].decode(errors="replace"))
    buffer, is_first = b"", True
    while not buffer.endswith(b"\r\n0\r\n\r\n"):  # the last chunk of the body
        chunk = await reader.read(65536)
        if not chunk:
            raise ConnectionError("closed mid-response")
        buffer += chunk
        if is_first and b'"content": "t' in buffer:  # the first token event
            tally.ttft_s.append(time.perf_counter() - started)
            is_first = False
    tally.num_events += buffer.count(b"data: ")


async def drive(port: int, num_streams: int, seconds: float, stagger_s: float) -> Tally:
    body = json.dumps(BODY_TEMPLATE).encode()
    request = (
        "POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\n"
        f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
    ).encode() + body
    tally = Tally()
    deadline = time.perf_counter() + seconds

    async def worker(index: int) -> None:
        # staggered starts: requests arrive spread over one request's duration, as from
        # independent clients, not all in the same millisecond
        await asyncio.sleep(stagger_s * index / num_streams)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            while time.perf_counter() < deadline:
                try:
                    await one_stream(reader, writer, request, tally)
                except (ConnectionError, asyncio.IncompleteReadError):
                    tally.num_errors += 1
                    writer.close()
                    reader, writer = await asyncio.open_connection("127.0.0.1", port)
        finally:
            writer.close()

    await asyncio.gather(*(worker(i) for i in range(num_streams)))
    return tally


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process, all its threads (Linux); 0 elsewhere."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Path:
    name: str
    port: int
    proc: subprocess.Popen[bytes] | None  # the relay whose CPU is counted; None for direct


def start(
    args: argparse.Namespace, clients: list[str], log_dir: str
) -> tuple[list[subprocess.Popen[bytes]], list[Path]]:
    python, env = sys.executable, {**os.environ, "PYTHONPATH": os.pathsep.join(
        [os.path.join(ROOT, "src"), ROOT, os.environ.get("PYTHONPATH", "")])}  # fmt: skip
    procs: list[subprocess.Popen[bytes]] = []

    def spawn(name: str, command: list[str], port: int) -> subprocess.Popen[bytes]:
        with open(os.path.join(log_dir, f"{name}.log"), "wb") as log:
            proc = subprocess.Popen(command, stdout=log, stderr=log, env=env, cwd=ROOT)
        procs.append(proc)
        wait_port(port)
        return proc

    up = free_port()
    spawn("upstream", [python, "-m", "tests.fake_upstream", "--port", str(up),
                       "--ttft-ms", str(args.ttft_ms), "--itl-ms", str(args.itl_ms)], up)  # fmt: skip
    paths = [Path("direct", up, None)]
    port = free_port()
    paths.append(Path("pump", port, spawn(
        "pump", [python, os.path.join(HERE, "byte_pump.py"), str(port), str(up)], port)))  # fmt: skip
    router = shutil.which("vllm-router") or os.path.join(os.path.dirname(python), "vllm-router")
    if os.path.exists(router):
        port = free_port()
        paths.append(Path("vllm-router", port, spawn("vllm-router", [
            router, "--worker-urls", f"http://127.0.0.1:{up}", "--port", str(port),
            "--policy", "round_robin", "--log-level", "warning",
            "--max-concurrent-requests", "4096", "--queue-size", "4096",
            # its metrics listener defaults to port 29000: two runs at once would collide
            "--prometheus-port", str(free_port())], port)))  # fmt: skip
    else:
        print("vllm-router not installed (pip install vllm-router): not measured", file=sys.stderr)
    for client in clients:
        port = free_port()
        store = os.path.join(log_dir, f"sessions-{client}.sqlite3")
        paths.append(Path(f"kvwise-{client}", port, spawn(f"kvwise-{client}", [
            python, os.path.join(HERE, "gateway_variant.py"), client, "serve",
            "--upstream", f"http://127.0.0.1:{up}", "--port", str(port),
            "--kv-budget-tokens", "10000000", "--max-model-len", "4096",
            "--max-queue", "10000", "--session-store", store], port)))  # fmt: skip
    return procs, paths


@dataclass
class Phase:
    ttft_p50_ms: float
    ttft_p99_ms: float
    num_requests: int
    num_errors: int
    chunks_per_s: float
    cpu_us_per_chunk: float | None


def measure(path: Path, streams: int, seconds: float, stagger_s: float) -> Phase:
    before_s = cpu_s(path.proc.pid) if path.proc else 0.0
    started = time.perf_counter()
    tally = asyncio.run(drive(path.port, streams, seconds, stagger_s))
    elapsed_s = time.perf_counter() - started
    used_s = cpu_s(path.proc.pid) - before_s if path.proc else 0.0
    return Phase(
        1000 * percentile(tally.ttft_s, 0.50),
        1000 * percentile(tally.ttft_s, 0.99),
        len(tally.ttft_s),
        tally.num_errors,
        tally.num_events / elapsed_s,
        1e6 * used_s / max(1, tally.num_events) if path.proc else None,
    )


def run(args: argparse.Namespace) -> dict[str, object]:
    clients = args.clients.split(",")
    log_dir = tempfile.mkdtemp(prefix="gateway-overhead-")
    procs, paths = start(args, clients, log_dir)
    tokens = int(BODY_TEMPLATE["max_tokens"])  # type: ignore[call-overload]
    stagger_s = (args.ttft_ms + args.itl_ms * (tokens - 1)) / 1000
    by_streams: dict[str, object] = {}
    try:
        for streams in (int(s) for s in args.streams.split(",")):
            for path in paths:  # warm-up: every stream started and its connections open
                asyncio.run(drive(path.port, streams, 2 * stagger_s, stagger_s))
            rounds: list[dict[str, Phase]] = []
            for _ in range(args.rounds):
                rounds.append({p.name: measure(p, streams, args.seconds, stagger_s) for p in paths})
            by_streams[str(streams)] = summarise(rounds, [p.name for p in paths])
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
    return {
        "setup": {
            "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
            "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}",
            "python": platform.python_version(),
            "command": "python " + " ".join(sys.argv),
            "seconds_per_phase": args.seconds,
            "rounds": args.rounds,
            "upstream_ttft_ms": args.ttft_ms,
            "upstream_itl_ms": args.itl_ms,
            "tokens_per_stream": tokens,
            "load_average_1m_at_end": round(os.getloadavg()[0], 2),
        },
        "streams": by_streams,
    }


def summarise(rounds: list[dict[str, Phase]], names: list[str]) -> dict[str, dict[str, object]]:
    """Medians over rounds; added TTFT against direct in the same round."""
    table: dict[str, dict[str, object]] = {}
    for name in names:
        phases = [r[name] for r in rounds]
        added = [r[name].ttft_p50_ms - r["direct"].ttft_p50_ms for r in rounds]
        added99 = [r[name].ttft_p99_ms - r["direct"].ttft_p99_ms for r in rounds]
        cpu = [p.cpu_us_per_chunk for p in phases if p.cpu_us_per_chunk is not None]
        table[name] = {
            "ttft_p50_ms": statistics.median(p.ttft_p50_ms for p in phases),
            "added_ttft_p50_ms": statistics.median(added),
            "added_ttft_p50_ms_per_round": [round(a, 2) for a in added],
            "added_ttft_p99_ms": statistics.median(added99),
            "cpu_us_per_chunk": statistics.median(cpu) if cpu else None,
            "chunks_per_s": statistics.median(p.chunks_per_s for p in phases),
            "requests": sum(p.num_requests for p in phases),
            "errors": sum(p.num_errors for p in phases),
        }
    router = table.get("vllm-router")
    for name, row in table.items():
        if router is not None and name != "direct":
            row["added_ttft_p50_vs_router"] = _ratio(
                row["added_ttft_p50_ms"], router["added_ttft_p50_ms"]
            )
            row["cpu_per_chunk_vs_router"] = _ratio(
                row["cpu_us_per_chunk"], router["cpu_us_per_chunk"]
            )
    return table


def _ratio(a: object, b: object) -> float | None:
    if not isinstance(a, float) or not isinstance(b, float) or b <= 0:
        return None
    return a / b


def _fmt(value: object, spec: str) -> str:
    """`value` as `spec` (e.g. "10.2f"); a dash as wide when there is none (direct's CPU)."""
    if isinstance(value, (int, float)):
        return format(value, spec)
    return "-".rjust(int(spec.split(".")[0]))


def report(result: dict[str, object]) -> str:
    setup = result["setup"]
    assert isinstance(setup, dict)
    lines = [f"# {setup['date_utc']} UTC; {setup['machine']}; Python {setup['python']}",
             f"# command: {setup['command']}",
             f"# {setup['rounds']} rounds x {setup['seconds_per_phase']} s per path; load average "
             f"at the end {setup['load_average_1m_at_end']}; medians over rounds", ""]  # fmt: skip
    streams = result["streams"]
    assert isinstance(streams, dict)
    for count, table in streams.items():
        lines.append(f"{count} concurrent streams")
        lines.append(
            f"{'':18}{'TTFT p50':>9}{'added p50':>10}{'added p99':>10}{'CPU/chunk':>10}"
            f"{'chunks/s':>9}{'errors':>7}{'p50 / router':>13}{'CPU / router':>13}"
        )
        for name, row in table.items():
            lines.append(
                f"{name:18}{_fmt(row['ttft_p50_ms'], '9.2f')}"
                f"{_fmt(row['added_ttft_p50_ms'], '10.2f')}{_fmt(row['added_ttft_p99_ms'], '10.2f')}"
                f"{_fmt(row['cpu_us_per_chunk'], '10.1f')}{_fmt(row['chunks_per_s'], '9.0f')}"
                f"{row['errors']:>7}{_fmt(row.get('added_ttft_p50_vs_router'), '13.2f')}"
                f"{_fmt(row.get('cpu_per_chunk_vs_router'), '13.2f')}"
            )
        lines.append("  (ms, except CPU per relayed chunk in us; added = minus direct, same round)")
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", default="64,256", help="comma-separated stream counts")
    parser.add_argument("--seconds", type=float, default=6.0, help="per path and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--clients", default="shipped,aiohttp,httpx")
    parser.add_argument("--ttft-ms", type=float, default=50.0, help="the fake upstream's")
    parser.add_argument("--itl-ms", type=float, default=30.0, help="the fake upstream's")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = run(args)
    print(json.dumps(result, indent=2) if args.json else report(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
