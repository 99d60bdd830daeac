"""How long one engine step takes on a GPU: a linear combination of physical basis terms.

    step_s = sum_k coefficient_k * basis_k(step)

Each basis term is a roofline quantity in seconds (bytes over bandwidth, FLOPs over peak), or a
count for the overheads, so every coefficient is an efficiency factor or an overhead in seconds.
This is the "trained physics" shape of BLIS (github.com/inference-sim/inference-sim):
linear in the coefficients, so `kvwise calibrate` fits them by least squares from measured step
or request times (`basis` + `fit.fit_coefficients`). Basis terms, per rank:

    weight_read         weight bytes / HBM bandwidth: every step streams the weights once; of
                        an MoE model's routed experts only those the step's tokens are routed to
                        (T tokens each picking k of E experts touch a share 1 - (1 - k/E)^T of
                        them, routing taken as uniform): a small decode batch reads a few
                        experts, a batch of a few hundred tokens all of them
    kv_read             KV bytes read by decode tokens / HBM bandwidth
    gemm_compute        GEMM time beyond the weight read: max(0, 2 x active params x tokens /
                        peak FLOP/s - weight_read). Small batches are bound by reading the
                        weights; past the roofline ridge (a few hundred tokens) compute takes
                        over. A plain sum of both would double-count every prefill chunk.
    attention_compute   attention FLOPs (prefill query-key pairs and decode context) / peak
    allreduce           tensor-parallel all-reduce bytes / interconnect bandwidth
    allreduce_call_s    number of all-reduces (2 per layer when TP > 1): latency per call
    step_overhead_s     1 per step: scheduling, input preparation, sampling launch, output
    layer_overhead_s    layers per step: kernel launches not hidden by CUDA graphs
    request_overhead_s  requests in the step: per-sequence CPU and sampler work

The engine evaluates a step through `StepWeights`, the same terms folded per token count:
(tokens, prefill attention pairs, decode context tokens, requests). Same inputs, same float
operations, same result; plus the links of a multi-node or non-default interconnect
(`StepCost.comm_*`, from `interconnect.comm_cost`), which are physics, not fitted. On GPUs
without peer-to-peer the tensor-parallel all-reduces are NCCL's through host memory
(`StepCost.shm_*`, `interconnect.nccl_shm_collectives`) in place of the fitted all-reduce terms:
per step, calls x min(LL, Simple) of latency + tokens x seconds per token (NCCL picks the
faster protocol for the message size), the only term that is not linear in the tokens.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from kvwise.core.gpus import GpuSpec
from kvwise.core.models import ModelSpec
from kvwise.core.weights import active_params
from kvwise.sim.frontend import FRONTEND_TOKEN_S
from kvwise.sim.interconnect import CommCost, NcclShmAllReduce

BASIS_NAMES = (
    "weight_read",
    "kv_read",
    "gemm_compute",
    "attention_compute",
    "allreduce",
    "allreduce_call_s",
    "step_overhead_s",
    "layer_overhead_s",
    "request_overhead_s",
)


@dataclass(frozen=True)
class StepTimeCoefficients:
    """Efficiencies (dimensionless multipliers of roofline times) and overheads (seconds).

    These defaults are the physical prior (typical efficiencies from the roofline literature)
    that `benchmarks/fit_steptime.py` starts from and shrinks towards; the fitted sets kvwise
    ships are in `coefficients.py`.
    """

    weight_read: float = 1.15  # HBM reaches ~85-90 % of its datasheet bandwidth in decode
    kv_read: float = 1.3  # paged-attention reads are scattered: a little less efficient
    gemm_compute: float = 1.4  # large GEMMs reach ~70 % of dense peak
    attention_compute: float = 2.0  # FlashAttention kernels ~50 % of peak
    allreduce: float = 1.5
    allreduce_call_s: float = 20e-6
    step_overhead_s: float = 2e-3
    layer_overhead_s: float = 0.0
    request_overhead_s: float = 20e-6
    # Not step terms: the API server in front of the engine (`frontend.py`). A latency added
    # once to every TTFT and E2E (HTTP, the hop to the engine core, streaming back; BLIS's
    # alpha_0), and the CPU time its single event loop spends
    # on each request (chat template, tokenization), over which bursts of requests queue.
    api_overhead_s: float = 10e-3
    frontend_request_s: float = 0.0
    # and the CPU time it spends per streamed output token (detokenizing, one SSE chunk), on
    # a CPU that works beside the GPU: output tokens/s can go no higher than 1 / this
    frontend_token_s: float = FRONTEND_TOKEN_S

    def vector(self) -> tuple[float, ...]:
        return tuple(getattr(self, name) for name in BASIS_NAMES)

    def to_json(self) -> dict[str, float]:
        return asdict(self)


@dataclass(frozen=True)
class StepCost:
    """Per-deployment constants that turn a step's token counts into basis terms (seconds)."""

    weight_read_s: float  # weight bytes per rank / bandwidth
    kv_read_s_per_token: float  # KV bytes per context token per rank / bandwidth
    linear_s_per_token: float  # 2 x active params per rank / peak FLOP/s
    attention_s_per_pair: float  # 4 x layers x heads per rank x head_dim / peak FLOP/s
    allreduce_s_per_token: float  # all-reduce bytes per token / interconnect (0 at TP 1)
    allreduce_calls: int  # all-reduces per step (0 at TP 1)
    num_layers: int
    # links beyond the card's own (`interconnect.comm_cost`): physics, not fitted
    comm_fixed_s: float = 0.0  # per step: slower-link all-reduce latency, pipeline hops
    comm_s_per_token: float = 0.0  # per token: activations across pipeline stage boundaries
    expert_read_s: float = 0.0  # the routed experts' share of weight_read_s (0: dense model)
    expert_miss: float = 1.0  # chance that one token is not routed to a given expert: 1 - k/E
    # tensor parallelism without GPU peer-to-peer (`interconnect.nccl_shm_collectives`): NCCL
    # through host memory replaces the fitted all-reduce terms (then allreduce_* are 0)
    shm: NcclShmAllReduce | None = None


