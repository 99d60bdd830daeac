"""What the gateway adds to time-to-first-token at 64 concurrent streams, and what it relays.

Against a fast local FAKE upstream (`kvwise.gateway.fake_upstream`: canned tokens at a fixed
pace, not an engine). That is deliberate: the figure is the gateway's own cost, which an engine's
jitter (tens of ms on a real model) would drown. The same load runs straight at the upstream and
through the gateway in the same run, alternating in rounds, and the report gives both and their
difference and ratio:

    added TTFT p50 / p99 = TTFT percentile through the gateway - the same percentile direct
    relayed chunks/s     = SSE events the clients received per second, through / direct
    gateway's own time   = its `kvwise_gateway_ttft_overhead_seconds` histogram: request in ->
                           request out plus first token in -> first token out (bucket bounds)
    gateway CPU          = its process CPU time per relayed chunk (Linux /proc)

The end-to-end difference also holds what the extra process costs the operating system (one
more hop, scheduled on the same CPUs as the load generator and the upstream); the gateway's own
time does not. Two references separate them, both measured in the same run:

* a byte pump (`byte_pump.py`: bytes copied both ways, nothing parsed) in the gateway's place:
  what it adds is the floor of any Python relay on the machine;
* two CPU layouts, alternated round by round: `shared` (every process on every CPU: on a 2-core
  VM four busy processes evict each other's caches) and `own-core` (the relay under test on CPU
  1, the load generator and the upstream on CPU 0), as in a deployment where clients are
  remote and the engine's server has cores of its own.

The default pace (50 ms to the first token, then 30 ms per token, 64 tokens) is a 7B model on
one GPU decoding a batch of 64. Four processes: the fake upstream, the gateway (`kvwise serve`,
as users run it), the pump and this load generator (asyncio over raw sockets, so the client
adds as little as possible). Usage:

    .venv/bin/python benchmarks/gateway_overhead.py [--streams 64] [--seconds 8] [--rounds 3]
        [--layout shared|own-core|both]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

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


def wait_port(port: int, timeout_s: float = 30) -> None:
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


async def drive(
    port: int, num_streams: int, seconds: float, stagger_s: float = 0.0
) -> tuple[Tally, float]:
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

    started = time.perf_counter()
    await asyncio.gather(*(worker(i) for i in range(num_streams)))
    return tally, time.perf_counter() - started


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def start_servers(
    ttft_ms: float, itl_ms: float
) -> tuple[list[subprocess.Popen[bytes]], int, int, int]:
    upstream_port, gateway_port = free_port(), free_port()
    python = sys.executable
    upstream = subprocess.Popen(
        [python, "-m", "kvwise.gateway.fake_upstream", "--port", str(upstream_port),
         "--ttft-ms", str(ttft_ms), "--itl-ms", str(itl_ms)],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    wait_port(upstream_port)
    gateway = subprocess.Popen(
        [python, "-m", "kvwise.cli", "serve", "--upstream", f"http://127.0.0.1:{upstream_port}",
         "--port", str(gateway_port), "--kv-budget-tokens", "10000000", "--max-queue", "10000",
         "--session-store", os.path.join(tempfile.mkdtemp(), "sessions.sqlite3")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    wait_port(gateway_port)
    pump_port = free_port()
    pump = subprocess.Popen(
        [python, os.path.join(os.path.dirname(__file__), "byte_pump.py"), str(pump_port),
         str(upstream_port)],
    )  # fmt: skip
    wait_port(pump_port)
    return [upstream, gateway, pump], upstream_port, gateway_port, pump_port


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process (Linux); 0 elsewhere."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def overhead_percentiles_ms(port: int) -> tuple[float, float]:
    """p50 and p99 of the gateway's own TTFT-path time, as histogram bucket upper bounds."""
    import httpx

    buckets: list[tuple[float, float]] = []
    for line in httpx.get(f"http://127.0.0.1:{port}/metrics").text.splitlines():
        if line.startswith("kvwise_gateway_ttft_overhead_seconds_bucket"):
            bound = line.split('le="', 1)[1].split('"', 1)[0]
            buckets.append((float(bound), float(line.rsplit(" ", 1)[1])))
    total = buckets[-1][1]

    def bound_for(q: float) -> float:
        return 1000 * next(b for b, count in buckets if count >= q * total)

    return bound_for(0.50), bound_for(0.99)


