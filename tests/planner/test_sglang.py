"""`plan --engine sglang`: SGLang's defaults per release, its pool sizing and its verdicts."""

from __future__ import annotations

import json

import pytest

from kvwise.cli import main
from kvwise.core.catalog import load_model
from kvwise.core.flags import VllmFlags
from kvwise.core.gpus import resolve_gpu
from kvwise.errors import UsageError
from kvwise.planner.sglang import SglangFlags, plan_sglang
from kvwise.planner.sglang.pool import max_running_requests
from kvwise.planner.sglang.releases import release_for
from kvwise.planner.sglang.render import launch_args


def _plan(model: str, gpu: str | None, version: str | None, gib: float | None = None, **flags: int):
    card = resolve_gpu(gpu, gib, None)
    tp = flags.pop("tp", 1)
    return plan_sglang(
        load_model(model),
        card,
        VllmFlags(tensor_parallel_size=tp),
        SglangFlags(version=version, **flags),
    )


def test_early_04_releases_use_a_constant_per_tp_size() -> None:
    # server_args.py at v0.4.0: 0.88 at TP 1, 0.85 at TP 4, 0.81 at TP 8, whatever the card
    assert _plan("Qwen/Qwen2.5-7B-Instruct", "h100", "0.4.0").mem_fraction_static == 0.88
    assert _plan("Qwen/Qwen2.5-72B-Instruct", "h100", "0.4.0", tp=4).mem_fraction_static == 0.85
    assert (
        _plan("Qwen/Qwen2.5-72B-Instruct", "a100-80gb", "0.4.5", tp=8).mem_fraction_static == 0.81
    )


def test_046_reserves_13_gib_on_cards_over_80_gib_as_a_public_log_shows() -> None:
    # sgl-project/sglang#5813 logged mem_fraction_static=0.8639842241317652 on a 97871 MiB card
    result = _plan("meta-llama/Llama-3.2-1B-Instruct", None, "0.4.6", gib=97871 / 1024)
    assert result.mem_fraction_static == pytest.approx(0.8639842241317652, rel=1e-9)


def test_reserve_grows_with_chunk_and_graph_batch_from_053() -> None:
    small = _plan("Qwen/Qwen2.5-7B-Instruct", "l40s", "0.5.5", chunked_prefill_size=2048)
    large = _plan("Qwen/Qwen2.5-7B-Instruct", "l40s", "0.5.5", chunked_prefill_size=16384)
    assert large.mem_fraction_static < small.mem_fraction_static
    assert large.max_total_num_tokens < small.max_total_num_tokens
    # a release before the formula ignores the chunk size in its default
    old = [
        _plan("Qwen/Qwen2.5-7B-Instruct", "l40s", "0.4.9", chunked_prefill_size=c)
        for c in (2048, 16384)
    ]
    assert old[0].mem_fraction_static == old[1].mem_fraction_static


def test_default_chunk_and_graph_batch_follow_the_card_class() -> None:
    on_4090 = _plan("Qwen/Qwen2.5-7B-Instruct", "rtx4090", "0.5.5")
    on_h100 = _plan("Qwen/Qwen2.5-7B-Instruct", "h100", "0.5.5")
    assert (on_4090.chunked_prefill_size, on_4090.cuda_graph_max_bs) == (2048, 24)
    assert (on_h100.chunked_prefill_size, on_h100.cuda_graph_max_bs) == (8192, 256)


def test_weights_over_the_fraction_fail_in_sglangs_words() -> None:
    result = _plan("Qwen/Qwen2.5-32B-Instruct", "rtx4090", "0.4.3")
    assert not result.starts
    assert "Not enough memory. Please try to increase --mem-fraction-static" in (result.error or "")


def test_a_pool_smaller_than_the_context_still_starts_and_says_prompts_are_capped() -> None:
    model = load_model("Qwen/Qwen2.5-7B-Instruct")
    flags = VllmFlags(max_model_len=32768)
    sglang = SglangFlags(version="0.4.3", mem_fraction_static=0.68)
    result = plan_sglang(model, resolve_gpu("rtx4090", None, None), flags, sglang)
    assert result.starts
    assert 0 < result.max_total_num_tokens < 32768
    assert "exceeds the maximum allowed length" in result.warnings[0]