def step_cost(
    model: ModelSpec,
    gpu: GpuSpec,
    *,
    weight_bytes_per_rank: int,
    kv_bytes_per_token: int,
    tensor_parallel_size: int = 1,
    use_fp8_compute: bool = False,
    comm: CommCost | None = None,
    routed_expert_share: float = 0.0,
) -> StepCost:
    """`comm`: the replica's links (kvwise.sim.interconnect); None: TP over the card's own."""
    tp = tensor_parallel_size
    peak_flops = gpu.fp8_flops if use_fp8_compute and gpu.fp8_flops else gpu.bf16_flops
    bandwidth = gpu.bandwidth_bytes_s
    # kv_bytes_per_token: K and V of every layer on this rank (the planner's figure). Sliding-
    # window layers read at most their window; every validation context is shorter than the
    # windows of the catalog's sliding models (4096+), so all layers count in full.
    heads_rank = model.num_attention_heads // tp
    # QK^T and AV: 2 FLOPs per multiply-add, head_dim each, per query-key pair, per head, per layer
    attention_flops_per_pair = 4 * model.num_layers * heads_rank * model.head_dim
    # two all-reduces per layer (after attention and after the MLP) of hidden x activation bytes;
    # a ring all-reduce moves 2 (tp - 1) / tp of the message through each link
    activation_bytes = model.dtype_bytes
    ring_factor = 2 * (tp - 1) / tp
    allreduce_bytes_per_token = (
        2 * model.num_layers * model.hidden_size * activation_bytes * ring_factor
    )
    link_bytes_s = comm.allreduce_bytes_s if comm is not None else gpu.interconnect_bytes_s
    shm = comm.shm if comm is not None else None
    fitted_allreduce = tp > 1 and shm is None
    moe = model.moe
    return StepCost(
        weight_read_s=weight_bytes_per_rank / bandwidth,
        expert_read_s=routed_expert_share * weight_bytes_per_rank / bandwidth,
        expert_miss=1 - moe.num_experts_per_tok / moe.num_experts if moe is not None else 1.0,
        kv_read_s_per_token=kv_bytes_per_token / bandwidth,
        linear_s_per_token=2 * active_params(model) / tp / peak_flops,
        attention_s_per_pair=attention_flops_per_pair / peak_flops,
        allreduce_s_per_token=allreduce_bytes_per_token / link_bytes_s if fitted_allreduce else 0.0,
        allreduce_calls=2 * model.num_layers if fitted_allreduce else 0,
        num_layers=model.num_layers,
        comm_fixed_s=comm.fixed_s if comm is not None else 0.0,
        comm_s_per_token=comm.s_per_token if comm is not None else 0.0,
        shm=shm,
    )


def basis(
    cost: StepCost,
    num_tokens: int,
    prefill_attention_x2: int,
    decode_context: int,
    num_reqs: int,
    num_steps: int = 1,
) -> tuple[float, ...]:
    """The basis terms of one step (order of BASIS_NAMES), for fitting and explaining."""
    return (
        weight_read_step_s(cost, num_tokens) * num_steps,
        cost.kv_read_s_per_token * decode_context,
        gemm_excess_s(cost, num_tokens) * num_steps,
        cost.attention_s_per_pair * (prefill_attention_x2 / 2 + decode_context),
        cost.allreduce_s_per_token * num_tokens,
        float(cost.allreduce_calls * num_steps),
        float(num_steps),
        float(cost.num_layers * num_steps),
        float(num_reqs),
    )


