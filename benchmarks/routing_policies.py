"""Routing policies side by side on two real vLLM CPU engines: prefix-cache hit rate and TTFT.

One run starts two vLLM CPU engines (the tiny Qwen2 model of the tests, prefix caching on, one
CPU core each) and sends the same agent workload (8 sessions, multi-turn, each turn the whole
history plus a tool output and a user message, `kvwise bench`'s driver, which sends one
`X-Session-Id` per session) through each policy in turn:

    kvwise cost         `kvwise serve --routing cost`: least predicted TTFT (queue + uncached)
    kvwise affinity     `kvwise serve --routing affinity`: consistent hashing, bounded loads
    kvwise round-robin  `kvwise serve --routing round-robin`
    vllm-router         `vllm-router --policy cache_aware` (PyPI `vllm-router`)

Policies alternate within each round; every (round, policy) uses its own texts (another salt),
so no policy finds the prefixes an earlier one left in the engines' caches. Per policy: the
prefix-cache hit rate (hits / queries, from the engines' `vllm:prefix_cache_*_total` deltas),
TTFT mean and p50 (measured by the client), and requests per replica (`vllm:request_success_total`
deltas); the medians over rounds are reported. Usage:

    .venv/bin/python benchmarks/routing_policies.py [--rounds 3] [--turns 5] [--out FILE]

Needs the engine python ($KVWISE_VLLM_PYTHON, else .venv-vllm/bin/python) and the tiny model
($KVWISE_TINY_MODEL, else build/tiny-qwen2), as the end-to-end tests do.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import platform
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.engine_fixture import (
    SERVED_MODEL_NAME,
    EngineProcess,
    free_port,
    tiny_model_dir,
)

from kvwise.bench.driver import Target, run_workload
from kvwise.bench.prompts import LocalTokenizer, SegmentTexts
from kvwise.sim.workloads import WorkloadSpec, build_workload

POLICIES = ("kvwise cost", "kvwise affinity", "kvwise round-robin", "vllm-router cache_aware")
_COUNTER = re.compile(r"^(vllm:[a-z_]+_total)(\{[^}]*\})?\s+(\S+)", re.M)


def counters(url: str) -> dict[str, float]:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    totals: dict[str, float] = {}
    for name, _, value in _COUNTER.findall(text):
        totals[name] = totals.get(name, 0.0) + float(value)
    return totals


def start_engines(log_dir: Path) -> list[EngineProcess]:
    """Two engines, started side by side, each bound to one core of its own (the CPU backend
    binds its OpenMP threads to the cores VLLM_CPU_OMP_THREADS_BIND names)."""
    engines = [EngineProcess(log_dir / f"engine{i}.log") for i in range(2)]
    errors: list[BaseException] = []

    def start(i: int) -> None:
        try:
            engines[i].start()
        except BaseException as exc:  # reported after both threads end
            errors.append(exc)

    threads = []
    for i in range(2):
        os.environ["VLLM_CPU_OMP_THREADS_BIND"] = str(i % max(1, os.cpu_count() or 1))
        threads.append(threading.Thread(target=start, args=(i,)))
        threads[-1].start()
        time.sleep(2)  # the environment is read at Popen
    for thread in threads:
        thread.join()
    if errors:
        for engine in engines:
            engine.stop()
        raise errors[0]
    return engines


def wait_http(url: str, proc: subprocess.Popen[bytes], log: Path, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log.read_text(errors="replace")[-1500:]
            raise RuntimeError(f"{url}: the process exited with {proc.returncode}:\n{tail}")
        try:
            if httpx.get(url, timeout=2).status_code < 500:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.3)
    raise RuntimeError(f"{url} not ready after {timeout_s:.0f} s")


def start_front(policy: str, urls: list[str], log: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    if policy.startswith("vllm-router"):
        router = shutil.which("vllm-router") or str(Path(sys.executable).parent / "vllm-router")
        # its Prometheus exporter gets a free port too (default 29000: one router per machine)
        command = [router, "--host", "127.0.0.1", "--port", str(port), "--policy", "cache_aware",
                   "--prometheus-host", "127.0.0.1", "--prometheus-port", str(free_port()),
                   "--worker-urls", *urls]  # fmt: skip
        health = f"http://127.0.0.1:{port}/health"
    else:
        command = [sys.executable, "-m", "kvwise.cli", "serve", "--port", str(port),
                   "--routing", policy.split()[1], "--tokenizer", str(tiny_model_dir()),
                   "--session-store", str(log.with_suffix(".sqlite3"))]  # fmt: skip
        for url in urls:
            command += ["--upstream", url]
        health = f"http://127.0.0.1:{port}/health"
    with log.open("wb") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    wait_http(health, proc, log)
    return proc, f"http://127.0.0.1:{port}"


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def run_policy(
    policy: str, engines: list[EngineProcess], spec: WorkloadSpec, salt: int, log: Path
) -> dict[str, object]:
    workload = build_workload(spec, random.Random(salt))
    texts = SegmentTexts(LocalTokenizer(tiny_model_dir() / "tokenizer.json"), salt)
    proc, url = start_front(policy, [e.url for e in engines], log)
    try:
        before = [counters(e.url) for e in engines]
        records = asyncio.run(run_workload(Target(url, SERVED_MODEL_NAME), workload, texts))
        after = [counters(e.url) for e in engines]
    finally:
        stop(proc)

    def delta(name: str, i: int) -> float:
        return after[i].get(name, 0.0) - before[i].get(name, 0.0)

    hits = sum(delta("vllm:prefix_cache_hits_total", i) for i in range(2))
    queries = sum(delta("vllm:prefix_cache_queries_total", i) for i in range(2))
    ttfts = [r.ttft_s for r in records if r.ttft_s is not None]
    return {
        "hit_rate": hits / queries if queries else float("nan"),
        "ttft_mean_s": statistics.fmean(ttfts) if ttfts else float("nan"),
        "ttft_p50_s": statistics.median(ttfts) if ttfts else float("nan"),
        "per_replica": [int(delta("vllm:request_success_total", i)) for i in range(2)],
        "failed": sum(1 for r in records if not r.is_ok),
        "requests": len(records),
    }


def table(results: dict[str, list[dict[str, object]]]) -> list[str]:
    """Medians over rounds, and each policy's TTFT mean over round robin's in the same round
    (the median of the per-round ratios: rounds differ by what else loads the machine)."""
    baseline = results.get("kvwise round-robin")
    lines = [
        f"{'policy':<26}{'hit rate':>9}{'TTFT mean':>11}{'TTFT p50':>10}{'mean/RR':>9}"
        "  requests per replica, per round"
    ]
    for policy, runs in results.items():

        def med(key: str, runs: list[dict[str, object]] = runs) -> float:
            return statistics.median(float(r[key]) for r in runs)  # type: ignore[arg-type]

        ratio = float("nan")
        if baseline:
            ratio = statistics.median(
                float(r["ttft_mean_s"]) / float(b["ttft_mean_s"])  # type: ignore[arg-type]
                for r, b in zip(runs, baseline, strict=True)
            )
        splits = " ".join("/".join(map(str, r["per_replica"])) for r in runs)  # type: ignore[call-overload]
        failed = sum(int(r["failed"]) for r in runs)  # type: ignore[call-overload]
        lines.append(
            f"{policy:<26}{med('hit_rate'):>9.3f}{med('ttft_mean_s') * 1000:>9.0f}ms"
            f"{med('ttft_p50_s') * 1000:>8.0f}ms{ratio:>9.2f}  {splits}"
            + (f"  ({failed} failed)" if failed else "")
        )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sessions", type=int, default=8)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--policies", default=",".join(POLICIES))
    args = parser.parse_args()
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    # agent turns: a shared 300-token system prompt, then ~150 tokens of tool output and ~60 of
    # user text per turn, 16 tokens of answer; 5 turns reach ~1,500 tokens (max_model_len 2048)
    spec = WorkloadSpec(
        kind="agent", sessions=args.sessions, turns=args.turns, system_prompt_tokens=300,
        tool_output_tokens=150, user_tokens=60, output_len=16, think_time_s=0.5,
        range_ratio=0.2,
    )  # fmt: skip
    log_dir = Path(tempfile.mkdtemp(prefix="kvwise-routing-"))
    print(f"logs in {log_dir}; starting two engines", file=sys.stderr, flush=True)
    engines = start_engines(log_dir)
    results: dict[str, list[dict[str, object]]] = {p: [] for p in policies}
    try:
        for rnd in range(args.rounds):
            for k, policy in enumerate(policies):
                salt = 1000 * (rnd + 1) + k
                log = log_dir / f"{policy.replace(' ', '_')}-{rnd}.log"
                result = run_policy(policy, engines, spec, salt, log)
                results[policy].append(result)
                print(f"round {rnd} {policy}: {result}", file=sys.stderr, flush=True)
    finally:
        for engine in engines:
            engine.stop()
    now = datetime.datetime.now(datetime.timezone.utc)
    cpu = platform.processor() or platform.machine()
    header = [
        f"# routing policies on two vLLM CPU engines ({now:%Y-%m-%d %H:%M} UTC)",
        f"# machine: {platform.node()}, {os.cpu_count()} CPUs ({cpu}), a shared VM loaded by"
        " other jobs during the run: absolute times are noisy",
        f"# command: python benchmarks/routing_policies.py --rounds {args.rounds} --sessions"
        f" {args.sessions} --turns {args.turns}",
        f"# workload: {args.sessions} agent sessions x {args.turns} turns (X-Session-Id per session),"
        " tiny Qwen2, one core per engine; medians over rounds; splits per round",
    ]
    text = "\n".join(header + table(results)) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
