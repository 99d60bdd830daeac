"""How fast `kvwise plan` answers from a cold process (bar: < 0.5 s wall).

Runs the CLI as a user would, N times, and prints the median and worst wall time, plus the
median for `--json` and for `--explain` (which plans about ten variants).

    .venv/bin/python benchmarks/plan_latency.py [N]
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

CASES = {
    "plan (table)": ["plan", "Qwen/Qwen2.5-7B-Instruct", "--gpu", "rtx4090"],
    "plan --json": ["plan", "Qwen/Qwen2.5-7B-Instruct", "--gpu", "rtx4090", "--json"],
    "plan --explain": [
        "plan",
        "Qwen/Qwen2.5-7B-Instruct",
        "--gpu",
        "rtx4090",
        "--explain",
        "--json",
    ],
}


def wall_times(args: list[str], runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "kvwise.cli", *args], capture_output=True, check=False
        )
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 11
    for label, args in CASES.items():
        times = wall_times(args, runs)
        print(
            f"{label:16} median {statistics.median(times) * 1000:6.0f} ms   worst {max(times) * 1000:6.0f} ms"
            f"   ({runs} cold processes)"
        )


if __name__ == "__main__":
    main()
