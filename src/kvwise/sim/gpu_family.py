"""GPU families: cards that run the same kernels, and what is documented about how fast.

Two cards of one family (one CUDA architecture, and GeForce or not: a GeForce card runs at
other clocks and power limits than the datacenter card of its architecture) run vLLM's GEMM,
attention and all-reduce kernels the same way. Their step times differ by what the datasheet
says, bandwidth and FLOP/s, which the step-time basis already divides by (`steptime.py`). So a
card without measurements can borrow the efficiencies fitted on a measured card of its family,
and where none was measured, take the family's documented figure.

The documented figure is the GEMM efficiency of prefill, the fraction of dense tensor-core
peak that prefill reaches: BLIS's roofline back-end (github.com/inference-sim/inference-sim,
`hardware_config.json`, `mfuPrefill`, calibrated per its Discussion #589) gives H100 0.45,
A100-SXM 0.38 and L40S 0.32. No figure is documented for the other families; they keep the
efficiency fitted across every measured card.

What that figure is: BLIS divides ALL of a prefill's FLOPs (GEMMs, attention, softmax) by
peak x mfuPrefill and takes max(compute, memory) with no overhead term (sim/latency/roofline.go,
rooflineStepTime), "conservative estimates for capacity planning" (docs/reference/models.md).
Here it caps the GEMM term alone, next to separate attention and overhead terms, so it is a
lower bound on the GEMM efficiency, not a measurement of it. Out of sample the two A100 PCIe
sources pull apart at 7-8B dense models: cold dennislee22 prefill (V1 0.10.1, 2,048-token
chunks) runs at about 130-155 ms a chunk (~65-75 % of peak for everything), while livinfly
(V0 0.9.1, decode-heavy) fits 0.38 and overshoots at 0.72 (benchmarks/results/
sim_fidelity_unseen.txt, a100 diagnosis); the figure is kept until one form fits both.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvwise.core.gpus import GpuSpec

BLIS_SOURCE = "BLIS hardware_config.json mfuPrefill"


@dataclass(frozen=True)
class Family:
    name: str
    gemm_efficiency: float | None = None  # documented fraction of dense peak; None: unknown
    source: str = ""


# (compute capability, GeForce) -> family
FAMILIES: dict[tuple[str, bool], Family] = {
    ("6.0", False): Family("Pascal HBM"),
    ("6.1", False): Family("Pascal"),
    ("6.1", True): Family("Pascal GeForce"),
    ("7.0", False): Family("Volta"),
    ("7.5", False): Family("Turing"),
    ("7.5", True): Family("Turing GeForce"),
    ("8.0", False): Family("Ampere HBM", 0.38, f"{BLIS_SOURCE} (A100-SXM)"),
    ("8.6", False): Family("Ampere GDDR"),
    ("8.6", True): Family("Ampere GeForce"),
    ("8.7", False): Family("Ampere Jetson"),
    ("8.9", False): Family("Ada", 0.32, f"{BLIS_SOURCE} (L40S)"),
    ("8.9", True): Family("Ada GeForce"),
    ("9.0", False): Family("Hopper", 0.45, f"{BLIS_SOURCE} (H100)"),
    ("10.0", False): Family("Blackwell"),
    ("12.0", False): Family("Blackwell workstation"),
    ("12.0", True): Family("Blackwell GeForce"),
}


def is_geforce(gpu: GpuSpec) -> bool:
    """GeForce cards are named "RTX <number>" or "GTX <number>" ("RTX PRO 6000" and "RTX A6000"
    are not)."""
    words = gpu.name.split()
    return len(words) > 1 and words[0] in ("RTX", "GTX") and words[1][:1].isdigit()


def family_key(gpu: GpuSpec) -> tuple[str, bool]:
    return (gpu.compute_capability, is_geforce(gpu))


def family_of(gpu: GpuSpec) -> Family:
    key = family_key(gpu)
    return FAMILIES.get(key, Family(f"compute capability {key[0]}"))
