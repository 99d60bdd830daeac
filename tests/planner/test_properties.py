"""Properties of the planner over the whole catalog (hypothesis): the directions the folk tips
claim, checked on every model, card, vLLM release and setting hypothesis picks.

Compared on the KV pool vLLM would size (`kv.tokens`), whether or not the start then succeeds:
with CUDA graphs outside the budget (vLLM < 0.21) a higher utilization can make a start fail
later, at graph capture, and that is right (test_plan.py shows it), but the pool never shrinks.
"""

from __future__ import annotations

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from kvwise.core.catalog import catalog_entries
from kvwise.core.flags import VllmFlags
from kvwise.core.gpus import list_gpus
from kvwise.core.models import ModelSpec
from kvwise.errors import UnsupportedHardwareError, UnsupportedModelError
from kvwise.planner import Plan, plan


def _plannable() -> dict[str, ModelSpec]:
    """Every catalog model kvwise models (the others are refused, tested in test_cli.py)."""
    specs = {}
    for entry in catalog_entries():
        try:
            specs[entry.model_id] = entry.spec()
        except UnsupportedModelError:
            continue
    return specs


MODELS = _plannable()
GPUS = {gpu.name: gpu for gpu in list_gpus()}
VERSIONS = ["0.6.6", "0.7.3", "0.8.5", "0.10.1", "0.19.0", "0.21.0", "0.28.0", "0.33.0"]

SETUP = st.fixed_dictionaries(
    {
        "model": st.sampled_from(sorted(MODELS)),
        "gpu": st.sampled_from(sorted(GPUS)),
        "version": st.sampled_from(VERSIONS),
        "max_model_len": st.sampled_from([None, 2048]),  # the model's own context, or short
        "max_num_seqs": st.sampled_from([None, 8, 64, 256]),
    }
)
PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _plan(setup: dict, **flags: object) -> Plan:
    # before 0.9.1 vLLM refuses a bf16 checkpoint on a pre-Ampere card unless told --dtype half,
    # as its users then do
    dtype = None if GPUS[setup["gpu"]].supports_bf16 else "float16"
    vllm_flags = VllmFlags(
        max_model_len=setup["max_model_len"],
        max_num_seqs=setup["max_num_seqs"],
        dtype=dtype,
        **flags,
    )  # type: ignore[arg-type]
    try:
        return plan(
            MODELS[setup["model"]], GPUS[setup["gpu"]], vllm_flags, vllm_version=setup["version"]
        )
    except (UnsupportedModelError, UnsupportedHardwareError):
        # refused on this release (hybrid Mamba models before 0.11) or card (AWQ on a V100):
        # no pool to compare
        assume(False)
        raise


@PROPERTY
@given(setup=SETUP, low=st.floats(0.3, 0.95), step=st.floats(0.01, 0.3))
def test_more_utilization_never_gives_fewer_kv_tokens(setup: dict, low: float, step: float) -> None:
    high = min(0.99, low + step)
    fewer, more = (
        _plan(setup, gpu_memory_utilization=low),
        _plan(setup, gpu_memory_utilization=high),
    )
    assert more.kv.tokens >= fewer.kv.tokens, (fewer.kv, more.kv)


@PROPERTY
@given(setup=SETUP)
def test_an_fp8_kv_cache_holds_about_twice_the_tokens(setup: dict) -> None:
    full, fp8 = _plan(setup), _plan(setup, kv_cache_dtype="fp8")
    # vLLM 0.8 runs an fp8 KV cache on its V0 engine: other defaults, another profile run, so
    # the pools differ by more than the entry size; the property is about the entry size
    assume(fp8.engine == full.engine)
    # hybrid models: the mamba/linear-attention state keeps its own dtype (mamba_cache_dtype and
    # mamba_ssm_cache_dtype, not --kv-cache-dtype), so only the attention share halves
    assume(MODELS[setup["model"]].mamba is None)
    if full.kv.tokens == 0:  # nothing left for KV at all: nothing to double
        assert fp8.kv.tokens >= 0
        return
    # the same bytes in half-size entries; whole blocks, so up to one block per KV group off
    slack = 2 * full.kv.block_size * max(1, full.kv.blocks_per_request)
    assert abs(fp8.kv.tokens - 2 * full.kv.tokens) <= max(slack, 0.01 * full.kv.tokens), (
        full.kv,
        fp8.kv,
    )


@PROPERTY
@given(setup=SETUP)
def test_enforce_eager_never_gives_fewer_kv_tokens(setup: dict) -> None:
    graphs, eager = _plan(setup), _plan(setup, enforce_eager=True)
    assert eager.kv.tokens >= graphs.kv.tokens, (graphs.memory, eager.memory)
