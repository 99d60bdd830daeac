"""The regression's columns: what one GPU and model let calibration tell apart.

  step_constant_s     seconds per step whatever the batch: weight_read, layer_overhead_s and
                      step_overhead_s are one column on one GPU and model (split afterwards by
                      `calibrate.assemble`)
  gemm_compute        GEMM time past the weight read (big prefill chunks)
  attention_compute   prefill query-key pairs and decode context
  kv_read             KV bytes read by decode tokens
  request_overhead_s  requests in a step: below the roofline ridge, the only cost that grows
                      with the batch (a CPU engine's per-token work lands here)
  api_overhead_s      once per TTFT (and E2E): HTTP, tokenisation, the hop to the engine

Held at their prior values, their seconds taken off the target: allreduce and allreduce_call_s
(zero without tensor parallelism).

Rows are relative: divided by the measured time, so that a 30 ms TTFT weighs as much as a
3 s decode.
"""

from __future__ import annotations

from collections.abc import Sequence

from kvwise.sim.steptime import BASIS_NAMES, StepTimeCoefficients

COLUMNS = (
    "step_constant_s",
    "gemm_compute",
    "attention_compute",
    "kv_read",
    "request_overhead_s",
    "api_overhead_s",
)
HELD = ("allreduce", "allreduce_call_s")
_INDEX = {name: i for i, name in enumerate(BASIS_NAMES)}

Row = tuple[list[float], float]  # (columns / measured, (measured - held) / measured)


def relative_row(
    sums: Sequence[float], api: float, measured_s: float, prior: StepTimeCoefficients
) -> Row:
    """One measured time as a regression row. `sums`: the basis terms (BASIS_NAMES order)
    summed over the steps the time spans; `api`: 1 when the time includes the API overhead."""
    held_s = sum(getattr(prior, name) * sums[_INDEX[name]] for name in HELD)
    columns = [
        sums[_INDEX["step_overhead_s"]],  # 1 per step: the number of steps
        sums[_INDEX["gemm_compute"]],
        sums[_INDEX["attention_compute"]],
        sums[_INDEX["kv_read"]],
        sums[_INDEX["request_overhead_s"]],
        api,
    ]
    return [c / measured_s for c in columns], (measured_s - held_s) / measured_s


def add(a: Sequence[float], b: Sequence[float], weight: float = 1.0) -> list[float]:
    return [x + weight * y for x, y in zip(a, b, strict=True)]
