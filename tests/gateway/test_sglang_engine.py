"""The gateway in front of SGLang: the launch command built from the SGLang plan, SGLang's own
/metrics names read for admission, and its pool taken from /server_info.

No SGLang runs on this machine (its PyPI wheel is CUDA-only: no CPU kernels in sglang-kernel),
so where an engine is needed the fake upstream stands in for it, serving a /metrics page copied
verbatim from SGLang's docs (tests/gateway/data/sglang_docs_metrics_sample.txt, source in its
header). Starting SGLang itself is the one GPU-only step.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import httpx
import pytest

from kvwise.cli import main
from kvwise.core.catalog import load_model
from kvwise.core.flags import VllmFlags
from kvwise.core.gpus import resolve_gpu
from kvwise.gateway.cli import build_parser, engine_command
from kvwise.gateway.discovery import plan_limits
from kvwise.gateway.launcher import plan_launches
from kvwise.gateway.replicas import Replica, parse_engine_metrics
from kvwise.planner.sglang import SglangFlags, plan_sglang
from tests.fake_upstream import Behaviour
from tests.gateway.servers import fake_upstreams
from tests.gateway.test_cli import kvwise_serve

DOCS_SAMPLE = (Path(__file__).parent / "data" / "sglang_docs_metrics_sample.txt").read_text()
# SGLang's pool for the docs sample is not on that page (sglang:max_total_num_tokens came later):
# 123,859 tokens in use at token_usage 0.28 puts it near 442,000; /server_info reports it
SAMPLE_POOL = 442_353


def test_reads_sglangs_documented_metrics_page() -> None:
    load = parse_engine_metrics(DOCS_SAMPLE)
    assert load.engine == "sglang"
    assert load.num_requests_waiting == 2826
    assert load.pool_tokens is None  # not on this page: the gateway asks /server_info
    assert load.kv_cache_usage_perc == pytest.approx(0.28)
    assert load.block_size == 1  # SGLang allocates per token (page_size 1)


def test_tensor_parallel_ranks_are_not_counted_twice() -> None:
    """SGLang 0.5.x labels each scheduler gauge by rank; TP ranks repeat the same figure."""
    labels = 'model_name="qwen",engine_type="unified",tp_rank="{tp}",pp_rank="0",dp_rank="{dp}"'
    lines = []
    for dp in (0, 1):
        for tp in (0, 1):
            lab = labels.format(tp=tp, dp=dp)
            lines += [
                f"sglang:max_total_num_tokens{{{lab}}} 60000",
                f"sglang:num_used_tokens{{{lab}}} {1200 if dp == 0 else 800}",
                f"sglang:num_running_reqs{{{lab}}} 3",
                f"sglang:num_queue_reqs{{{lab}}} 2",
            ]
    load = parse_engine_metrics("\n".join(lines))
    assert load.pool_tokens == 120_000  # two DP ranks of 60,000, not four
    assert load.num_requests_waiting == 4  # 2 queued on each DP rank, not 8
    assert load.kv_cache_usage_perc == pytest.approx(2000 / 120_000)


def test_others_kv_on_sglang_tightens_the_budget_exactly() -> None:
    replica = Replica("r0", "http://r0", budget_tokens=SAMPLE_POOL)
    replica.load = parse_engine_metrics(
        DOCS_SAMPLE + f'sglang:max_total_num_tokens{{model_name="m"}} {SAMPLE_POOL}\n'
    )
    # 123,859 tokens held by someone else; SGLang has no partly empty blocks to allow for
    assert replica.effective_budget_tokens() == SAMPLE_POOL - 123_859
    assert replica.has_room(10)  # nothing of ours in flight: one request always runs
    replica.reserve(10)
    assert not replica.has_room(10)  # SGLang reports 2,826 queued requests: it is full


def _serve_args(*extra: str) -> object:
    return build_parser().parse_args(["Qwen/Qwen2.5-7B-Instruct", "--gpu", "rtx4090", *extra])


def test_launch_starts_sglang_with_every_planned_flag(tmp_path: Path) -> None:
    args = _serve_args("--engine", "sglang", "--launch", "--max-running-requests", "48")
    planned = plan_limits(args)  # type: ignore[arg-type]
    launch = plan_launches(args.model, engine_command(args, planned), 1, "", tmp_path)[0]  # type: ignore[attr-defined]
    plan = plan_sglang(
        load_model("Qwen/Qwen2.5-7B-Instruct"),
        resolve_gpu("rtx4090", None, detect=False),
        VllmFlags(),
        SglangFlags(max_running_requests=48),
    )
    assert launch.command == (
        "python3", "-m", "sglang.launch_server", "--model-path", "Qwen/Qwen2.5-7B-Instruct",
        "--host", "127.0.0.1", "--port", str(launch.port),
        "--mem-fraction-static", str(round(plan.mem_fraction_static, 3)),
        "--context-length", "32768",
        "--max-running-requests", "48",
        "--chunked-prefill-size", str(plan.chunked_prefill_size),
        "--cuda-graph-max-bs", str(plan.cuda_graph_max_bs),
        "--enable-metrics",
    )  # fmt: skip
    # the gateway admits against the same plan: SGLang's pool and running cap
    assert planned is not None
    assert (planned.kv_tokens, planned.max_num_seqs) == (plan.max_total_num_tokens, 48)


def test_launching_sglang_without_a_gpu_to_plan_for_is_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["serve", "Qwen/Qwen2.5-7B-Instruct", "--engine", "sglang", "--launch"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--gpu" in err


IDLE_QUEUE = DOCS_SAMPLE.replace(
    'sglang:num_queue_reqs{model_name="meta-llama/Llama-3.1-8B-Instruct"} 2826.0',
    'sglang:num_queue_reqs{model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.0',
)


@pytest.mark.parametrize(
    ("page", "statuses"), [(DOCS_SAMPLE, [200, 429]), (IDLE_QUEUE, [200, 200])]
)
def test_attached_to_sglang_the_budget_is_the_engines_pool_and_its_queue_holds_requests(
    tmp_path: Path, page: str, statuses: list[int]
) -> None:
    """The fake upstream stands in for SGLang (none runs here): SGLang's documented /metrics
    page and a /server_info with its pool; the first request is slow, so a second one arrives
    while SGLang reports 2,826 queued requests and waits in the gateway's queue until it times
    out (429). The same page with an empty queue lets the second one through."""
    assert page != DOCS_SAMPLE or "} 2826.0" in page
    behaviour = Behaviour(
        ttft_s=2.0,
        max_model_len=32768,
        metrics_text=page,
        server_info={"max_total_num_tokens": SAMPLE_POOL, "context_length": 32768},
    )
    with fake_upstreams(behaviour) as ups:
        upstream = ups[0][0]
        args = ["--upstream", upstream, "--queue-timeout", "0.5"]
        with kvwise_serve(args, tmp_path) as (url, limits):
            assert limits["replicas"] == [
                {"name": "r0", "url": upstream, "kv_budget_tokens": SAMPLE_POOL}
            ]
            assert re.search(r"/server_info\)$", str(limits["kv_budget_source"]))
            body = {"model": "fake", "messages": [{"role": "user", "content": "hi"}],
                    "max_tokens": 2}  # fmt: skip

            async def two_at_once() -> list[int]:
                async with httpx.AsyncClient(base_url=url, timeout=30) as api:
                    first = asyncio.create_task(api.post("/v1/chat/completions", json=body))
                    await asyncio.sleep(1.0)  # the gateway has read /metrics by now
                    second = await api.post("/v1/chat/completions", json=body)
                    return [(await first).status_code, second.status_code]

            assert asyncio.run(two_at_once()) == statuses


def test_in_front_of_sglang_with_a_plan_the_gateway_enforces_the_sglang_plan(
    tmp_path: Path,
) -> None:
    """`--engine sglang` with a MODEL and --gpu: SGLang's pool and running cap, not vLLM's."""
    plan = plan_sglang(
        load_model("Qwen/Qwen2.5-7B-Instruct"), resolve_gpu("rtx4090", None, detect=False),
        VllmFlags(), SglangFlags(),
    )  # fmt: skip
    with fake_upstreams(Behaviour(metrics_text=DOCS_SAMPLE)) as ups:
        args = ["Qwen/Qwen2.5-7B-Instruct", "--gpu", "rtx4090", "--engine", "sglang",
                "--upstream", ups[0][0]]  # fmt: skip
        with kvwise_serve(args, tmp_path) as (_, limits):
            assert limits["replicas"][0]["kv_budget_tokens"] == plan.max_total_num_tokens  # type: ignore[index]
            assert limits["kv_budget_source"] == "the plan"
            assert limits["max_num_seqs"] == plan.max_running_requests
            assert limits["max_model_len"] == plan.context_length
