"""The configuration, read from every shape a log or a paste states it in."""

from __future__ import annotations

from kvwise.doctor.config_lines import flags_from_tokens
from kvwise.doctor.parse import parse_log
from kvwise.doctor.text import read_log


def _flags(text: str) -> tuple[str | None, dict[str, object]]:
    parsed = parse_log(read_log(text.encode()))
    return parsed.model(), parsed.flags()


def test_a_pasted_vllm_serve_command_with_continuations() -> None:
    model, flags = _flags(
        "$ CUDA_VISIBLE_DEVICES=0,1 vllm serve Qwen/Qwen2.5-32B-Instruct-AWQ \\\n"
        "    --tensor-parallel-size 2 \\\n"
        "    --gpu_memory_utilization=0.95 --max-model-len 32k --enforce-eager \\\n"
        "    --no-enable-prefix-caching --kv-cache-memory-bytes 8G --port 8000 | tee log\n"
    )
    assert model == "Qwen/Qwen2.5-32B-Instruct-AWQ"
    assert flags == {
        "tensor_parallel_size": 2,
        "gpu_memory_utilization": 0.95,
        "max_model_len": 32000,
        "enforce_eager": True,
        "enable_prefix_caching": False,
        "kv_cache_memory_bytes": 8 * 2**30,
    }


def test_the_api_server_module_and_a_docker_entrypoint() -> None:
    model, flags = _flags(
        "python -m vllm.entrypoints.openai.api_server --model qwen/Qwen1.5-7B-Chat-GPTQ-Int4 "
        "--served-model-name q --quantization gptq -tp 1"
    )
    assert (model, flags) == (
        "qwen/Qwen1.5-7B-Chat-GPTQ-Int4",
        {"quantization": "gptq", "tensor_parallel_size": 1},
    )
    model, flags = _flags(
        'entrypoint: [ "vllm", "serve", "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B", '
        '"--tensor-parallel-size", "4", "--max-model-len", "32768", "--enforce-eager" ]'
    )
    assert model == "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B"
    assert flags == {"tensor_parallel_size": 4, "max_model_len": 32768, "enforce_eager": True}


def test_non_default_args_namespace_and_engine_config() -> None:
    model, flags = _flags(
        "INFO 08-07 01:36:07 [utils.py:326] non-default args: {'model_tag': '/m/gpt-oss-120b', "
        "'host': '0.0.0.0', 'model': '/m/gpt-oss-120b', 'trust_remote_code': True, "
        "'max_model_len': 65536, 'served_model_name': ['x'], 'gpu_memory_utilization': 0.92}"
    )
    assert (model, flags) == (
        "/m/gpt-oss-120b",
        {"max_model_len": 65536, "gpu_memory_utilization": 0.92},
    )
    model, flags = _flags(
        "INFO 11-05 04:09:28 api_server.py:527] args: Namespace(host=None, port=8000, "
        "model='/data/model/llama', tokenizer=None, max_model_len=None, "
        "gpu_memory_utilization=0.9, swap_space=4, max_num_seqs=256, enforce_eager=False)"
    )
    assert model == "/data/model/llama"
    assert flags == {
        "gpu_memory_utilization": 0.9,
        "swap_space": 4.0,
        "max_num_seqs": 256,
        "enforce_eager": False,
    }
    model, flags = _flags(
        "INFO 04-15 13:23:10 [core.py:61] Initializing a V1 LLM engine (v0.8.4) with config: "
        "model='mistralai/Mistral-Small-3.1-24B-Instruct-2503', dtype=torch.bfloat16, "
        "max_seq_len=131072, load_format=LoadFormat.AUTO, tensor_parallel_size=2, "
        "pipeline_parallel_size=1, quantization=None, enforce_eager=False, "
        "kv_cache_dtype=fp8_e4m3, enable_prefix_caching=True, chunked_prefill_enabled=True"
    )
    assert flags == {
        "dtype": "bfloat16",
        "max_model_len": 131072,
        "tensor_parallel_size": 2,
        "pipeline_parallel_size": 1,
        "enforce_eager": False,
        "kv_cache_dtype": "fp8_e4m3",
        "enable_prefix_caching": True,
        "enable_chunked_prefill": True,
    }


def test_an_llm_call_and_a_truncated_args_dict() -> None:
    model, flags = _flags(
        'llm = LLM(model="Qwen/Qwen3-8B", tensor_parallel_size=2, gpu_memory_utilization=0.8)'
    )
    assert (model, flags) == (
        "Qwen/Qwen3-8B",
        {"tensor_parallel_size": 2, "gpu_memory_utilization": 0.8},
    )
    model, flags = _flags(
        "non-default args: {'model': 'Qwen/Qwen3-8B', 'max_model_len': 16384, 'served_mod..."
    )
    assert (model, flags) == ("Qwen/Qwen3-8B", {"max_model_len": 16384})


def test_vllm_s_own_lines_win_over_a_pasted_command() -> None:
    _, flags = _flags(
        "vllm serve Qwen/Qwen2.5-7B-Instruct --max-model-len 4096\n"
        "INFO 01-01 00:00:00 [__init__.py:1750] Using max model len 32768\n"
        "INFO 01-01 00:00:00 [scheduler.py:222] Chunked prefill is enabled with max_num_batched_tokens=2048.\n"
        "RuntimeError: CUDA out of memory occurred when warming up sampler with 1024 dummy requests."
    )
    assert flags["max_model_len"] == 32768
    assert flags["max_num_batched_tokens"] == 2048
    assert flags["max_num_seqs"] == 1024
    assert flags["enable_chunked_prefill"] is True


def test_unreadable_values_and_prose_are_skipped() -> None:
    assert flags_from_tokens(["--max-model-len", "lots", "--gpu-memory-utilization", "0.9x"]) == (
        None,
        {},
    )
    model, flags = _flags(
        "命令：vllm serve Qwen/Qwen2.5-VL-3B-Instruct --gpu-memory-utilization 0.3，80G的显卡"
    )
    assert (model, flags) == ("Qwen/Qwen2.5-VL-3B-Instruct", {"gpu_memory_utilization": 0.3})
    assert _flags("I ran vllm serve with a big model and it broke 'quote") == (None, {})
