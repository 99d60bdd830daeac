"""Readers for the out-of-sample sources (validation/unseen/serving_benchmarks_unseen.jsonl).

Written from each source's description (unseen/SERVING_SOURCES.md) and its record fields, as
the in-sample readers in fidelity_cases.py are: the workload and the server flags a record
states, vLLM's defaults for its release otherwise, every assumption in the case's notes. The
only figures read from `metrics` are the ones that describe what was *sent* (total prompt and
output tokens, completed requests), as the in-sample ShareGPT reader does; nothing is decided
from the measured latencies. No coefficient was fitted on these records.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from collections import Counter
from dataclasses import replace
from importlib import resources
from pathlib import Path
from typing import Any

from kvwise.core.gpus import find_gpu
from kvwise.core.models import ModelSpec, spec_from_config
from kvwise.errors import KvwiseError
from kvwise.sim.coefficients import coefficients_for
from kvwise.sim.deploy import deployment
from kvwise.sim.runner import SimResult, simulate
from tests.sim.fidelity import (
    METRICS,
    Case,
    Measured,
    Outcome,
    Skipped,
    case_topology,
    compare,
    model_spec,
)
from tests.sim.loso import REGIMES, regime

GPU_NAMES = {  # the unseen file's spelling -> catalog name
    "A100-SXM-80GB": "A100 SXM 80GB",
    # dennislee22: form factor not stated; its same-node TP2 start-up log says "Custom allreduce
    # is disabled because your platform lacks GPU P2P capability" (startup_logs_c.jsonl,
    # c-dennislee-qwen2-7b-2xa100-80g-tp2-gmu05-16k). An SXM4 A100 always has NVLink
    # peer-to-peer, so these are PCIe cards: all-reduce over PCIe 4.0, 1,935 GB/s HBM.
    "A100-80GB": "A100 PCIe 80GB",
    "A100-40GB": "A100 40GB",
    "A100-PCIe-40GB": "A100 PCIe 40GB",
    "H100-SXM-80GB": "H100 SXM",
    "H100-NVL-95GB": "H100 NVL",
    "H200-SXM-141GB": "H200 SXM",
    "H200-141GB": "H200 SXM",  # DigitalOcean / CloudRift H200: form factor not stated
    "L4-24GB": "L4",
    "L40S-48GB": "L40S",
    "RTX-3090-24GB": "RTX 3090",
    "RTX-4090-24GB": "RTX 4090",
    "RTX-5070-Ti-16GB": "RTX 5070 Ti",
    "RTX-5090-32GB": "RTX 5090",
    "RTX-PRO-6000-Blackwell-96GB": "RTX PRO 6000 Blackwell",
    # set f (SERVING_SOURCES_f.md); all four are catalog cards
    "T4-16GB": "T4",
    "RTX-5080-Laptop-16GB": "RTX 5080 Laptop",  # the 16 GB laptop part, not the desktop card
    "A40-48GB": "A40",
    "RTX-A5000-24GB": "RTX A5000",
}

# Unseen model -> catalog model with the same shapes (a fine-tune or a renamed repository).
STAND_INS = {
    "deepseek-ai/DeepSeek-R1-0528-Qwen3-8B": "Qwen/Qwen3-8B",  # a Qwen3-8B fine-tune
    # livinfly's local "Mistral-7B-Instruct" (version not stated): v0.3 assumed; v0.1-v0.3
    # share layers, heads and KV shapes, they differ in vocabulary (32000/32768)
    "Mistral-7B-Instruct": "mistralai/Mistral-7B-v0.3",
    "mistralai/Mistral-7B-Instruct-v0.3": "mistralai/Mistral-7B-v0.3",
    "mistralai/Mixtral-8x7B-Instruct-v0.1": "mistralai/Mixtral-8x7B-v0.1",
    # FP8 weight checkpoints of Llama 3.1 (Llama 3.3 70B has the 3.1 70B shapes)
    "nvidia/Llama-3.1-70B-Instruct-FP8": "RedHatAI/Llama-3.3-70B-Instruct-FP8-dynamic",
    "neuralmagic/Meta-Llama-3.1-70B-Instruct-FP8": "RedHatAI/Llama-3.3-70B-Instruct-FP8-dynamic",
    "neuralmagic/Meta-Llama-3.1-8B-FP8": "RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8-dynamic",
}

# AWQ int4 checkpoints (CloudRift): the base model's config.json plus AutoAWQ's usual
# quantization_config (group 128, zero point, GEMM), as the catalog derives its AWQ entries
AWQ_KEYS: dict[str, Any] = {
    "torch_dtype": "float16",
    "quantization_config": {
        "quant_method": "awq",
        "bits": 4,
        "group_size": 128,
        "zero_point": True,
        "version": "gemm",
    },
}
AWQ_BASES = {
    "QuantTrio/Qwen3-Coder-30B-A3B-Instruct-AWQ": "Qwen/Qwen3-30B-A3B",  # Coder: same shapes
    "ibnzterrell/Meta-Llama-3.3-70B-Instruct-AWQ-INT4": "meta-llama/Llama-3.3-70B-Instruct",
}

# CloudRift ran `vllm/vllm-openai:latest` pulled 2025-10-08..17, version not printed: the latest
# release then was v0.11.0 (2025-10-02; v0.11.1 followed in November)
CLOUDRIFT_LATEST = "0.11.0"


def model_name(record: dict[str, Any]) -> str:
    """The model id without the collector's remarks ("X (local dir Y)")."""
    name = str(record["model"]).split(" (")[0]
    return name.rsplit("/", 1)[-1] if name.startswith("~") else name


