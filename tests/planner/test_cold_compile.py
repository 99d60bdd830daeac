"""A first start compiles the model inside vLLM's memory profile (V1 engine, torch.compile on).

vLLM (read at 0.20.0, 0.26.0, 0.28.0): v1/worker/gpu_worker.py:Worker.determine_available_memory
runs model_runner.profile_run() inside utils/mem_utils.py:memory_profiling, and that first
forward is where compilation/decorators.py compiles the model, unless _try_load_aot_compiled_fn
finds the artifact a previous start saved. A cold compile's allocations (Inductor and Triton
temporaries, loaded kernel code) are charged to the budget; upstream reports it as vllm#54383
(0.28.0: "First boot of a new shape is granted a ~5% smaller KV cache than subsequent identical
boots") and #54122. Their size is the compiler's, so kvwise does not size it: the plan says so.

The logged figures below are read from examined out-of-sample records
(tests/data/validation/unseen/startup_logs_c.jsonl, listed in unseen/README.md under "Records
examined while fixing rules"), not fitted.
"""

from __future__ import annotations

import json

from kvwise.core.catalog import load_model
from kvwise.core.flags import VllmFlags
from kvwise.planner import Plan, plan
from tests.planner.accuracy import DATA, _version, emulated_hub, record_flags, record_gpu

# one L4, Qwen3-14B-AWQ, vLLM 0.28.0, the same flags: the blog's first arm, and its replica arm
# run later with the same flags (the author: "by run, 9.10 GiB or 10.33 GiB")
FIRST_START = "c-ddiiwoong-qwen3-14b-awq-l4-single"
RESTART = "c-ddiiwoong-qwen3-14b-awq-l4-replica"
WARNING = "first start of these flags (empty torch.compile cache)"


def _record(record_id: str) -> dict[str, object]:
    for line in (DATA / "unseen" / "startup_logs_c.jsonl").read_text().splitlines():
        if line.strip() and json.loads(line)["id"] == record_id:
            return dict(json.loads(line))
    raise LookupError(record_id)


def _plan(record: dict[str, object], **overrides: object) -> Plan:
    flags = record_flags(record)
    if overrides:
        flags = type(flags)(**{**flags.__dict__, **overrides})
    with emulated_hub():
        return plan(
            load_model(str(record["model"])),
            record_gpu(record),
            flags,
            vllm_version=_version(record),
        )


def test_the_plan_names_the_first_start_shortfall_the_l4_logs_show() -> None:
    first, again = _record(FIRST_START), _record(RESTART)
    assert record_flags(first) == record_flags(again)  # the same command line
    result = _plan(first)
    logged_first, logged_again = int(first["kv_cache_tokens"]), int(again["kv_cache_tokens"])
    # the plan sits with the restart (67,696 tokens logged), not the first start (59,632)
    assert abs(result.kv.tokens - logged_again) < abs(result.kv.tokens - logged_first)
    assert logged_first < result.kv.tokens
    # ... and says that a first start can get less, which kvwise does not size
    assert any(WARNING in w and "vllm#54383" in w for w in result.not_modelled)


def test_enforce_eager_compiles_nothing_and_v0_had_no_compile() -> None:
    first = _record(FIRST_START)
    assert not any(WARNING in w for w in _plan(first, enforce_eager=True).not_modelled)
    with emulated_hub():
        qwen25 = load_model("Qwen/Qwen2.5-7B-Instruct")  # a model 0.6.3 ran
        v0 = plan(qwen25, record_gpu(first), VllmFlags(max_model_len=4096), vllm_version="0.6.3")
    assert v0.engine == "V0"
    assert not any(WARNING in w for w in v0.not_modelled)
