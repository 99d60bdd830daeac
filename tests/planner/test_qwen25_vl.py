"""Qwen2.5-VL on vLLM V1: the vision tower's weights and the encoder's start-up profile.

The expectations are vLLM's own figures: the Hugging Face model card's parameter count, the
start-up logs of the unseen records (read here from their files, never copied), and what
vLLM's profile run does when --limit-mm-per-prompt or the batch changes (vision_profile.py).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from kvwise.core.catalog import load_model
from kvwise.core.flags import VllmFlags, parse_vllm_command
from kvwise.core.gpus import GIB, find_gpu
from kvwise.core.weights import count_params
from kvwise.errors import UnsupportedModelError
from kvwise.planner import Plan, plan
from kvwise.planner.defaults import engine_rules, resolve_flags, rules_for
from kvwise.planner.report import vllm_command
from kvwise.planner.vision_profile import encoder_profile
from tests.planner.accuracy import DATA, emulated_hub, load, score

VL7 = "Qwen/Qwen2.5-VL-7B-Instruct"
NO_MEDIA = '{"image": 0, "video": 0}'


def _plan(version: str, gpu: str = "rtx4090", model: str = VL7, **flags: object) -> Plan:
    flags.setdefault("max_model_len", 8192)
    return plan(load_model(model), find_gpu(gpu), VllmFlags(**flags), vllm_version=version)  # type: ignore[arg-type]


def _record(record_id: str) -> dict[str, object]:
    records = load([DATA / "unseen" / "startup_logs_d.jsonl"])
    return next(r for r in records if r["id"] == record_id)


def test_the_checkpoint_counts_the_tower_like_the_model_card() -> None:
    # huggingface.co/Qwen/Qwen2.5-VL-7B-Instruct: "Model size 8.29B params"; -3B: 3.75B
    assert count_params(load_model(VL7)) == pytest.approx(8.29e9, rel=0.005)
    assert count_params(load_model("Qwen/Qwen2.5-VL-3B-Instruct")) == pytest.approx(
        3.75e9, rel=0.005
    )


def test_a_24gb_plan_carries_the_vision_weights_and_the_encoder_peak() -> None:
    vl = _plan("0.27.1", gpu_memory_utilization=0.9)
    text_only = plan(
        replace(load_model(VL7), vision=None),
        find_gpu("rtx4090"),
        VllmFlags(max_model_len=8192, gpu_memory_utilization=0.9),
        vllm_version="0.27.1",
    )
    tower = vl.memory.weights_bytes - text_only.memory.weights_bytes
    assert 1.2 * GIB < tower < 1.3 * GIB  # 676M unquantized parameters in bf16
    # the dummy image (16,384 tokens, 65,536 patches) through the tower outweighs the text pass
    assert vl.memory.activation_peak_bytes - text_only.memory.activation_peak_bytes > 1.0 * GIB
    assert vl.starts and vl.kv.tokens < text_only.kv.tokens
    # the plan says so: the tower's share of the weights and the dummy batch vLLM will log
    line = next(w for w in vl.warnings if w.startswith("vision tower"))
    assert f"{tower / GIB:.2f} GiB" in line and "budget of 16,384 tokens, 1 video item" in line


@pytest.mark.parametrize(
    "record_id",
    [
        "d-llmso-qwen25-vl-7b-rtx4090-wsl2-v0271-8k-gmu090",
        "d-openshift-qwen25-vl-7b-l4-v0901-2k-defaults",
        "d-openshift-qwen25-vl-7b-2xl4-tp2-v0901-8k",
    ],
)
def test_kv_tokens_within_ten_percent_of_the_logged_start_up(record_id: str) -> None:
    with emulated_hub():
        scored = score(_record(record_id))
    assert scored.is_planned and scored.is_verdict_right, scored.reason
    assert scored.token_error is not None and scored.token_error < 0.10


def test_the_encoder_budget_is_the_one_vllm_logs() -> None:
    # d-openshift L4 log: "Encoder cache will be initialized with a budget of 16384 tokens, and
    # profiled with 1 image items of the maximum feature size." (max_num_batched_tokens 2048)
    record = _record("d-openshift-qwen25-vl-7b-l4-v0901-2k-defaults")
    gpu = find_gpu("L4")
    flags = VllmFlags(max_model_len=int(str(record["max_model_len"])))
    rules = engine_rules(rules_for("0.9.0.1"), gpu, flags)
    profile = encoder_profile(
        load_model(VL7), resolve_flags(load_model(VL7), gpu, flags, rules), rules
    )
    logged = record["other_figures"]["encoder_cache_budget_tokens"]  # type: ignore[index]
    assert (profile.encoder_budget_tokens, profile.items, profile.modality) == (logged, 1, "image")


def test_no_media_drops_the_encoder_pass_and_from_0_10_1_the_tower() -> None:
    for version, keeps_tower in (("0.9.0.1", True), ("0.27.1", False)):
        full = _plan(version, gpu="L4")
        none = _plan(version, gpu="L4", limit_mm_per_prompt=NO_MEDIA)
        # 0.9's sampler pass (27 bytes per logit) stays: the drop is the tower's excess over it
        assert none.memory.activation_peak_bytes < full.memory.activation_peak_bytes - 0.5 * GIB
        dropped = full.memory.weights_bytes - none.memory.weights_bytes
        assert (dropped == 0) == keeps_tower
        assert none.kv.tokens > full.kv.tokens


def test_a_bigger_batch_profiles_more_images_unless_the_limit_caps_them() -> None:
    vl3 = "Qwen/Qwen2.5-VL-3B-Instruct"  # a narrow decoder: the tower's pass sets the peak
    # 32,768 batched tokens hold two 16,384-token images in the encoder budget
    base = _plan(
        "0.27.1", model=vl3, max_num_batched_tokens=32768, limit_mm_per_prompt='{"video": 0}'
    )
    # one request with one image per prompt: max_num_seqs x limit = 1 item
    capped = _plan(
        "0.27.1",
        model=vl3,
        max_num_batched_tokens=32768,
        max_num_seqs=1,
        limit_mm_per_prompt='{"image": 1, "video": 0}',
    )
    single = _plan("0.27.1", model=vl3, limit_mm_per_prompt='{"video": 0}')
    assert base.memory.activation_peak_bytes > single.memory.activation_peak_bytes + GIB
    assert capped.memory.activation_peak_bytes < base.memory.activation_peak_bytes - GIB


def test_a_long_context_profiles_a_multi_frame_video_which_is_not_modelled() -> None:
    with pytest.raises(
        UnsupportedModelError, match="not modelled: the encoder profile's dummy video"
    ):
        _plan("0.27.1", max_model_len=65536)
    assert _plan("0.27.1", max_model_len=65536, limit_mm_per_prompt='{"video": 0}').starts


def test_the_limit_is_a_modelled_flag_that_goes_back_into_the_command() -> None:
    parsed = parse_vllm_command(f"vllm serve {VL7} --limit-mm-per-prompt '{NO_MEDIA}'")
    assert parsed.ignored == () and parsed.flags.limit_mm_per_prompt == NO_MEDIA
    result = _plan("0.27.1", limit_mm_per_prompt=parsed.flags.limit_mm_per_prompt)
    assert f"--limit-mm-per-prompt '{NO_MEDIA}'" in vllm_command(VL7, result.flags)


@pytest.mark.parametrize(("version", "modality"), [("0.16.0", "image"), ("0.17.0", "video")])
def test_equal_image_and_video_sizes_profile_the_modality_the_release_picks(
    version: str, modality: str
) -> None:
    # one video frame and one image have the same 16,384 tokens; vLLM logs which it profiled
    result = _plan(version)
    line = next(w for w in result.warnings if w.startswith("vision tower"))
    assert f"1 {modality} item(s) of 16,384 tokens" in line