def load_spec(name: str) -> ModelSpec:
    if name in AWQ_BASES:
        base = AWQ_BASES[name]
        path = resources.files("kvwise.core").joinpath(
            f"data/models/{base.replace('/', '--')}.json"
        )
        config = json.loads(path.read_text())["config"] | AWQ_KEYS
        return spec_from_config(config, name, source=f"{base} config.json + AWQ int4")
    if name in STAND_INS:
        return replace(model_spec(STAND_INS[name]), model_id=name)
    return model_spec(name)


def catalog_gpu(text: str) -> str:
    return GPU_NAMES[text]


def version(text: str | None) -> str | None:
    match = re.match(r"(\d+\.\d+\.\d+)", text or "")
    return match.group(1) if match else None


def rate(w: dict[str, Any]) -> float | None:
    value = w.get("request_rate_rps")
    return None if value in (None, "inf", "Infinity") else float(value)


def means(m: dict[str, Any], sent: int) -> tuple[int, int]:
    """Mean prompt and output tokens the run sent and got back (ShareGPT: set by the dataset)."""
    done = int(m.get("completed") or sent)
    return round(m["total_input_tokens"] / done), round(m["total_output_tokens"] / done)


def measured(m: dict[str, Any], sent: int, share: float = 1.0) -> Measured:
    completed = m.get("completed")
    failures = int(m.get("failures") or (sent - int(completed) if completed is not None else 0))
    throughput = m.get("output_throughput_tok_s")
    return Measured(
        output_throughput=throughput * share if throughput else None,
        mean_tpot_ms=m.get("tpot_mean_ms"),
        median_ttft_ms=m.get("ttft_median_ms"),
        mean_ttft_ms=m.get("ttft_mean_ms"),
        failures=max(failures, 0),
    )


def kv_blocks(flags: dict[str, Any], block_size: int = 16) -> int | None:
    """The KV pool vLLM logged ("GPU KV cache size: N tokens"), in blocks."""
    tokens = flags.get("gpu_kv_cache_tokens")
    return int(str(tokens).replace(",", "")) // block_size if tokens else None


def case_from_unseen_record(record: dict[str, Any]) -> Case | Skipped:
    """The source's reader first (what cannot be simulated, whatever the model), then the
    catalog: the model (or its stand-in) and the GPU must be known."""
    from tests.sim.fidelity_unseen_readers import READERS

    record_id = record["id"]
    if record.get("engine") != "vllm":
        return Skipped(record_id, f"engine {record.get('engine')}, not vLLM")
    reader = next((r for prefix, r in READERS.items() if record_id.startswith(prefix)), None)
    if reader is None:
        return Skipped(record_id, "no reader for this source")
    try:
        gpu = catalog_gpu(record["gpu"])
    except KeyError:
        return Skipped(record_id, f"not in the catalog: GPU {record['gpu']}")
    outcome = reader(record, gpu)
    if isinstance(outcome, Case):
        try:
            load_spec(outcome.model)
        except KvwiseError as exc:
            return Skipped(record_id, f"not in the catalog: {str(exc).split(':')[0]}")
    return outcome


def split(count: int, replicas: int) -> int:
    return max(1, math.ceil(count / replicas))


def run_unseen_case(case: Case, seed: int = 0) -> SimResult:
    """fidelity.run_case with this file's model stand-ins (the shipped coefficients)."""
    gpu = find_gpu(case.gpu)
    dep = deployment(
        load_spec(case.model),
        gpu,
        case.flags,
        vllm_version=case.vllm_version,
        vllm_use_v1=case.vllm_use_v1,
        coefficients=coefficients_for(gpu, case.flags.tensor_parallel_size or 1),
        num_gpu_blocks=case.num_gpu_blocks,
        num_scheduler_steps=case.num_scheduler_steps,
        label=case.case_id,
        topology=case_topology(case),
    )
    return simulate(
        dep.config,
        case.workload,
        seed,
        warm_cache=case.warm_cache,
        earlier_runs=case.earlier_runs,
    )


