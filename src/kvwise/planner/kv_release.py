"""A model as a given vLLM release lays out its KV cache, or a refusal naming the release."""

from __future__ import annotations

from dataclasses import replace

from kvwise.core.models import ModelSpec
from kvwise.errors import UnsupportedModelError

FIRST_MAMBA_RELEASE = (0, 11)  # the unified mamba page (and V1 as the only engine for them)
# MLA's latent cache arrived in vLLM 0.7.1; before it DeepSeek models cached K and V per head
# (planner/kv.py, PRE_MLA_HEAD_SIZE), and no absorbed W_UK/W_UV copies were made.
FIRST_MLA_RELEASE = (0, 7, 1)
# Architectures vLLM gained late: the first release whose model registry names them
# (model_executor/models/registry.py). Gemma 4: 0.19.0 (no gemma4 module in the 0.18.1 wheel).
FIRST_RELEASE_BY_ARCHITECTURE = {
    "Gemma4ForConditionalGeneration": (0, 19, 0),
    "Gemma4ForCausalLM": (0, 19, 0),
}


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split(".")[:3] if p.isdigit())


def for_release(model: ModelSpec, version: str, engine: str = "V1") -> ModelSpec:
    """The model as `version` caches it; refuse layouts kvwise does not model on that release."""
    first = FIRST_RELEASE_BY_ARCHITECTURE.get(model.architecture)
    if first is not None and _release(version) < first:
        raise UnsupportedModelError(
            f"{model.model_id} on vLLM {version}: vLLM supports {model.architecture} from "
            f"{'.'.join(map(str, first))} on (the release's model registry does not name it); "
            "plan with --vllm-version " + ".".join(map(str, first)) + " or later"
        )
    if model.vision is not None and engine == "V0":
        # V0's profile run (worker/model_runner.py:profile_run) builds dummy multimodal data
        # (MULTIMODAL_REGISTRY.dummy_data_for_profiling), caps max_num_seqs at MNBT // the
        # largest item's tokens and runs the encoder inside the forward: its activation is
        # sized by nothing in kvwise (the V1 allowance is a fit on a V1 release)
        raise UnsupportedModelError(
            f"{model.model_id} on vLLM {version} (V0 engine): not modelled: the vision "
            "encoder's share of V0's multimodal profile run"
        )
    if model.mla is not None and _release(version) < FIRST_MLA_RELEASE:
        return replace(model, mla=replace(model.mla, has_latent_cache=False))
    if model.mamba is not None and _release(version)[:2] < FIRST_MAMBA_RELEASE:
        raise UnsupportedModelError(
            f"{model.model_id} on vLLM {version}: not modelled: the mamba/linear-attention state "
            "of releases before 0.11 (kept outside the paged KV pool, no page padding); "
            "plan with --vllm-version 0.11 or later"
        )
    return model