def summarise(tallies: list[Tally], elapsed_s: float) -> dict[str, float]:
    ttft = [t for tally in tallies for t in tally.ttft_s]
    return {
        "requests": len(ttft),
        "errors": sum(t.num_errors for t in tallies),
        "ttft_p50_ms": 1000 * percentile(ttft, 0.50),
        "ttft_p99_ms": 1000 * percentile(ttft, 0.99),
        "ttft_mean_ms": 1000 * statistics.fmean(ttft),
        "chunks_per_s": sum(t.num_events for t in tallies) / elapsed_s,
    }


LAYOUTS = ("shared", "own-core")


def set_affinity(pid: int, cpus: set[int]) -> None:
    """Every thread of the process (Linux: /proc/PID/task), not only its main one."""
    for task in os.listdir(f"/proc/{pid}/task"):
        os.sched_setaffinity(int(task), cpus)


def apply_layout(layout: str, upstream_pid: int, relay_pids: list[int]) -> None:
    """shared: every process on every CPU. own-core: the relay under test (gateway or pump) on
    CPU 1, the load generator and the upstream on CPU 0, as when clients are remote and the
    engine's server has cores of its own."""
    every = set(range(os.cpu_count() or 1))
    clients = every if layout == "shared" else {0}
    relays = every if layout == "shared" else {1}
    set_affinity(os.getpid(), clients)
    set_affinity(upstream_pid, clients)
    for pid in relay_pids:
        set_affinity(pid, relays)


def run_layout(
    args: argparse.Namespace, ports: dict[str, int], stagger_s: float
) -> dict[str, list[tuple[Tally, float]]]:
    """One round of each path under the current layout, direct first."""
    return {
        path: [asyncio.run(drive(port, args.streams, args.seconds, stagger_s))]
        for path, port in ports.items()
    }


def compare(results: dict[str, list[tuple[Tally, float]]]) -> dict[str, object]:
    summary = {
        path: summarise([t for t, _ in runs], sum(e for _, e in runs))
        for path, runs in results.items()
    }
    direct, gateway, pump = summary["direct"], summary["gateway"], summary["pump"]
    return {
        **summary,
        "added_ttft_p50_ms": gateway["ttft_p50_ms"] - direct["ttft_p50_ms"],
        "added_ttft_p99_ms": gateway["ttft_p99_ms"] - direct["ttft_p99_ms"],
        "byte_pump_added_ttft_p50_ms": pump["ttft_p50_ms"] - direct["ttft_p50_ms"],
        "byte_pump_added_ttft_p99_ms": pump["ttft_p99_ms"] - direct["ttft_p99_ms"],
        "chunks_per_s_ratio": gateway["chunks_per_s"] / direct["chunks_per_s"],
    }


def run(args: argparse.Namespace) -> dict[str, object]:
    procs, upstream_port, gateway_port, pump_port = start_servers(args.ttft_ms, args.itl_ms)
    upstream, gateway, pump = procs
    ports = {"direct": upstream_port, "pump": pump_port, "gateway": gateway_port}
    layouts = LAYOUTS if args.layout == "both" else (args.layout,)
    tokens = int(BODY_TEMPLATE["max_tokens"])  # type: ignore[call-overload]
    stagger_s = (args.ttft_ms + args.itl_ms * (tokens - 1)) / 1000
    results: dict[str, dict[str, list[tuple[Tally, float]]]] = {
        layout: {path: [] for path in ports} for layout in layouts
    }
    gateway_cpu_s = 0.0
    try:
        asyncio.run(drive(gateway_port, args.streams, 1.0))  # warm-up: connections, imports
        asyncio.run(drive(pump_port, args.streams, 1.0))
        for _ in range(args.rounds):  # alternate, so drift on a shared machine hits all
            for layout in layouts:
                apply_layout(layout, upstream.pid, [gateway.pid, pump.pid])
                before_s = cpu_s(gateway.pid)
                for path, runs in run_layout(args, ports, stagger_s).items():
                    results[layout][path] += runs
                gateway_cpu_s += cpu_s(gateway.pid) - before_s
        own_p50_ms, own_p99_ms = overhead_percentiles_ms(gateway_port)
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
    gateway_events = sum(t.num_events for r in results.values() for t, _ in r["gateway"])
    return {
        "setup": {
            "streams": args.streams,
            "seconds_per_phase": args.seconds,
            "rounds": args.rounds,
            "upstream_ttft_ms": args.ttft_ms,
            "upstream_itl_ms": args.itl_ms,
            "tokens_per_stream": BODY_TEMPLATE["max_tokens"],
            "cpus": os.cpu_count(),
            "load_average_1m_at_end": os.getloadavg()[0],
        },
        "layouts": {layout: compare(r) for layout, r in results.items()},
        "gateway_own_ttft_p50_ms_at_most": own_p50_ms,
        "gateway_own_ttft_p99_ms_at_most": own_p99_ms,
        "gateway_cpu_us_per_chunk": 1e6 * gateway_cpu_s / max(1, gateway_events),
    }