def reprinted(records: list[dict[str, Any]]) -> dict[str, str]:
    """Records whose published result block is, figure for figure, that of an earlier record
    of the same source: one run printed twice, to be counted once. gpustack's
    qwen3-8b/h100-latency.md prints its vLLM `--max-concurrency 4` run under "1. Choosing the
    Inference Engine" and again as "BS=4" under "Other Benchmark Cases" (duration 44.40 s,
    median TTFT 60.26 ms in both); glm-4.5-air/h100.md's "Other Benchmark Cases" blocks are
    a100.md's, to the hundredth (one card's run pasted into both docs). Id -> the earlier id."""
    first: dict[tuple[str, str], str] = {}
    repeats = {}
    for record in records:
        source = record["id"].split("-", 1)[0]
        key = (source, json.dumps(record["metrics"], sort_keys=True))
        if key in first:
            repeats[record["id"]] = first[key]
        else:
            first[key] = record["id"]
    return repeats


def load_unseen(path: str | Path) -> tuple[list[Case], list[Skipped]]:
    records = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    repeats = reprinted(records)
    cases: list[Case] = []
    skipped: list[Skipped] = []
    for record in records:
        if record["id"] in repeats:
            reason = f"the source prints the same result block as {repeats[record['id']]}"
            skipped.append(Skipped(record["id"], reason))
            continue
        outcome = case_from_unseen_record(record)
        (cases if isinstance(outcome, Case) else skipped).append(outcome)  # type: ignore[arg-type]
    return cases, skipped


def evaluate_unseen(
    path: str | Path, *, every: int = 1, seed: int = 0
) -> tuple[list[Outcome], list[Skipped]]:
    """Every readable record (or every `every`-th, in file order) simulated and compared; a
    deployment the planner says would not start is skipped with the planner's reason."""
    cases, skipped = load_unseen(path)
    outcomes = []
    for case in cases[::every]:
        try:
            outcomes.append(compare(case, run_unseen_case(case, seed)))
        except KvwiseError as exc:
            skipped.append(Skipped(case.case_id, f"planner: {str(exc)[:90]}"))
    return outcomes, skipped


def gpu_class(case: Case) -> str:
    """SERVING_SOURCES.md's classes: GeForce RTX, RTX PRO workstation, datacenter."""
    if case.gpu.startswith("RTX PRO"):
        return "workstation"
    return "consumer" if case.gpu.startswith("RTX") else "datacenter"


def _cell(outcomes: list[Outcome], metric: str) -> str:
    errs = [abs(o.errors[metric]) for o in outcomes if metric in o.errors]
    return f"{statistics.median(errs):6.1%} ({len(errs):>3})" if errs else "   n/a (  0)"


def unseen_report(outcomes: list[Outcome], skipped: list[Skipped]) -> list[str]:
    """Median |relative error| (n) per class x regime and per source, the overload check, and
    every skipped record counted by reason."""
    head = "  ".join(f"{m:>18}" for m in METRICS)
    lines = ["out-of-sample simulator fidelity, median |relative error| (n):", f"  {'':<34}{head}"]

    def row(label: str, chosen: list[Outcome]) -> None:
        if chosen:
            lines.append(f"  {label:<34}" + "  ".join(f"{_cell(chosen, m):>18}" for m in METRICS))

    row("all points", outcomes)
    for cls in ("consumer", "workstation", "datacenter"):
        for reg in REGIMES:
            row(
                f"{cls} / {reg}",
                [o for o in outcomes if (gpu_class(o.case), regime(o.case)) == (cls, reg)],
            )
    for source in sorted({o.case.source for o in outcomes}):
        row(f"source {source}", [o for o in outcomes if o.case.source == source])
    for gpu in sorted({o.case.gpu for o in outcomes}):
        row(f"gpu {gpu}", [o for o in outcomes if o.case.gpu == gpu])
    overloaded = [o for o in outcomes if o.case.is_overloaded]
    missed = [o.case.case_id for o in overloaded if not o.predicts_overload]
    predicted = len(overloaded) - len(missed)
    lines.append(
        f"overloaded points (measured queueing or failures): {predicted} of {len(overloaded)}"
        " predicted to queue or preempt"
    )
    lines += [f"  missed: {case_id}" for case_id in missed]
    calm_flagged = sum(1 for o in outcomes if not o.case.is_overloaded and o.predicts_overload)
    lines.append(f"sub-saturation points the simulator predicts to queue: {calm_flagged}")
    reasons = Counter(s.reason for s in skipped)
    lines.append(f"records scored: {len(outcomes)}; skipped: {len(skipped)}")
    lines += [f"  {n:>3}  {reason}" for reason, n in reasons.most_common()]
    return lines
