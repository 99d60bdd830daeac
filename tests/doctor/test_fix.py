"""The prescribed fix: its value from vLLM's own figures, re-planned by the real planner.

Real records from tests/data/validation are diagnosed as pasted; the model and GPU the record
names are passed the way a user passes `--model`/`--gpu` when the excerpt lacks them.
"""

from __future__ import annotations

from typing import Any

from kvwise.core.catalog import load_model
from kvwise.core.flags import VllmFlags
from kvwise.core.gpus import GIB, find_gpu
from kvwise.doctor import kinds
from kvwise.doctor.command import flags_text, serve_command
from kvwise.doctor.diagnose import diagnose
from kvwise.planner import plan
from kvwise.planner.result import Plan
from tests.doctor.logs import (
    MODEL,
    V1_SERVING,
    error,
    info,
    render,
    torch_oom,
    v0_start,
    v1_kv,
    v1_start,
    warning,
)
from tests.doctor.records import by_id, pasted


def test_old_wording_fix_is_vllm_s_own_capacity_and_the_planner_agrees() -> None:
    report = diagnose(pasted(by_id("qwen-16-qwen15-7b-gptq-rtx3090-fail")), gpu_hint="rtx3090")
    fix = report.to_json()["fix"]
    # "... stored in KV cache (24320)": 24320 tokens, already a whole number of 256-token steps
    assert fix["flags"] == {"max_model_len": 24320}
    assert fix["before"]["starts"] is False
    assert fix["before"]["error"]["kind"] == kinds.MAX_MODEL_LEN_EXCEEDS_KV_CACHE
    assert fix["plan"]["starts"] is True
    assert fix["command"] == (
        "vllm serve qwen/Qwen1.5-7B-Chat-GPTQ-Int4 --quantization gptq --max-model-len 24320"
    )


def test_a_fix_the_planner_completes_with_a_second_change() -> None:
    record = by_id("vllm-13061-r1-distill-qwen-14b-2x4090-fail")
    report = diagnose(pasted(record), gpu_hint="rtx4090", model_hint=record["model"])
    best = report.prescription.best
    assert best is not None and best.plan is not None and best.plan.starts
    logged_capacity = 81536  # "... stored in KV cache (81536)"
    assert best.changes["max_model_len"] <= logged_capacity
    # the log's release (0.6.x, V0) counts the CUDA context inside the 0.98 budget, so the 0.47
    # GiB beside it holds V0's graphs: the utilization may stay, the context must shrink
    assert best.plan.memory.peak_device_bytes <= best.plan.memory.total_bytes
    assert "--tensor-parallel-size 2" in report.prescription.command


# the command of llmd-codellama-34b-h100-tp2-freemem-fail, from the record's fields (the excerpt
# holds only the error): a user pastes it with the log
CODELLAMA_COMMAND = (
    b"vllm serve codellama/CodeLlama-34b-hf --tensor-parallel-size 2 --max-model-len 8192 "
    b"--gpu-memory-utilization 0.95\n"
)


def test_free_memory_fix_fits_what_was_free() -> None:
    record = by_id("llmd-codellama-34b-h100-tp2-freemem-fail")
    report = diagnose(CODELLAMA_COMMAND + pasted(record), gpu_hint="h100")
    assert report.diagnosis.kind == kinds.INSUFFICIENT_FREE_MEMORY
    util = report.prescription.best.changes["gpu_memory_utilization"]
    assert util * 79.19 <= 60.87  # "Free memory on device cuda:1 (60.87/79.19 GiB)"
    assert report.prescription.best.plan is not None
    assert report.prescription.best.plan.starts
    assert report.prescription.command == (
        "vllm serve codellama/CodeLlama-34b-hf --tensor-parallel-size 2 --max-model-len 8192 "
        f"--gpu-memory-utilization {util:g}"
    )


def test_free_memory_without_the_layout_says_what_would_start() -> None:
    # the error alone: the planner sees one GPU, where 62.9 GiB of weights do not fit 60.87 free
    record = by_id("llmd-codellama-34b-h100-tp2-freemem-fail")
    report = diagnose(pasted(record), gpu_hint="h100", model_hint=record["model"])
    assert report.prescription.best is None
    assert "what would: --tensor-parallel-size 2" in report.prescription.advice


def test_when_the_planner_cannot_reproduce_the_failure_it_does_not_pick_the_value() -> None:
    record = by_id("vllm-12539-r1-distill-qwen-1p5b-4xl4-fail")
    report = diagnose(pasted(record), gpu_hint="l4", model_hint=record["model"])
    prescription = report.prescription
    assert report.diagnosis.kind == kinds.CUDA_OOM_PROFILE_RUN
    assert any("planner predicts the logged configuration starts" in n for n in prescription.notes)
    # no "smallest change" searched on a planner that sees no failure: the flags move by halves
    for option in prescription.options:
        for name, value in option.changes.items():
            old = option.previous.get(name)
            if isinstance(value, int) and not isinstance(value, bool) and old:
                assert value <= old // 2