def report_layout(name: str, result: dict[str, object]) -> list[str]:
    d, p, g = result["direct"], result["pump"], result["gateway"]
    assert isinstance(d, dict) and isinstance(p, dict) and isinstance(g, dict)
    return [
        f"layout: {name}",
        f"{'':22}{'direct':>10}{'byte pump':>11}{'via gateway':>13}",
        f"{'requests':22}{d['requests']:>10}{p['requests']:>11}{g['requests']:>13}",
        f"{'errors':22}{d['errors']:>10}{p['errors']:>11}{g['errors']:>13}",
        f"{'TTFT p50 (ms)':22}{d['ttft_p50_ms']:>10.2f}{p['ttft_p50_ms']:>11.2f}"
        f"{g['ttft_p50_ms']:>13.2f}",
        f"{'TTFT p99 (ms)':22}{d['ttft_p99_ms']:>10.2f}{p['ttft_p99_ms']:>11.2f}"
        f"{g['ttft_p99_ms']:>13.2f}",
        f"{'relayed chunks/s':22}{d['chunks_per_s']:>10.0f}{p['chunks_per_s']:>11.0f}"
        f"{g['chunks_per_s']:>13.0f}",
        f"  added TTFT p50: {result['added_ttft_p50_ms']:.2f} ms (bar: < 1 ms), "
        f"p99: {result['added_ttft_p99_ms']:.2f} ms (bar: < 5 ms)",
        f"  a byte pump in the gateway's place adds: p50 "
        f"{result['byte_pump_added_ttft_p50_ms']:.2f} ms, "
        f"p99 {result['byte_pump_added_ttft_p99_ms']:.2f} ms",
        f"  chunks/s through the gateway / direct: {result['chunks_per_s_ratio']:.2f}",
        "",
    ]


def report(result: dict[str, object]) -> str:
    layouts = result["layouts"]
    assert isinstance(layouts, dict)
    lines = [line for name, r in layouts.items() for line in report_layout(name, r)]
    lines += [
        "gateway's own time on the TTFT path: "
        f"p50 <= {result['gateway_own_ttft_p50_ms_at_most']:g} ms, "
        f"p99 <= {result['gateway_own_ttft_p99_ms_at_most']:g} ms",
        f"gateway CPU per relayed chunk: {result['gateway_cpu_us_per_chunk']:.0f} us",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=8.0, help="per phase")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ttft-ms", type=float, default=50.0, help="the fake upstream's")
    parser.add_argument("--itl-ms", type=float, default=30.0, help="the fake upstream's")
    parser.add_argument(
        "--layout",
        choices=(*LAYOUTS, "both"),
        default="both",
        help="shared: all processes on all CPUs; own-core: the gateway on a CPU of its own",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.layout != "shared" and (
        not hasattr(os, "sched_setaffinity") or (os.cpu_count() or 1) < 2
    ):
        parser.error("--layout own-core needs Linux and at least 2 CPUs; use --layout shared")
    result = run(args)
    print(json.dumps(result, indent=2) if args.json else report(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
