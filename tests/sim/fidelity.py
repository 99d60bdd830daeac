"""Simulator fidelity against real vLLM serving measurements (validation/serving_benchmarks.jsonl).

Each record becomes a `Case`: the deployment it ran (model and GPU from the catalog, the server
flags it states, vLLM's defaults for its release otherwise, the KV pool from the planner unless
the source logged it), the workload it sent, and the figures it measured. Records that cannot be
reproduced (model not in the catalog, workload lengths not stated, another engine) are kept as
skipped, with the reason.

A point is *overloaded* when its own measurements show a queue: median (or mean) TTFT more than
OVERLOAD_TTFT_OVER_TPOT times the mean TPOT, i.e. requests wait for many engine steps before
their first token, or failed requests. The bar applies to the other (sub-saturation) points; on
overloaded ones the simulator must predict the queueing (the same ratio) or preemptions.
"""

from __future__ import annotations

import json
import statistics
import zlib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from kvwise.core.catalog import load_model
from kvwise.core.flags import VllmFlags
from kvwise.core.gpus import find_gpu
from kvwise.core.models import ModelSpec
from kvwise.sim.coefficients import coefficients_for
from kvwise.sim.deploy import deployment
from kvwise.sim.interconnect import Topology, find_link
from kvwise.sim.runner import SimResult, simulate
from kvwise.sim.steptime import StepTimeCoefficients
from kvwise.sim.workloads import WorkloadSpec

OVERLOAD_TTFT_OVER_TPOT = 5.0
METRICS = ("output_throughput", "mean_tpot_ms", "median_ttft_ms")
BARS = {"output_throughput": 0.10, "mean_tpot_ms": 0.15, "median_ttft_ms": 0.30}

# Validation model -> catalog model with the same shapes (architecture facts from the models'
# published config.json files), plus fields that differ.
MODEL_STAND_INS: dict[str, tuple[str, dict[str, Any]]] = {
    "nvidia/AceMath-7B-Instruct": ("Qwen/Qwen2.5-7B", {}),  # Qwen2.5-Math-7B shapes
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B": (
        "Qwen/Qwen2.5-1.5B",
        {"tie_word_embeddings": False},
    ),
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-14B": ("Qwen/Qwen2.5-14B", {}),
    "deepseek-ai/DeepSeek-R1-Distill-Llama-70B": ("meta-llama/Llama-3.3-70B-Instruct", {}),
    "meta-llama/Meta-Llama-3-70B-Instruct": ("meta-llama/Llama-3.1-70B-Instruct", {}),
    "Qwen/QwQ-32B-Preview": ("Qwen/QwQ-32B", {}),
    "nvidia/Llama-3.1-Nemotron-70B-Instruct-HF-FP8-dynamic": (
        "RedHatAI/Llama-3.3-70B-Instruct-FP8-dynamic",
        {},
    ),
    "01-ai/Yi-34B": ("01-ai/Yi-1.5-34B", {}),
    "mistralai/Mistral-7B-Instruct-v0.3": ("mistralai/Mistral-7B-v0.3", {}),
}

GPU_NAMES = {  # validation spelling (prefix) -> catalog name
    "RTX-4090": "RTX 4090",
    "H100-PCIe": "H100 PCIe",
    "H100-SXM": "H100 SXM",
    "H100-80GB": "H100 SXM",  # "sister dataset is SXM"; the 4xH100 and HBM3 runs are SXM boards
    "A100-80GB": "A100 80GB",
    "A10G": "A10G",
}


@dataclass(frozen=True)
class Measured:
    output_throughput: float | None = None
    mean_tpot_ms: float | None = None  # mean ITL where a source publishes only that
    median_ttft_ms: float | None = None
    mean_ttft_ms: float | None = None
    mean_e2el_ms: float | None = None
    failures: int = 0

    def get(self, metric: str) -> float | None:
        value: float | None = getattr(self, metric)
        return value

    @property
    def is_overloaded(self) -> bool:
        ttft = self.median_ttft_ms or self.mean_ttft_ms
        if self.failures:
            return True
        return bool(
            ttft and self.mean_tpot_ms and ttft > OVERLOAD_TTFT_OVER_TPOT * self.mean_tpot_ms
        )


