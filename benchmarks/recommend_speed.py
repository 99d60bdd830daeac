"""How long `kvwise plan --workload` takes for the canonical case (bar: < 5 s wall).

Runs the CLI in a fresh process N times and prints median wall and CPU time; CPU time is the
figure to trust on a shared, noisy machine.

    .venv/bin/python benchmarks/recommend_speed.py [N]
"""

from __future__ import annotations

import resource
import statistics
import subprocess
import sys
import time

ARGS = [
    "plan",
    "Qwen/Qwen2.5-7B-Instruct",
    "--gpu",
    "rtx4090",
    "--workload",
    "agent",
    "--sessions",
    "10",
    "--turns",
    "30",
    "--system-prompt",
    "2000",
    "--tool-output",
    "800",
    "--max-tokens",
    "512",
    "--json",
]


def one_run() -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "kvwise.cli", *ARGS], capture_output=True, check=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    results = [one_run() for _ in range(runs)]
    walls, cpus = zip(*results, strict=True)
    print(
        f"canonical recommendation: median wall {statistics.median(walls):.2f} s, "
        f"median CPU {statistics.median(cpus):.2f} s ({runs} cold processes)"
    )


if __name__ == "__main__":
    main()
