"""What every target renders: the plan turned into one deployment description.

`DeploySpec` is built once from the plan (`from_plan`) and handed to the k8s, helm and ray
renderers, so the three carry the same flags, GPU count and budgets.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvwise import __version__
from kvwise.core.flags import VllmFlags
from kvwise.deploy.engine_args import engine_args, gateway_plan_args
from kvwise.deploy.resources import ReplicaResources, replica_resources
from kvwise.deploy.startup import ENGINE_INIT_S, LOAD_RATE_MB_S, StartupBudget, startup_budget
from kvwise.planner import Plan
from kvwise.planner.sglang import SglangPlan, launch_args

VLLM_IMAGE = "vllm/vllm-openai"  # the official image, tagged v<release> (hub.docker.com)
# SGLang's official image, tagged v<release> (hub.docker.com/r/lmsysorg/sglang; its docs'
# "Install SGLang", method "Using docker")
SGLANG_IMAGE = "lmsysorg/sglang"
SGLANG_COMMAND = ("python3", "-m", "sglang.launch_server")
VLLM_PORT = 8000  # vllm serve's default --port
GATEWAY_PORT = 8000  # kvwise serve's default --port
REDIS_PORT = 6379  # Redis's default port
REDIS_IMAGE = "redis:7.4"  # a pinned Redis release with AOF (appendonly, appendfsync)
HF_TOKEN_SECRET = "hf-token"  # Secret the user creates; referenced, never written by kvwise
HF_TOKEN_KEY = "token"


@dataclass(frozen=True)
class DeployOptions:
    """The user's choices beyond the plan (all from `kvwise deploy`'s command line)."""

    name: str = "vllm"
    num_replicas: int = 1
    num_gateways: int = 2
    gateway_image: str = f"kvwise:{__version__}"
    load_rate_mb_s: float = LOAD_RATE_MB_S
    engine_init_s: float = ENGINE_INIT_S


@dataclass(frozen=True)
class DeploySpec:
    model_id: str
    vllm_version: str
    image: str
    engine_args: tuple[str, ...]  # after `vllm serve MODEL`
    gateway_plan_args: tuple[str, ...]  # what `kvwise serve` plans the KV budget with
    tensor_parallel_size: int
    pipeline_parallel_size: int
    resources: ReplicaResources
    startup: StartupBudget
    options: DeployOptions
    engine: str = "vllm"  # or "sglang": its image, its launch command, SGLang's flag names

    @property
    def container_command(self) -> list[str]:
        return list(SGLANG_COMMAND) if self.engine == "sglang" else ["vllm", "serve"]

    @property
    def container_args(self) -> list[str]:
        """Everything after the command but --host and --port."""
        model = ["--model-path", self.model_id] if self.engine == "sglang" else [self.model_id]
        return [*model, *self.engine_args]

    @property
    def replica_names(self) -> list[str]:
        return [f"{self.options.name}-{index}" for index in range(self.options.num_replicas)]


def from_plan(plan: Plan, flags: VllmFlags, options: DeployOptions) -> DeploySpec:
    startup = startup_budget(plan, options.load_rate_mb_s, options.engine_init_s)
    return DeploySpec(
        model_id=plan.model.model_id,
        vllm_version=plan.vllm_version,
        image=f"{VLLM_IMAGE}:v{plan.vllm_version}",
        engine_args=tuple(engine_args(plan)),
        gateway_plan_args=tuple(gateway_plan_args(plan)),
        tensor_parallel_size=plan.flags.tensor_parallel_size,
        pipeline_parallel_size=plan.flags.pipeline_parallel_size,
        resources=replica_resources(plan, startup.weight_bytes),
        startup=startup,
        options=options,
    )


def from_sglang_plan(
    plan: Plan, sglang_plan: SglangPlan, flags: VllmFlags, release: str, options: DeployOptions
) -> DeploySpec:
    """SGLang replicas: its image pinned to `release`, every planned flag under SGLang's names.
    `plan` (vLLM's, same model and card) sizes what does not depend on the engine: the
    checkpoint to download and cache, the load time, the host memory (as vLLM loads)."""
    startup = startup_budget(plan, options.load_rate_mb_s, options.engine_init_s)
    gpu = sglang_plan.gpu
    card = ["--gpu", gpu.key] if gpu.key else ["--gpu-memory-gib", f"{gpu.memory_gib:.2f}"]
    args = launch_args(sglang_plan, flags)
    return DeploySpec(
        model_id=plan.model.model_id,
        vllm_version=plan.vllm_version,
        image=f"{SGLANG_IMAGE}:v{release}",
        engine_args=tuple(args),
        gateway_plan_args=tuple([*card, *_gateway_sglang_args(sglang_plan, flags, release)]),
        tensor_parallel_size=sglang_plan.tp,
        pipeline_parallel_size=1,
        resources=replica_resources(plan, startup.weight_bytes),
        startup=startup,
        options=options,
        engine="sglang",
    )


def _gateway_sglang_args(result: SglangPlan, flags: VllmFlags, release: str) -> list[str]:
    """`kvwise serve` options that plan the replicas' own pool (its flag names)."""
    args = [
        "--engine", "sglang", "--sglang-version", release,
        "--mem-fraction-static", str(round(result.mem_fraction_static, 3)),
        "--max-model-len", str(result.context_length),
        "--max-running-requests", str(result.max_running_requests),
        "--chunked-prefill-size", str(result.chunked_prefill_size),
        "--cuda-graph-max-bs", str(result.cuda_graph_max_bs),
    ]  # fmt: skip
    if result.tp > 1:
        args += ["--tensor-parallel-size", str(result.tp)]
    if flags.kv_cache_dtype:
        args += ["--kv-cache-dtype", flags.kv_cache_dtype]
    return args