@dataclass(frozen=True)
class Case:
    case_id: str
    source: str
    gpu: str
    model: str
    vllm_version: str | None  # None: not stated, the latest release's defaults
    flags: VllmFlags
    workload: WorkloadSpec
    measured: Measured
    num_gpu_blocks: int | None = None  # the pool vLLM logged, when known
    notes: tuple[str, ...] = field(default=())
    # the sweep's lowest request rate already shows TTFT far above TPOT: its TTFT is not
    # explained by load (client, network or multi-GPU effects outside the engine)
    ttft_unexplained: bool = False
    num_scheduler_steps: int = 1  # V0 multi-step, where the server flags say so
    # the source says the server had served the same prompts before this point (not restarted
    # between the points of a sweep): the prefix cache starts warm. No in-sample source says
    # so (IOG's README does not say whether the server was restarted), so none is warm.
    warm_cache: bool = False
    # earlier runs on the same server, in order (the source's logs say which): the prefix
    # cache starts as they left it (`kvwise.sim.warm.replay_earlier_runs`)
    earlier_runs: tuple[WorkloadSpec, ...] = ()
    # the GPU link the source states, as `kvwise simulate --interconnect` takes it (None: the
    # card's own): "pcie-nop2p" where vLLM logged that the GPUs lack peer-to-peer
    interconnect: str | None = None
    # VLLM_USE_V1 as the source set it (None: unset): 0 runs the V0 engine on 0.8-0.10.1
    vllm_use_v1: bool | None = None

    @property
    def request_rate(self) -> float:
        return self.workload.request_rate or float("inf")

    @property
    def is_overloaded(self) -> bool:
        if self.ttft_unexplained:
            return self.measured.failures > 0
        return self.measured.is_overloaded

    @property
    def group(self) -> str:
        """Points of one sweep (same model, GPU and layout) share a group."""
        return f"{self.model}|{self.gpu}|tp{self.flags.tensor_parallel_size or 1}"

    @property
    def is_held_out(self) -> bool:
        """One group in three is held out of the coefficient fit (stable across runs)."""
        return zlib.crc32(self.group.encode()) % 3 == 0


@dataclass(frozen=True)
class Skipped:
    case_id: str
    reason: str


def model_spec(name: str) -> ModelSpec:
    target, changes = MODEL_STAND_INS.get(name, (name, {}))
    spec = load_model(target)
    return replace(spec, model_id=name, **changes) if changes or target != name else spec


def gpu_name(text: str) -> str:
    for prefix, name in GPU_NAMES.items():
        if text.startswith(prefix):
            return name
    raise KeyError(text)


def load_cases(path: str | Path) -> tuple[list[Case], list[Skipped]]:
    from tests.sim.fidelity_cases import case_from_record  # the per-source readers

    records = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    capacities = {r["id"]: r for r in records if r.get("kind") == "kv_capacity"}
    cases: list[Case] = []
    skipped: list[Skipped] = []
    for record in records:
        if record.get("kind") == "kv_capacity":
            continue
        outcome = case_from_record(record, capacities)
        if isinstance(outcome, Case):
            cases.append(outcome)
        else:
            skipped.append(outcome)
    return _mark_unexplained_ttft(cases), skipped


MIN_SWEEP_POINTS = 3  # a rate sweep: the same deployment and workload at 3+ request rates


def _sweep(case: Case) -> str:
    """Points that differ only in request rate (IOG's ShareGPT sweeps, inference-perf stages)."""
    w = case.workload
    shape = (
        "" if w.kind == "sharegpt" else f"{w.system_prompt_tokens}/{w.user_tokens}/{w.output_len}"
    )
    return f"{case.source}|{case.group}|{w.kind}|{shape}"


def _mark_unexplained_ttft(cases: list[Case]) -> list[Case]:
    """A sweep whose lowest rate already queues, without failures, has a TTFT that load does
    not explain (the same deployment shows it idle): its TTFT is left out of the comparison."""
    sweeps: dict[str, list[Case]] = {}
    for case in cases:
        if case.workload.request_rate:
            sweeps.setdefault(_sweep(case), []).append(case)
    odd = set()
    for key, points in sweeps.items():
        lowest = min(points, key=lambda c: c.request_rate)
        calm_failures = lowest.measured.failures == 0
        if len(points) >= MIN_SWEEP_POINTS and calm_failures and lowest.measured.is_overloaded:
            odd.add(key)
    return [replace(c, ttft_unexplained=True) if _sweep(c) in odd else c for c in cases]


@dataclass(frozen=True)
class Outcome:
    case: Case
    predicted: dict[str, float]
    errors: dict[str, float]  # relative error per metric, (predicted - measured) / measured
    predicts_overload: bool


def run_case(
    case: Case,
    coefficients: StepTimeCoefficients | None = None,
    *,
    seed: int = 0,
    record_steps: bool = False,
) -> SimResult:
    gpu = find_gpu(case.gpu)
    # the shipped coefficients unless told otherwise: never a calibration the user stored
    shipped = coefficients_for(gpu, case.flags.tensor_parallel_size or 1)
    dep = deployment(
        model_spec(case.model),
        gpu,
        case.flags,
        vllm_version=case.vllm_version,
        vllm_use_v1=case.vllm_use_v1,
        coefficients=coefficients or shipped,
        num_gpu_blocks=case.num_gpu_blocks,
        num_scheduler_steps=case.num_scheduler_steps,
        label=case.case_id,
        topology=case_topology(case),
    )
    return simulate(
        dep.config,
        case.workload,
        seed,
        record_steps=record_steps,
        warm_cache=case.warm_cache,
        earlier_runs=case.earlier_runs,
    )


