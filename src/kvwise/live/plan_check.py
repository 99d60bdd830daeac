"""Where what an engine reports departs from the plan: said with the numbers, and what to run.

Two departures are checked, per replica:
- the engine's KV pool (num_gpu_blocks x block_size) is more than POOL_SHORTFALL smaller than
  the planned pool (the gateway's KV budget from the plan or --kv-budget-tokens);
- the engine preempted (SGLang: retracted) requests in the window although the plan keeps the load inside the pool
  (the gateway admits at most the planned KV tokens, so a plan that holds sees none).
"""

from __future__ import annotations

from typing import Any

POOL_SHORTFALL = 0.05  # 5 %: the planner's own tolerance is tighter; below this, noise
CALIBRATE_HINT = "run `kvwise calibrate` on a `kvwise bench` run against this engine"


def departures(replicas: list[dict[str, Any]]) -> list[str]:
    """One line per departure, naming the replica and both figures."""
    lines: list[str] = []
    for replica in replicas:
        name = replica.get("name", "?")
        pool, planned = replica.get("kv_pool_tokens"), replica.get("planned_pool_tokens")
        if pool is not None and planned and pool < planned * (1 - POOL_SHORTFALL):
            short_pct = (planned - pool) / planned * 100
            lines.append(
                f"{name}: the engine's KV pool is {pool:,} tokens, {short_pct:.0f} % smaller "
                f"than the planned {planned:,}; {CALIBRATE_HINT}"
            )
        per_min = replica.get("preemptions_per_min")
        if planned and per_min:
            what = "retractions" if replica.get("engine") == "sglang" else "preemptions"
            lines.append(
                f"{name}: {per_min:g} {what}/min over the last "
                f"{replica.get('window_s', 0):g} s where the plan has none; {CALIBRATE_HINT}"
            )
    return lines
