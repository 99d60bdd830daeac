"""How long one engine step takes on a GPU: a linear combination of physical basis terms.

    step_s = sum_k coefficient_k * basis_k(step)

Each basis term is a roofline quantity in seconds (bytes over bandwidth, FLOPs over peak), or a
count for the overheads, so every coefficient is an efficiency factor or an overhead in seconds.
This is the "trained physics" shape of BLIS (inference-sim; reference/simulator_notes.md §2):
linear in the coefficients, so `kvwise calibrate` fits them by least squares from measured step
or request times (`basis` + `fit.fit_coefficients`). Basis terms, per rank:

    weight_read         weight bytes / HBM bandwidth (read once per step, whatever the batch)
    kv_read             KV bytes read by decode tokens / HBM bandwidth
    prefill_compute     (2 x active params x prefill tokens + attention FLOPs) / peak FLOP/s
    decode_compute      (2 x active params x decode tokens + attention FLOPs) / peak FLOP/s
    allreduce           tensor-parallel all-reduce bytes / interconnect bandwidth
    allreduce_call_s    number of all-reduces (2 per layer when TP > 1): latency per call
    step_overhead_s     1 per step: scheduling, input preparation, sampling launch, output
    layer_overhead_s    layers per step: kernel launches not hidden by CUDA graphs
    request_overhead_s  requests in the step: per-sequence CPU and sampler work

Because every basis term is linear in the step's token counts, the engine evaluates a step as
`StepWeights`: six numbers applied to (1, prefill tokens, prefill attention pairs, decode
tokens, decode context tokens, requests). Same inputs, same float operations, same result.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from kvwise.core.gpus import GpuSpec
from kvwise.core.models import ModelSpec
from kvwise.core.weights import active_params

BASIS_NAMES = (
    "weight_read",
    "kv_read",
    "prefill_compute",
    "decode_compute",
    "allreduce",
    "allreduce_call_s",
    "step_overhead_s",
    "layer_overhead_s",
    "request_overhead_s",
)


@dataclass(frozen=True)
class StepTimeCoefficients:
    """Efficiencies (dimensionless multipliers of roofline times) and overheads (seconds).

    The defaults are fitted by `benchmarks/fit_steptime.py` on the training half of
    shared/validation/serving_benchmarks.jsonl (see DEFAULT_COEFFICIENTS_SOURCE).
    """

    weight_read: float = 1.2
    kv_read: float = 1.2
    prefill_compute: float = 1.6
    decode_compute: float = 0.3
    allreduce: float = 1.0
    allreduce_call_s: float = 20e-6
    step_overhead_s: float = 2e-3
    layer_overhead_s: float = 0.0
    request_overhead_s: float = 20e-6
    # Not a step term: HTTP, tokenisation and detokenisation between the client and the engine,
    # added once to every TTFT and E2E (BLIS's alpha_0; reference/simulator_notes.md §2).
    api_overhead_s: float = 10e-3

    def vector(self) -> tuple[float, ...]:
        return tuple(getattr(self, name) for name in BASIS_NAMES)

    @classmethod
    def from_vector(cls, values: tuple[float, ...] | list[float], api_overhead_s: float) -> StepTimeCoefficients:
        return cls(**dict(zip(BASIS_NAMES, values)), api_overhead_s=api_overhead_s)

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


def step_cost(
    model: ModelSpec,
    gpu: GpuSpec,
    *,
    weight_bytes_per_rank: int,
    kv_dtype_bytes: int,
    tensor_parallel_size: int = 1,
    use_fp8_compute: bool = False,
) -> StepCost:
    tp = tensor_parallel_size
    peak_flops = gpu.fp8_flops if use_fp8_compute and gpu.fp8_flops else gpu.bf16_flops
    bandwidth = gpu.bandwidth_bytes_s
    # K and V, per layer, per KV head on this rank (heads are replicated when fewer than ranks).
    # Sliding-window layers read at most their window; every validation context is shorter than
    # the windows of the catalog's sliding models (4096+), so all layers count in full.
    kv_heads_rank = max(1, model.num_kv_heads // tp)
    kv_bytes_per_token = 2 * model.num_layers * kv_heads_rank * model.head_dim * kv_dtype_bytes
    heads_rank = model.num_attention_heads // tp
    # QK^T and AV: 2 FLOPs per multiply-add, head_dim each, per query-key pair, per head, per layer
    attention_flops_per_pair = 4 * model.num_layers * heads_rank * model.head_dim
    # two all-reduces per layer (after attention and after the MLP) of hidden x activation bytes;
    # a ring all-reduce moves 2 (tp - 1) / tp of the message through each link
    activation_bytes = model.dtype_bytes
    ring_factor = 2 * (tp - 1) / tp
    allreduce_bytes_per_token = 2 * model.num_layers * model.hidden_size * activation_bytes * ring_factor
    return StepCost(
        weight_read_s=weight_bytes_per_rank / bandwidth,
        kv_read_s_per_token=kv_bytes_per_token / bandwidth,
        linear_s_per_token=2 * active_params(model) / tp / peak_flops,
        attention_s_per_pair=attention_flops_per_pair / peak_flops,
        allreduce_s_per_token=allreduce_bytes_per_token / gpu.interconnect_bytes_s if tp > 1 else 0.0,
        allreduce_calls=2 * model.num_layers if tp > 1 else 0,
        num_layers=model.num_layers,
    )


def basis(
    cost: StepCost,
    num_prefill_tokens: int,
    prefill_attention_x2: int,
    num_decode_tokens: int,
    decode_context: int,
    num_reqs: int,
) -> tuple[float, ...]:
    """The basis terms of one step (order of BASIS_NAMES), for fitting and explaining."""
    return (
        cost.weight_read_s,
        cost.kv_read_s_per_token * decode_context,
        cost.linear_s_per_token * num_prefill_tokens
        + cost.attention_s_per_pair * prefill_attention_x2 / 2,
        cost.linear_s_per_token * num_decode_tokens + cost.attention_s_per_pair * decode_context,
        cost.allreduce_s_per_token * (num_prefill_tokens + num_decode_tokens),
        float(cost.allreduce_calls),
        1.0,
        float(cost.num_layers),
        float(num_reqs),
    )


def apply(coefficients: StepTimeCoefficients, basis_terms: tuple[float, ...]) -> float:
    return sum(c * b for c, b in zip(coefficients.vector(), basis_terms))


@dataclass(frozen=True)
class StepWeights:
    """step_s = base + prefill_token * P + prefill_pair_x2 * A2 + decode_token * D
    + context_token * C + request * R (the basis terms, folded per token count)."""

    base_s: float
    prefill_token_s: float
    prefill_pair_x2_s: float
    decode_token_s: float
    context_token_s: float
    request_s: float

    def step_s(self, prefill: int, pairs_x2: int, decode: int, context: int, reqs: int) -> float:
        return (
            self.base_s
            + self.prefill_token_s * prefill
            + self.prefill_pair_x2_s * pairs_x2
            + self.decode_token_s * decode
            + self.context_token_s * context
            + self.request_s * reqs
        )


def step_weights(cost: StepCost, c: StepTimeCoefficients) -> StepWeights:
    return StepWeights(
        base_s=c.weight_read * cost.weight_read_s
        + c.allreduce_call_s * cost.allreduce_calls
        + c.step_overhead_s
        + c.layer_overhead_s * cost.num_layers,
        prefill_token_s=c.prefill_compute * cost.linear_s_per_token + c.allreduce * cost.allreduce_s_per_token,
        prefill_pair_x2_s=c.prefill_compute * cost.attention_s_per_pair / 2,
        decode_token_s=c.decode_compute * cost.linear_s_per_token + c.allreduce * cost.allreduce_s_per_token,
        context_token_s=c.kv_read * cost.kv_read_s_per_token + c.decode_compute * cost.attention_s_per_pair,
        request_s=c.request_overhead_s,
    )