def case_topology(case: Case) -> Topology | None:
    """One node holding the case's TP ranks over the stated link; None: the card's own."""
    if case.interconnect is None:
        return None
    return Topology(1, case.flags.tensor_parallel_size or 1, find_link(case.interconnect))


def compare(case: Case, result: SimResult) -> Outcome:
    predicted = result.metrics
    errors = {}
    for metric in (*METRICS, "mean_ttft_ms", "mean_e2el_ms"):
        measured = case.measured.get(metric)
        if case.ttft_unexplained and "ttft" in metric:
            continue
        if measured:
            errors[metric] = (predicted[metric] - measured) / measured
    queueing = predicted["median_ttft_ms"] > OVERLOAD_TTFT_OVER_TPOT * max(
        predicted["mean_tpot_ms"], 1e-9
    )
    overload = queueing or predicted["num_preemptions"] > 0
    return Outcome(case, {k: predicted[k] for k in predicted}, errors, overload)


def _profile(case: Case) -> str:
    """The GPU, and whether tensor parallelism links several of them (its own fitted set)."""
    return case.gpu + (" TP>1" if (case.flags.tensor_parallel_size or 1) > 1 else "")


def summarize(outcomes: list[Outcome]) -> dict[str, Any]:
    """Median |relative error| per metric over sub-saturation points: all, per GPU, per source."""

    def medians(selected: list[Outcome]) -> dict[str, Any]:
        row: dict[str, Any] = {}
        for metric in METRICS:
            errs = [abs(o.errors[metric]) for o in selected if metric in o.errors]
            row[metric] = {
                "median_abs_error": statistics.median(errs) if errs else None,
                "n": len(errs),
            }
        return row

    calm = [o for o in outcomes if not o.case.is_overloaded]
    overloaded = [o for o in outcomes if o.case.is_overloaded]
    return {
        "all": medians(calm),
        "held_out": medians([o for o in calm if o.case.is_held_out]),
        "fitted_on": medians([o for o in calm if not o.case.is_held_out]),
        "by_gpu": {
            gpu: medians([o for o in calm if _profile(o.case) == gpu])
            for gpu in sorted({_profile(o.case) for o in calm})
        },
        "by_source": {
            s: medians([o for o in calm if o.case.source == s])
            for s in sorted({o.case.source for o in calm})
        },
        "overload": {
            "n": len(overloaded),
            "predicted": sum(1 for o in overloaded if o.predicts_overload),
            "missed": [o.case.case_id for o in overloaded if not o.predicts_overload],
        },
        "ttft_unexplained": sorted(o.case.case_id for o in outcomes if o.case.ttft_unexplained),
    }


def evaluate(
    path: str | Path, seed: int = 0
) -> tuple[list[Outcome], list[Skipped], dict[str, Any]]:
    """Every reproducible record simulated and compared, skipped ones with their reasons."""
    cases, skipped = load_cases(path)
    outcomes = [compare(case, run_case(case, seed=seed)) for case in cases]
    return outcomes, skipped, summarize(outcomes)


def report_lines(summary: dict[str, Any]) -> list[str]:
    """The summary as text: median |error| (n) per metric, pooled, held out, per GPU, per source."""

    def row(label: str, medians: dict[str, Any]) -> str:
        cells = []
        for metric in METRICS:
            cell = medians[metric]
            value = (
                "n/a" if cell["median_abs_error"] is None else f"{cell['median_abs_error']:5.1%}"
            )
            cells.append(f"{metric} {value} (n={cell['n']})")
        return f"  {label:<28} " + "   ".join(cells)

    lines = ["simulator fidelity, median |relative error| on sub-saturation points:"]
    lines += [row(name, summary[name]) for name in ("all", "fitted_on", "held_out")]
    lines += [row(f"gpu {gpu}", m) for gpu, m in summary["by_gpu"].items()]
    lines += [row(f"source {source}", m) for source, m in summary["by_source"].items()]
    overload = summary["overload"]
    lines.append(
        f"  overloaded points: {overload['predicted']} of {overload['n']} predicted to queue or preempt"
        + (f"; missed: {', '.join(overload['missed'])}" if overload["missed"] else "")
    )
    lines.append(
        f"  TTFT not explained by load (excluded from TTFT): {len(summary['ttft_unexplained'])} points"
    )
    return lines