def weight_read_step_s(cost: StepCost, num_tokens: int) -> float:
    """Weight bytes one step of `num_tokens` tokens reads, over the bandwidth: all of a dense
    model's; of an MoE model's routed experts, the share its tokens are routed to."""
    if not cost.expert_read_s:
        return cost.weight_read_s
    return cost.weight_read_s - cost.expert_read_s * cost.expert_miss**num_tokens


def gemm_excess_s(cost: StepCost, num_tokens: int) -> float:
    """GEMM compute time of a step beyond the time it takes to read the weights."""
    return max(0.0, cost.linear_s_per_token * num_tokens - cost.weight_read_s)


def apply(coefficients: StepTimeCoefficients, basis_terms: tuple[float, ...]) -> float:
    return sum(c * b for c, b in zip(coefficients.vector(), basis_terms, strict=False))


@dataclass(frozen=True)
class StepWeights:
    """step_s = base - idle_experts(T) + token * T + gemm * max(0, T * gemm_token - weight_read)
    + shm_calls * min(ll + ll_token * T, simple + simple_token * T)
    + pair_x2 * A2 + context_token * C + request * R (the basis terms, folded)."""

    base_s: float
    expert_s: float  # reading all routed experts (0: dense model)
    expert_miss: float
    token_s: float
    gemm: float
    gemm_token_s: float
    weight_read_s: float
    pair_x2_s: float
    context_token_s: float
    request_s: float
    # NCCL through host memory (0 calls: the fitted all-reduce terms in base_s and token_s)
    shm_calls: float = 0.0
    shm_ll_s: float = 0.0
    shm_ll_token_s: float = 0.0
    shm_simple_s: float = 0.0
    shm_simple_token_s: float = 0.0

    def step_s(self, tokens: int, pairs_x2: int, context: int, reqs: int) -> float:
        excess = self.gemm_token_s * tokens - self.weight_read_s
        return (
            self.base_s
            - (self.expert_s * self.expert_miss**tokens if self.expert_s else 0.0)
            + self.token_s * tokens
            + (self.gemm * excess if excess > 0 else 0.0)
            + (self.shm_allreduce_s(tokens) if self.shm_calls else 0.0)
            + self.pair_x2_s * pairs_x2
            + self.context_token_s * context
            + self.request_s * reqs
        )

    def shm_allreduce_s(self, tokens: int) -> float:
        """The step's all-reduces through host memory: NCCL's faster protocol for the size."""
        ll = self.shm_ll_s + self.shm_ll_token_s * tokens
        simple = self.shm_simple_s + self.shm_simple_token_s * tokens
        return self.shm_calls * (ll if ll < simple else simple)

    def idle_experts_s(self, tokens: int) -> float:
        """The read time of the routed experts no token of the step was routed to (as step_s
        computes it inline: the same float operations)."""
        return self.expert_s * self.expert_miss**tokens if self.expert_s else 0.0


def step_weights(cost: StepCost, c: StepTimeCoefficients) -> StepWeights:
    shm = cost.shm
    return StepWeights(
        base_s=c.weight_read * cost.weight_read_s
        + c.allreduce_call_s * cost.allreduce_calls
        + c.step_overhead_s
        + c.layer_overhead_s * cost.num_layers
        + cost.comm_fixed_s
        + (shm.gather_latency_s if shm is not None else 0.0),
        expert_s=c.weight_read * cost.expert_read_s,
        expert_miss=cost.expert_miss,
        token_s=c.allreduce * cost.allreduce_s_per_token + cost.comm_s_per_token,
        gemm=c.gemm_compute,
        gemm_token_s=cost.linear_s_per_token,
        weight_read_s=cost.weight_read_s,
        pair_x2_s=c.attention_compute * cost.attention_s_per_pair / 2,
        context_token_s=c.kv_read * cost.kv_read_s_per_token
        + c.attention_compute * cost.attention_s_per_pair,
        request_s=c.request_overhead_s + (shm.gather_s_per_request if shm is not None else 0.0),
        shm_calls=float(shm.calls) if shm is not None else 0.0,
        shm_ll_s=shm.ll_latency_s if shm is not None else 0.0,
        shm_ll_token_s=shm.ll_s_per_token if shm is not None else 0.0,
        shm_simple_s=shm.simple_latency_s if shm is not None else 0.0,
        shm_simple_token_s=shm.simple_s_per_token if shm is not None else 0.0,
    )