def test_without_a_planner_the_fix_comes_from_the_log_alone() -> None:
    lines = (
        v1_start(max_model_len=100000)
        + v1_kv()[:2]
        + [
            error(
                "core.py:700",
                "ValueError: To serve at least one request with the model's max seq len (100000), "
                "(5.34 GiB KV cache is needed, which is larger than the available KV cache memory "
                "(4.71 GiB). Based on the available memory, the estimated maximum model length is "
                "88176.",
            )
        ]
    )
    report = diagnose(render(lines), planner=None)
    fix = report.to_json()["fix"]
    assert fix["flags"] == {"max_model_len": 88064}  # 88176 rounded down to 256-token steps
    assert fix["plan"] is None and "no planner available" in fix["notes"]
    assert fix["command"].startswith(f"vllm serve {MODEL} ")


def test_canonical_4090_case_raise_utilization_when_it_is_the_smaller_change() -> None:
    # 0.15 GiB short: utilization 0.9 -> 0.92 (a 2% change) covers it, a smaller change than
    # cutting max_model_len from 32768 to vLLM's estimate 29952 (9%); that one is the alternative
    lines = [
        *v1_start("0.10.1.1", max_model_len=32768, util=0.9),
        info("gpu_worker.py:276", "Available KV cache memory: 1.60 GiB"),
        error(
            "core.py:700",
            "ValueError: To serve at least one request with the model's max seq len (32768), "
            "(1.75 GiB KV cache is needed, which is larger than the available KV cache memory "
            "(1.60 GiB). Based on the available memory, the estimated maximum model length is "
            "29952.",
        ),
    ]
    report = diagnose(render(lines), gpu_hint="rtx4090")
    best = report.prescription.best
    gpu = find_gpu("rtx4090")
    assert set(best.changes) == {"gpu_memory_utilization"}
    extra = (best.changes["gpu_memory_utilization"] - 0.9) * gpu.memory_bytes
    assert extra >= (1.75 - 1.60) * GIB  # the raise covers what one request lacks
    alternatives = [o.changes for o in report.prescription.options[1:]]
    assert {"max_model_len": 29952 // 256 * 256} in alternatives


def test_sampler_warm_up_fix_frees_the_failed_allocation() -> None:
    lines = (
        v1_start("0.19.0", util=0.95)
        + v1_kv()
        + [
            error("core.py:700", torch_oom("786.00 MiB", "552.50 MiB")),
            error(
                "core.py:700",
                "RuntimeError: CUDA out of memory occurred when warming up sampler with 1024 dummy "
                "requests. Please try lowering `max_num_seqs` or `gpu_memory_utilization` when "
                "initializing the engine.",
            ),
        ]
    )
    report = diagnose(render(lines), gpu_hint="rtx4090")
    assert report.diagnosis.kind == kinds.CUDA_OOM_SAMPLER_WARMUP
    changes = [o.changes for o in report.prescription.options]
    lowered = [c["gpu_memory_utilization"] for c in changes if "gpu_memory_utilization" in c]
    gpu_bytes = 23.65 * GIB  # "total capacity of 23.65 GiB"
    # frees at least the bytes that were missing (786 - 552.5 MiB)
    assert lowered and (0.95 - lowered[0]) * gpu_bytes >= (786 - 552.5) * 2**20
    assert any(c.get("max_num_seqs", 1024) < 1024 for c in changes)


def test_preemption_fix_grows_the_pool_or_caps_concurrency() -> None:
    stats = (
        "Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 239.2 "
        "tokens/s, Running: 8 reqs, Waiting: 5 reqs, GPU KV cache usage: 100.0%, Prefix cache "
        "hit rate: 35.0%"
    )
    lines = v1_start(util=0.9) + v1_kv() + V1_SERVING + [info("loggers.py:118", stats)]
    report = diagnose(render(lines), gpu_hint="rtx4090")
    prescription = report.prescription
    assert report.diagnosis.kind == kinds.PREEMPTION
    options = {tuple(sorted(o.changes)): o for o in prescription.options}
    assert options[("max_num_seqs",)].changes == {"max_num_seqs": 7}
    grow = options[("gpu_memory_utilization",)]
    assert grow.plan is not None and prescription.before is not None
    assert grow.plan.kv.tokens > prescription.before.kv.tokens
    assert prescription.best is grow  # 0.9 -> 0.95 is the smallest change


def test_host_ram_in_v0_drops_the_pinned_swap_space() -> None:
    lines = [*v0_start()[:5], info("-", "Loading safetensors checkpoint shards:  75% | 3/4 Killed")]
    report = diagnose(render(lines))
    assert report.diagnosis.kind == kinds.HOST_RAM
    assert report.prescription.best.changes == {"swap_space": 0}


def test_an_unresolved_model_is_said_and_the_log_s_numbers_still_give_the_fix() -> None:
    report = diagnose(pasted(by_id("vllm-14452-qwq32b-bnb-2x5090-pp2-fail")))
    fix = report.to_json()["fix"]
    assert fix["flags"] == {"max_model_len": 58368}  # "... stored in KV cache (58384)"
    assert fix["plan"] is None
    assert any("not in the offline catalog" in n for n in fix["notes"])


def test_unknown_has_no_fix_and_known_model_specs_can_be_passed_in() -> None:
    assert diagnose(b"hello world").to_json()["fix"] is None
    assert load_model("Qwen/Qwen2.5-7B-Instruct").model_id == MODEL


def test_serve_command_spelling() -> None:
    command = serve_command(
        "Qwen/Qwen2.5-7B-Instruct",
        {
            "max_model_len": 8192,
            "gpu_memory_utilization": 0.95,
            "enforce_eager": True,
            "enable_prefix_caching": False,
            "kv_cache_memory_bytes": 8 * GIB,
        },
    )
    assert command == (
        "vllm serve Qwen/Qwen2.5-7B-Instruct --max-model-len 8192 --gpu-memory-utilization 0.95 "
        "--enforce-eager --no-enable-prefix-caching --kv-cache-memory-bytes 8G"
    )
    assert flags_text({"max_model_len": -1, "kv_cache_dtype": "fp8"}) == (
        "--max-model-len auto --kv-cache-dtype fp8"
    )


def test_a_utilization_that_would_oom_in_the_sampler_warm_up_is_not_prescribed_alone() -> None:
    # 1.90 GiB needed, 1.60 available: 0.9 -> 0.93 covers the KV cache, but at 0.93 the sampler
    # warm-up (outside the budget) no longer fits on the 4090; the planner says so
    lines = [
        *v1_start("0.10.1.1", max_model_len=32768, util=0.9),
        info("gpu_worker.py:276", "Available KV cache memory: 1.60 GiB"),
        error(
            "core.py:700",
            "ValueError: To serve at least one request with the model's max seq len (32768), "
            "(1.90 GiB KV cache is needed, which is larger than the available KV cache memory "
            "(1.60 GiB). Based on the available memory, the estimated maximum model length is "
            "29952.",
        ),
    ]
    report = diagnose(render(lines), gpu_hint="rtx4090")
    model, gpu = load_model(MODEL), find_gpu("rtx4090")
    alone = plan(
        model,
        gpu,
        VllmFlags(max_model_len=32768, gpu_memory_utilization=0.93).validate(),
        vllm_version="0.10.1.1",
    )
    assert alone.error is not None and alone.error.kind == kinds.CUDA_OOM_SAMPLER_WARMUP
    options = report.prescription.options
    assert all(option.plan is not None and option.plan.starts for option in options)
    assert {"gpu_memory_utilization": 0.93} not in [option.changes for option in options]
    paired = next(o for o in options if "gpu_memory_utilization" in o.changes)
    assert "max_num_seqs" in paired.changes  # the warm-up's size comes down with it
    assert "the planner predicts cuda_oom_sampler_warmup" in paired.reason


def _replans_with_sampler(extra: list[tuple[str, str, str]]) -> set[object]:
    """The flashinfer_sampler every re-plan of the canonical 0.11.0 KV refusal passed."""
    seen: set[object] = set()

    def recording(*args: Any, **kwargs: Any) -> Plan:
        seen.add(kwargs.get("flashinfer_sampler"))
        return plan(*args, **kwargs)

    lines = [
        *v1_start("0.11.0", max_model_len=32768, util=0.9),
        *extra,
        info("gpu_worker.py:298", "Available KV cache memory: 1.60 GiB"),
        error(
            "core.py:700",
            "ValueError: To serve at least one request with the model's max seq len (32768), "
            "(1.75 GiB KV cache is needed, which is larger than the available KV cache memory "
            "(1.60 GiB). Based on the available memory, the estimated maximum model length is "
            "29952.",
        ),
    ]
    diagnose(render(lines), gpu_hint="rtx4090", planner=recording)
    return seen


def test_the_doctor_re_plans_with_the_sampler_the_log_names() -> None:
    # v0.11.0 vllm/v1/sample/ops/topk_topp_sampler.py:TopKTopPSampler.__init__: a pip install
    # without FlashInfer warns "FlashInfer is not available. Falling back to the PyTorch-native
    # implementation of top-p & top-k sampling. ..."; with it, "Using FlashInfer for top-p &
    # top-k sampling."
    fallback = warning(
        "topk_topp_sampler.py:66",
        "FlashInfer is not available. Falling back to the PyTorch-native implementation of "
        "top-p & top-k sampling. For the best performance, please install FlashInfer.",
    )
    used = info("topk_topp_sampler.py:56", "Using FlashInfer for top-p & top-k sampling.")
    assert _replans_with_sampler([fallback]) == {False}
    assert _replans_with_sampler([used]) == {True}
    assert _replans_with_sampler([]) == {None}  # not said: the release's default
