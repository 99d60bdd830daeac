"""vLLM's /metrics: counters differenced, gauges sampled, the cache config read."""

from __future__ import annotations

import pytest

from kvwise.live.metrics import GaugeSampler, parse_prometheus, server_report

# lines as vLLM 0.32 writes them (trimmed)
BEFORE = """# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.
vllm:num_preemptions_total{engine="0",model_name="tiny"} 2.0
vllm:prefix_cache_queries_total{engine="0",model_name="tiny"} 1000.0
vllm:prefix_cache_hits_total{engine="0",model_name="tiny"} 256.0
vllm:request_success_total{engine="0",finished_reason="stop",model_name="tiny"} 1.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="tiny"} 3.0
vllm:iteration_tokens_total_count{engine="0",model_name="tiny"} 10.0
vllm:request_prefill_time_seconds_sum{engine="0",model_name="tiny"} 0.5
vllm:request_prefill_time_seconds_count{engine="0",model_name="tiny"} 4.0
vllm:kv_cache_usage_perc{engine="0",model_name="tiny"} 0.0
vllm:cache_config_info{block_size="128",engine="0",num_gpu_blocks="1024"} 1.0
"""
AFTER = """vllm:num_preemptions_total{engine="0",model_name="tiny"} 5.0
vllm:prefix_cache_queries_total{engine="0",model_name="tiny"} 3000.0
vllm:prefix_cache_hits_total{engine="0",model_name="tiny"} 1256.0
vllm:request_success_total{engine="0",finished_reason="stop",model_name="tiny"} 1.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="tiny"} 9.0
vllm:iteration_tokens_total_count{engine="0",model_name="tiny"} 110.0
vllm:request_prefill_time_seconds_sum{engine="0",model_name="tiny"} 0.8
vllm:request_prefill_time_seconds_count{engine="0",model_name="tiny"} 10.0
vllm:kv_cache_usage_perc{engine="0",model_name="tiny"} 0.0
"""


def test_counters_are_differenced_and_labels_summed() -> None:
    report = server_report(parse_prometheus(BEFORE), parse_prometheus(AFTER), None)
    assert report is not None
    assert report["num_preemptions"] == 3
    assert report["prefix_cache_hit_rate"] == pytest.approx(1000 / 2000)
    assert report["num_requests_finished"] == 6  # summed over finished_reason
    assert report["num_steps"] == 100
    assert report["mean_prefill_time_ms"] == pytest.approx(300 / 6)


def test_cache_config_labels_are_read() -> None:
    config = parse_prometheus(BEFORE).cache_config
    assert config["num_gpu_blocks"] == "1024" and config["block_size"] == "128"


def test_sampled_gauges_give_peak_and_mean() -> None:
    sampler = GaugeSampler(client=None, base_url="")  # type: ignore[arg-type]
    sampler.samples["kv_cache_usage"] += [0.1, 0.5, 0.3]
    report = server_report(parse_prometheus(BEFORE), parse_prometheus(AFTER), sampler)
    assert report is not None
    assert report["max_kv_cache_usage"] == 0.5 and report["mean_kv_cache_usage"] == pytest.approx(
        0.3
    )


def test_a_server_without_vllm_metrics_has_no_report() -> None:
    assert server_report(None, None, None) is None


def test_sglangs_documented_page_gives_the_same_figures() -> None:
    """SGLang's docs sample (tests/gateway/data, source in its header), read as `kvwise bench`
    reads a server before and after a run."""
    from pathlib import Path

    from kvwise.live.metrics import COUNTERS, GAUGES

    page = (Path(__file__).parents[1] / "gateway/data/sglang_docs_metrics_sample.txt").read_text()
    snapshot = parse_prometheus(page)
    assert snapshot.figure(COUNTERS["prompt_tokens"]) == 8_128_902
    assert snapshot.figure(COUNTERS["generation_tokens"]) == 7_557_572
    assert snapshot.figure(GAUGES["num_requests_running"]) == 162
    assert snapshot.figure(GAUGES["num_requests_waiting"]) == 2826
    assert snapshot.figure(GAUGES["kv_cache_usage"]) == 0.28


def test_api_server_cpu_is_read_from_vllm_only() -> None:
    # prometheus_client's process collector is on every Python server's /metrics; only vLLM's
    # API server is the cost `kvwise calibrate` turns into CPU per streamed token
    cpu = 'process_cpu_seconds_total 12.5\n{}generation_tokens_total{{model_name="tiny"}} {}\n'
    vllm = server_report(
        parse_prometheus(cpu.format("vllm:", 100)),
        parse_prometheus(cpu.replace("12.5", "14.5").format("vllm:", 1100)),
        None,
    )
    sglang = server_report(
        parse_prometheus(cpu.format("sglang:", 100)),
        parse_prometheus(cpu.replace("12.5", "14.5").format("sglang:", 1100)),
        None,
    )
    assert vllm is not None and vllm["api_server_cpu_s"] == pytest.approx(2.0)
    assert sglang is not None and sglang["generation_tokens"] == 1000
    assert "api_server_cpu_s" not in sglang
