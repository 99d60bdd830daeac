"""Simulator speed: engine steps per CPU second, and the canonical agent case.

    .venv/bin/python benchmarks/sim_speed.py [--repeats 5] [--json]

For each workload: the median CPU time (time.process_time) of `--repeats` runs, the simulated
engine steps, steps per CPU second, and the speed-up of the fast paths over the reference
scheduler (measured in the same run, on the same workload). Deployment: Qwen2.5-7B-Instruct on
one RTX 4090 with vLLM's defaults (KV pool from the planner), unless a workload says otherwise.

The engine runs compiled when the install compiled it (setup.py); KVWISE_PURE_PYTHON=1 runs the
same figures on the Python source. The first line of the output says which one ran.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from typing import Any

import kvwise.sim
from kvwise.core.catalog import load_model
from kvwise.core.flags import VllmFlags
from kvwise.core.gpus import find_gpu
from kvwise.sim.deploy import deployment
from kvwise.sim.runner import SimConfig, simulate
from kvwise.sim.workloads import Workload, WorkloadSpec, build_workload

WORKLOADS: dict[str, WorkloadSpec] = {
    # the brief's canonical case: 10 agent sessions x 30 turns on one RTX 4090
    "agent 10x30 (canonical)": WorkloadSpec(
        "agent",
        sessions=10,
        turns=30,
        system_prompt_tokens=2000,
        user_tokens=200,
        tool_output_tokens=800,
        output_len=512,
        think_time_s=2.0,
    ),
    "chat: 10,000 ShareGPT requests at 10/s": WorkloadSpec(
        "sharegpt", num_prompts=10_000, input_len=220, output_len=200, request_rate=10.0
    ),
    "closed loop: 2,000 x (512 in, 256 out), 16 in flight": WorkloadSpec(
        "random", num_prompts=2000, input_len=512, output_len=256, max_concurrency=16
    ),
    "decode-heavy: 1,000 x (128 in, 1024 out), 32 in flight": WorkloadSpec(
        "random", num_prompts=1000, input_len=128, output_len=1024, max_concurrency=32
    ),
}


def cpu_seconds(config: SimConfig, workload: Workload, *, fast: bool = True) -> tuple[float, int]:
    started = time.process_time()
    result = simulate(config, workload, fast=fast)
    return time.process_time() - started, int(result.metrics["num_steps"])


def measure(config: SimConfig, spec: WorkloadSpec, repeats: int) -> dict[str, Any]:
    workload = build_workload(spec, random.Random(0))
    runs = [cpu_seconds(config, workload) for _ in range(repeats)]
    median_s = statistics.median(s for s, _ in runs)
    steps = runs[0][1]
    reference_s, _ = cpu_seconds(config, workload, fast=False)
    return {
        "cpu_s": median_s,
        "steps": steps,
        "steps_per_cpu_s": steps / median_s,
        "fast_path_speedup": reference_s / runs[0][0],
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    model, gpu = load_model("Qwen/Qwen2.5-7B-Instruct"), find_gpu("rtx4090")
    config = deployment(model, gpu, VllmFlags()).config
    results = {name: measure(config, spec, args.repeats) for name, spec in WORKLOADS.items()}
    total_steps = sum(r["steps"] for r in results.values())
    total_s = sum(r["cpu_s"] for r in results.values())
    engine = "compiled (mypyc)" if kvwise.sim.IS_COMPILED else "Python source"
    if args.json:
        summary = {"engine": engine, "steps_per_cpu_s_overall": total_steps / total_s}
        print(json.dumps({"workloads": results, **summary}, indent=2))
        return 0
    print(f"engine: {engine}")
    print(f"{'workload':<58} {'CPU s':>7} {'steps':>8} {'steps/CPU s':>12} {'vs reference':>13}")
    for name, r in results.items():
        print(
            f"{name:<58} {r['cpu_s']:>7.3f} {r['steps']:>8,} {r['steps_per_cpu_s']:>12,.0f} "
            f"{r['fast_path_speedup']:>12.1f}x"
        )
    print(
        f"{'all of the above':<58} {total_s:>7.3f} {total_steps:>8,} {total_steps / total_s:>12,.0f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
