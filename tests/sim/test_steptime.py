"""The step-time model: roofline basis terms, and the folded weights the engine uses."""

from __future__ import annotations

import random

import pytest

from kvwise.core.catalog import load_model
from kvwise.core.gpus import find_gpu
from kvwise.sim.steptime import (
    StepTimeCoefficients,
    apply,
    basis,
    gemm_excess_s,
    step_cost,
    step_weights,
)


def qwen_on_4090():  # type: ignore[no-untyped-def]
    model, gpu = load_model("Qwen/Qwen2.5-7B-Instruct"), find_gpu("rtx4090")
    return step_cost(model, gpu, weight_bytes_per_rank=15_000_000_000, kv_bytes_per_token=57_344)


def test_basis_terms_are_bytes_over_bandwidth_and_flops_over_peak() -> None:
    cost = qwen_on_4090()
    assert cost.weight_read_s == pytest.approx(15e9 / 1008e9)
    assert cost.kv_read_s_per_token == pytest.approx(57_344 / 1008e9)
    # 2 FLOPs per parameter per token, Qwen2.5-7B has 7.62e9 parameters, 165.2 TFLOP/s dense
    assert cost.linear_s_per_token == pytest.approx(2 * 7.615e9 / 165.2e12, rel=0.01)
    # QK^T and AV: 4 x 28 layers x 28 heads x 128 head_dim FLOPs per query-key pair
    assert cost.attention_s_per_pair == pytest.approx(4 * 28 * 28 * 128 / 165.2e12)
    assert cost.allreduce_calls == 0 and cost.allreduce_s_per_token == 0.0


def test_gemm_time_only_counts_beyond_the_weight_read() -> None:
    cost = qwen_on_4090()
    ridge = cost.weight_read_s / cost.linear_s_per_token  # ~160 tokens on a 4090
    assert gemm_excess_s(cost, int(ridge) - 1) == 0.0
    assert gemm_excess_s(cost, 2048) == pytest.approx(
        2048 * cost.linear_s_per_token - cost.weight_read_s
    )


def test_tensor_parallel_adds_all_reduces() -> None:
    model, gpu = load_model("meta-llama/Llama-3.1-8B-Instruct"), find_gpu("h100 sxm")
    cost = step_cost(
        model,
        gpu,
        weight_bytes_per_rank=8_000_000_000,
        kv_bytes_per_token=65_536,
        tensor_parallel_size=2,
    )
    assert cost.allreduce_calls == 2 * 32  # after attention and after the MLP, per layer
    # hidden 4096 x 2 bytes, 2 per layer, ring factor 2 (tp - 1) / tp = 1, over 450 GB/s
    assert cost.allreduce_s_per_token == pytest.approx(2 * 32 * 4096 * 2 / 450e9)


def test_folded_weights_equal_the_basis_terms_times_the_coefficients() -> None:
    cost = qwen_on_4090()
    coefficients = StepTimeCoefficients(layer_overhead_s=3e-6, request_overhead_s=5e-5)
    weights = step_weights(cost, coefficients)
    rng = random.Random(0)
    for _ in range(200):
        tokens, pairs, context, reqs = (
            rng.randint(1, 4096),
            rng.randint(0, 10**7),
            rng.randint(0, 10**6),
            rng.randint(1, 256),
        )
        expected = apply(coefficients, basis(cost, tokens, pairs, context, reqs))
        assert weights.step_s(tokens, pairs, context, reqs) == pytest.approx(expected, rel=1e-12)


def test_an_moe_step_reads_only_the_experts_its_tokens_are_routed_to() -> None:
    # Qwen3-30B-A3B: 128 experts, 8 per token; the routed experts are most of its weights
    model, gpu = load_model("Qwen/Qwen3-30B-A3B"), find_gpu("h100 sxm")
    cost = step_cost(
        model,
        gpu,
        weight_bytes_per_rank=61_000_000_000,
        kv_bytes_per_token=98_304,
        routed_expert_share=0.95,
    )
    assert cost.expert_miss == pytest.approx(1 - 8 / 128)
    one, forty, thousand = (basis(cost, n, 0, 0, 1)[0] for n in (1, 40, 1000))
    # one token touches 8 of 128 experts: 1/16 of the expert bytes plus the dense rest
    assert one == pytest.approx(cost.weight_read_s * (0.05 + 0.95 / 16))
    assert one < forty < thousand
    # a thousand tokens touch every expert: the whole checkpoint is read
    assert thousand == pytest.approx(cost.weight_read_s, rel=1e-9)
    weights = step_weights(cost, StepTimeCoefficients())
    for n in (1, 7, 300):
        expected = apply(StepTimeCoefficients(), basis(cost, n, 0, 1000, n))
        assert weights.step_s(n, 0, 1000, n) == pytest.approx(expected, rel=1e-12)


def test_a_dense_model_reads_all_its_weights_every_step() -> None:
    cost = qwen_on_4090()
    assert cost.expert_read_s == 0.0
    assert basis(cost, 1, 0, 0, 1)[0] == basis(cost, 4096, 0, 0, 1)[0] == cost.weight_read_s


def test_a_deployed_moe_model_decodes_a_few_requests_faster_than_it_reads_all_its_experts() -> None:
    from kvwise.core.flags import VllmFlags
    from kvwise.sim.deploy import deployment

    model, gpu = load_model("Qwen/Qwen3-30B-A3B"), find_gpu("h100 sxm")
    config = deployment(model, gpu, VllmFlags(max_model_len=8192)).config
    cost = config.cost
    # the planner's weights: routed experts are most of them, 8 of 128 per token
    assert 0.8 < cost.expert_read_s / cost.weight_read_s < 1.0
    weights = step_weights(cost, config.coefficients)
    four, all_experts = weights.step_s(4, 0, 4000, 4), weights.step_s(512, 0, 4000, 512)
    assert four < 0.6 * all_experts