def test_mla_caches_the_latent_and_rope_key_once_per_token_on_every_rank() -> None:
    one = _plan("deepseek-ai/DeepSeek-V2-Lite-Chat", "h100", None, mem_fraction_static=0.8)
    two = _plan("deepseek-ai/DeepSeek-V2-Lite-Chat", "h100", None, mem_fraction_static=0.8, tp=2)
    kv_per_token_one = one.kv_bytes / one.max_total_num_tokens
    assert kv_per_token_one == pytest.approx((512 + 64) * 27 * 2, rel=0.001)
    # TP halves the weights per rank but not the cell: more room, same bytes per token
    assert two.kv_bytes / two.max_total_num_tokens == pytest.approx(kv_per_token_one, rel=0.001)


def test_cli_takes_sglangs_flags_and_names_the_family(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["plan", "Qwen/Qwen2.5-7B-Instruct", "--gpu", "h100", "--engine", "sglang", "--json"]
    assert (
        main(
            [
                *argv,
                "--sglang-version",
                "0.4.0",
                "--chunked-prefill-size",
                "4096",
                "--cuda-graph-max-bs",
                "64",
                "--max-running-requests",
                "32",
            ]
        )
        == 0
    )
    data = json.loads(capsys.readouterr().out)
    assert data["sglang_release_family"] == "0.4.0-0.4.2"
    assert (data["chunked_prefill_size"], data["cuda_graph_max_bs"]) == (4096, 64)
    assert data["max_running_requests"] == 32


def test_unknown_release_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["plan", "Qwen/Qwen2.5-7B-Instruct", "--gpu", "h100", "--engine", "sglang"]
    assert main([*argv, "--sglang-version", "0.1.3"]) == 2
    err = capsys.readouterr().err
    assert "not modelled" in err and "Traceback" not in err


def test_newer_releases_refuse_in_their_own_words_with_the_fraction_that_would_fit() -> None:
    result = _plan("Qwen/Qwen2.5-32B-Instruct", "rtx4090", "0.5.15")
    assert not result.starts
    error = result.error or ""
    assert error.startswith("ValueError: Loaded weights leave no GPU memory for the KV cache")
    minimum = float(error.rsplit("above ", 1)[1])
    # the fraction SGLang names is the one at which the weights just fit in the static pool
    assert minimum * result.pre_load_free_bytes == pytest.approx(result.weights_bytes, rel=0.002)


def test_the_longest_prompt_is_the_pool_less_six_tokens_as_a_public_log_shows() -> None:
    # sgl-project/sglang#36583: max_total_num_tokens 1,741 -> "maximum allowed length (1735 tokens)"
    from kvwise.planner.sglang.plan import max_input_tokens

    assert max_input_tokens(1741, 65536) == 1735
    assert max_input_tokens(10**6, 8192) == 8186


def test_a_fraction_above_the_release_default_warns_about_activation_room() -> None:
    default = _plan("Qwen/Qwen2.5-7B-Instruct", "h100", "0.5.5")
    greedy = _plan("Qwen/Qwen2.5-7B-Instruct", "h100", "0.5.5", mem_fraction_static=0.95)
    assert not any("outside the static pool" in w for w in default.warnings)
    assert any("outside the static pool" in w for w in greedy.warnings)
    assert greedy.max_total_num_tokens > default.max_total_num_tokens


def test_a_pasted_sglang_command_plans_sglang_with_its_flags(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["plan", "--gpu", "l4", "--sglang-version", "0.4.3", "--json", "--"]
    command = "python -m sglang.launch_server --model-path Qwen/QwQ-32B --tp 4 --mem-fraction-static 0.8 --host 0.0.0.0"
    main([*argv, *command.split()])
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    assert data["engine"] == "sglang" and data["gpu"]["count"] == 4
    assert data["mem_fraction_static"] == 0.8
    assert "--host" in captured.err  # said, not silently dropped


def test_hybrid_and_multimodal_models_say_what_sglang_does_that_is_not_modelled() -> None:
    result = _plan("google/gemma-3-27b-it", "h100", None)
    notes = " ".join(result.not_modelled)
    assert "sliding-window pool" in notes and "adjust_mem_fraction_for_vlm" in notes
    assert "dummy-image" not in notes  # vLLM's encoder profiling is no part of SGLang's start
    # the multimodal default is 0.95 x the text default of this release on this card
    text_only = _plan("Qwen/Qwen2.5-7B-Instruct", "h100", None)
    assert result.mem_fraction_static == pytest.approx(0.95 * text_only.mem_fraction_static)


def test_early_constants_follow_tp_alone_and_047_follows_tp_times_pp() -> None:
    model, card = load_model("Qwen/Qwen2.5-7B-Instruct"), resolve_gpu("a100-80gb", None, None)

    def fraction(version: str) -> float:
        flags = VllmFlags(tensor_parallel_size=2, pipeline_parallel_size=2)
        return plan_sglang(model, card, flags, SglangFlags(version=version)).mem_fraction_static

    # server_args.py: 0.4.5 tests self.tp_size (2 -> 0.87), 0.4.7 tp_size x pp_size (4 -> 0.85)
    assert fraction("0.4.5") == 0.87
    assert fraction("0.4.7") == 0.85


def test_tp_buffers_over_pcie_follow_the_custom_all_reduce_in_04_releases() -> None:
    # SGLang logged "Init torch distributed ends. mem usage=0.13 GB" at TP 4 on L4 (0.4.3.post3,
    # custom all-reduce off above two PCIe GPUs; sgl-project/sglang#4127) and "Load weight begin.
    # avail mem=21.63 GB" for QwQ-32B there; 0.25 GB at TP 2 (sgl-project/sglang#4257)
    gib = 2**30
    tp4 = _plan("Qwen/QwQ-32B", "l4", "0.4.3", tp=4)
    assert tp4.pre_load_free_bytes / gib == pytest.approx(21.63, abs=0.3)
    newest = _plan("Qwen/QwQ-32B", "l4", None, tp=4)
    assert tp4.pre_load_free_bytes - newest.pre_load_free_bytes == pytest.approx(
        0.26 * gib, rel=0.05
    )
    tp2 = _plan("Qwen/Qwen2.5-14B", "a100-40gb-pcie", "0.4.3", tp=2)
    tp1 = _plan("Qwen/Qwen2.5-14B", "a100-40gb-pcie", "0.4.3")
    assert tp1.pre_load_free_bytes - tp2.pre_load_free_bytes == pytest.approx(0.25 * gib, rel=0.05)
    # NVLink keeps the measured 2 GiB in every release
    nvl = [_plan("Qwen/Qwen2.5-72B-Instruct", "h100", v, tp=8) for v in ("0.4.3", None)]
    assert nvl[0].pre_load_free_bytes == nvl[1].pre_load_free_bytes


def test_releases_before_036_use_their_own_tp_constants_read_in_each_wheel() -> None:
    # server_args.py: 0.1.17 0.90 at TP 1 / 0.82 at TP 4; 0.2.0 0.89 / 0.84 at TP 8;
    # 0.3.0-0.3.5 0.83 at TP 8, 0.3.6 0.82
    assert _plan("Qwen/Qwen2-7B-Instruct", "a10g", "0.1.17").mem_fraction_static == 0.90
    assert _plan("Qwen/Qwen2-7B-Instruct", "a10g", "0.1.17", tp=4).mem_fraction_static == 0.82
    assert _plan("Qwen/Qwen2-7B-Instruct", "h100", "0.2.0").mem_fraction_static == 0.89
    assert _plan("Qwen/Qwen2.5-72B-Instruct", "h100", "0.2.0", tp=8).mem_fraction_static == 0.84
    at_tp8 = [_plan("Qwen/Qwen2.5-72B-Instruct", "h100", v, tp=8) for v in ("0.3.0", "0.3.6")]
    assert [p.mem_fraction_static for p in at_tp8] == [0.83, 0.82]
    with pytest.raises(UsageError):
        _plan("Qwen/Qwen2-7B-Instruct", "h100", "0.1.23")  # never published


def test_a_launch_for_an_old_release_writes_only_the_flags_it_accepts() -> None:
    old = _plan("Qwen/Qwen2-7B-Instruct", "a10g", "0.1.17", tp=2)
    args = launch_args(old, VllmFlags(tensor_parallel_size=2))
    assert "--cuda-graph-max-bs" not in args and "--chunked-prefill-size" not in args
    assert "--enable-metrics" not in args and args[args.index("--tp") + 1] == "2"
    new = launch_args(_plan("Qwen/Qwen2-7B-Instruct", "a10g", None), VllmFlags())
    assert {"--cuda-graph-max-bs", "--enable-metrics"} <= set(new)


@pytest.mark.parametrize(
    ("version", "tokens", "context", "logged"),
    [
        # SGLang's own "max_running_requests=" lines in sgl-project/sglang issues
        ("0.2.5", 336793, 8192, 21048),  # #735: no cap on the request pool yet
        ("0.2.12", 79301, 8192, 4955),  # #1109: pool - 1
        ("0.3.0", 1218251, 32768, 5119),  # #1386: pool capped at 5120, - 1
        ("0.4.2", 313444, 163840, 2049),  # #3451: 2048 + 1
        ("0.4.3", 372945, 32768, 4097),  # #4094: 4096 + 1
        ("0.4.8", 256568, 8194, 4096),  # #7590: no + 1 from 0.4.7
        ("0.4.3", 10240, 131072, 2049),  # #4257 (--max-total-tokens 10240): min(5120, 2049)
    ],
)
def test_default_max_running_requests_per_release_as_sglang_logged_it(
    version: str, tokens: int, context: int, logged: int
) -> None:
    assert max_running_requests(tokens, context, release_for(version)) == logged


def test_a_small_pool_caps_running_requests_at_half_its_tokens() -> None:
    assert max_running_requests(3000, 131072, release_for(None)) == 1500


def test_multimodal_models_get_sglangs_reduction_of_each_release_given_fraction_included() -> None:
    # model_runner.py: 0.2.15-0.4.4.x x0.95 and 0.4.5-0.4.8 x0.90 on the fraction in use, a given
    # --mem-fraction-static too; server_args.py: 0.4.9 x0.90 and 0.4.10+ x0.95 on the default only
    def used(version: str, model: str = "google/gemma-3-27b-it") -> float:
        result = _plan(model, "h100", version, mem_fraction_static=0.8)
        return result.static_bytes / result.pre_load_free_bytes

    expected = {"0.2.14": 0.8, "0.3.0": 0.76, "0.4.4": 0.76, "0.4.5": 0.72, "0.4.8": 0.72}
    expected |= {"0.4.9": 0.8, "0.4.10": 0.8}
    for version, fraction in expected.items():
        assert used(version) == pytest.approx(fraction, abs=1e-6), version
        assert used(version, "Qwen/Qwen2.5-7B-Instruct") == pytest.approx(0.8, abs=1e-6)
    # the public logs: "Automatically reduce --mem-fraction-static to 0.836 because this is a
    # multimodal model" (TP 1 default 0.88, #4897) and 0.827 (TP 2 default 0.87, #3571)
    for tp, logged in ((1, 0.836), (2, 0.827)):
        result = _plan("google/gemma-3-27b-it", "h100", "0.4.3", tp=tp)
        assert result.static_bytes / result.pre_load_free_bytes == pytest.approx(logged, abs=1e-3)
    tp1 = _plan("google/gemma-3-27b-it", "h100", "0.4.3")
    assert any("reduce --mem-fraction-static to 0.836" in w for w in tp1.warnings)


def test_sglang_derives_the_context_from_the_rope_factor_unlike_vllm_for_gemma3() -> None:
    # hf_transformers_utils.get_context_length: max_position_embeddings x rope_scaling factor,
    # the factor 1 when rope_scaling names original_max_position_embeddings or rope_type llama3
    assert _plan("google/gemma-3-4b-it", "h100", "0.4.4").context_length == 8 * 131072
    assert _plan("meta-llama/Llama-3.1-8B-Instruct", "h100", "0.4.4").context_length == 131072
    assert _plan("deepseek-ai/DeepSeek-V2-Lite", "h100", "0.4.4").context_length == 163840
    given = plan_sglang(
        load_model("google/gemma-3-4b-it"),
        resolve_gpu("h100", None, None),
        VllmFlags(max_model_len=8192),
        SglangFlags(version="0.4.4"),
    )
    assert given.context_length == 8192


def test_plan_json_gives_the_flag_and_the_fraction_sglang_sizes_the_pool_with(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["plan", "google/gemma-3-4b-it", "--engine", "sglang", "--gpu", "rtx4090"]
    main([*argv, "--sglang-version", "0.4.4", "--mem-fraction-static", "0.65", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert data["mem_fraction_static"] == 0.65
    assert data["mem_fraction_static_used"] == pytest.approx(0.65 * 0.95, abs=1e-3)
