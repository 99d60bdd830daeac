"""Route each request to the replica that would give it the shortest time to first token.

For every replica with room, the predicted TTFT of this request there is

    ttft = step_s x steps + token_s x tokens + seq_s x running
    steps   = 1 + prefills queued ahead of it (ours not yet at their first token, or the
              engine's own `num_requests_waiting` when larger: someone else's queue)
    tokens  = prompt tokens still to prefill ahead of it + its own prompt tokens the replica
              does not hold in its prefix cache
    running = sequences of ours decoding there (each one adds to every step's time)

and the cheapest replica serves. Session affinity is not a rule here: a replica that holds the
session's prefix needs fewer tokens prefilled, so it wins while that saving is larger than the
wait its queue adds, and loses once it is not (issue: on a CPU engine a cache hit saves little,
and 8 sessions hashed onto 2 replicas queued behind each other). `--routing cost`; the default
stays `affinity` (benchmarks/results/routing_policies.txt: cost routing did not win there).

What a replica holds in its prefix cache: the gateway's own record of what it sent there, one
entry per affinity key (session, end user or system prompt) holding the prompt tokens of the
last request prefilled there (at its first token, or its end for a whole reply), evicted least
recently used once their sum passes the replica's KV pool, as vLLM's block pool evicts freed
blocks least recently used (vllm/v1/core/block_pool.py).

The three coefficients are a step-time model in its simplest form (`kvwise.sim.steptime`:
a per-step constant, a per-token term, a per-sequence term), fitted online: every first token
the gateway relays is one measurement of `ttft` against the terms recorded when its request was
routed. Ridge least squares with exponential forgetting, pulled towards the prior coefficients
(`PRIOR`), so the first requests route by the prior and later ones by what this engine
measured. Each pick is O(replicas); each measurement one 3x3 solve.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from kvwise.gateway.replicas import Replica
from kvwise.gateway.routing import Router
from kvwise.sim.steptime import StepWeights

log = logging.getLogger("kvwise.gateway")

# Prior step-time coefficients (seconds per step, per prefilled token, per running sequence),
# used until measurements replace them: kvwise.sim.steptime's default coefficients applied to a
# 7B bf16 model on one H100 (weight read 15.2 GB / 3.35 TB/s x 1.15 + step_overhead_s 2 ms
# ~ 7 ms; GEMM 2 x 7.6e9 FLOP / 989e12 FLOP/s x 1.4 ~ 2e-5 s per token; request_overhead_s).
# `kvwise serve Qwen/Qwen2.5-7B-Instruct --gpu h100 --routing cost` derives (6.4 ms, 16 us,
# 29 us) from the shipped fit (`prior_from_step_weights`); with no MODEL and --gpu this stands in.
PRIOR = (7e-3, 2e-5, 20e-6)
# A decoding sequence's context, for the prior's per-sequence term (its KV read each step) until
# measurements say what this deployment's are
PRIOR_CONTEXT_TOKENS = 1024
# How much the prior counts, in measurements: half of one, so the first few first tokens
# already move the coefficients they exercise (the prior may be off by 10x on a CPU engine).
PRIOR_WEIGHT = 0.5
# Forgetting: a measurement's weight halves after this many newer ones (the engine's speed
# drifts with its load and, on a shared machine, with its neighbours').
HALF_LIFE_MEASUREMENTS = 256
LOG_EVERY = 256  # measurements between two log lines of the fitted coefficients
MAX_ROUTES = 8192  # routed requests awaiting their first token, at most (older ones forgotten)


@dataclass
class _Route:
    replica: Replica
    terms: tuple[float, float, float]
    tokens: int  # prefill tokens this request adds to the replica's queue
    key: str
    prompt_tokens: int  # cached there once prefilled


@dataclass
class _ReplicaState:
    cached: OrderedDict[str, int] = field(default_factory=OrderedDict)  # key -> prompt tokens
    cached_tokens: int = 0
    pending_prefills: int = 0  # routed, no first token yet
    pending_tokens: int = 0


def _solve3(a: list[list[float]], b: list[float]) -> list[float] | None:
    """Gaussian elimination with partial pivoting; None when singular."""
    m = [[*row, v] for row, v in zip(a, b, strict=True)]
    for col in range(3):
        pivot = max(range(col, 3), key=lambda r: abs(m[r][col]))
        if abs(m[pivot][col]) < 1e-300:
            return None
        m[col], m[pivot] = m[pivot], m[col]
        for r in range(col + 1, 3):
            f = m[r][col] / m[col][col]
            for c in range(col, 4):
                m[r][c] -= f * m[col][c]
    x = [0.0, 0.0, 0.0]
    for r in (2, 1, 0):
        x[r] = (m[r][3] - sum(m[r][c] * x[c] for c in range(r + 1, 3))) / m[r][r]
    return x


class TtftModel:
    """ttft = step_s x steps + token_s x tokens + seq_s x running, fitted online."""

    def __init__(self, prior: tuple[float, float, float] = PRIOR) -> None:
        self.prior = prior
        self.coefficients = prior
        self.num_measurements = 0
        self._decay = 0.5 ** (1 / HALF_LIFE_MEASUREMENTS)
        # sums of w x x^T and w x y over the measurements, in units scaled by the prior so the
        # three terms are comparable (a step and a token differ by ~200x in seconds)
        self._xx = [[0.0] * 3 for _ in range(3)]
        self._xy = [0.0] * 3
        self._weight = 0.0  # sum of the measurements' weights

    def predict(self, terms: tuple[float, float, float]) -> float:
        return sum(c * t for c, t in zip(self.coefficients, terms, strict=True))

    def measure(self, terms: tuple[float, float, float], ttft_s: float) -> None:
        z = [t * p for t, p in zip(terms, self.prior, strict=True)]  # seconds at the prior
        for i in range(3):
            self._xy[i] = self._xy[i] * self._decay + z[i] * ttft_s
            for j in range(3):
                self._xx[i][j] = self._xx[i][j] * self._decay + z[i] * z[j]
        self.num_measurements += 1
        self._weight = self._weight * self._decay + 1.0
        # ridge towards scale 1 (the prior), each term with PRIOR_WEIGHT measurements' worth of
        # its own mean square, so a term the data never exercise stays at its prior
        ridge = [PRIOR_WEIGHT * max(self._xx[i][i] / self._weight, 1e-12) for i in range(3)]
        a = [[self._xx[i][j] + (ridge[i] if i == j else 0.0) for j in range(3)] for i in range(3)]
        b = [self._xy[i] + ridge[i] for i in range(3)]
        solution = _solve3(a, b)
        if solution is None:
            return
        # a coefficient is a time: never negative (least squares can make one so on noise)
        self.coefficients = (
            max(0.0, solution[0]) * self.prior[0],
            max(0.0, solution[1]) * self.prior[1],
            max(0.0, solution[2]) * self.prior[2],
        )


def prior_from_step_weights(weights: StepWeights) -> tuple[float, float, float]:
    """The prior from the simulator's step model for the deployment (`kvwise.sim.deploy`: the
    user's calibration for the GPU and model, else the shipped coefficients for the GPU):
    a step with one request; a prefilled token past the roofline ridge (compute-bound, as a
    prompt of hundreds of tokens is); a decoding sequence's request overhead and KV read."""
    return (
        weights.base_s + weights.request_s,
        weights.token_s + weights.gemm * weights.gemm_token_s,
        weights.request_s + weights.token_s + weights.context_token_s * PRIOR_CONTEXT_TOKENS,
    )


class CostRouter(Router):
    """The replica with the least predicted TTFT for this request (module docstring)."""

    def __init__(
        self,
        replicas: Sequence[Replica],
        model: TtftModel | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        super().__init__(replicas)
        self.model = model or TtftModel()
        self.clock = clock
        self._state: dict[str, _ReplicaState] = {}
        self._routes: OrderedDict[int, _Route] = OrderedDict()

    def state(self, replica: Replica) -> _ReplicaState:
        st = self._state.get(replica.name)
        if st is None:
            st = self._state[replica.name] = _ReplicaState()
        return st

    def terms(self, replica: Replica, key: str, prompt_tokens: int) -> tuple[float, float, float]:
        st = self.state(replica)
        waiting = st.pending_prefills
        if replica.load is not None:
            waiting = max(waiting, replica.load.num_requests_waiting)
        uncached = prompt_tokens - min(prompt_tokens, st.cached.get(key, 0))
        running = max(0, replica.num_seqs - st.pending_prefills)
        return (1.0 + waiting, float(st.pending_tokens + uncached), float(running))

    def pick(
        self,
        key: str,
        cost_tokens: int,
        exclude: Sequence[Replica] = (),
        num_seqs: int = 1,
        prompt_tokens: int | None = None,
        request_id: int | None = None,
    ) -> Replica | None:
        prompt = cost_tokens if prompt_tokens is None else prompt_tokens
        if request_id is not None:
            self._forget(request_id)  # routed again (failover, a refused lease): not there now
        best: Replica | None = None
        best_terms = (0.0, 0.0, 0.0)
        best_s = 0.0
        for replica in self.replicas:
            if replica in exclude or not replica.has_room(cost_tokens, num_seqs):
                continue
            terms = self.terms(replica, key, prompt)
            cost_s = self.model.predict(terms)
            if best is None or cost_s < best_s:
                best, best_terms, best_s = replica, terms, cost_s
        if best is None:
            return None
        if request_id is not None:
            st = self.state(best)
            uncached = int(best_terms[1]) - st.pending_tokens
            self._routes[request_id] = _Route(best, best_terms, uncached, key, prompt)
            st.pending_prefills += 1
            st.pending_tokens += uncached
            while len(self._routes) > MAX_ROUTES:
                self._settle(self._routes.popitem(last=False)[1])
        else:
            self._remember(best, key, prompt)
        return best

    def _remember(self, replica: Replica, key: str, prompt_tokens: int) -> None:
        st = self.state(replica)
        st.cached_tokens += prompt_tokens - st.cached.pop(key, 0)
        st.cached[key] = prompt_tokens
        pool = replica.budget_tokens
        if replica.load is not None and replica.load.pool_tokens is not None:
            pool = replica.load.pool_tokens
        while st.cached_tokens > pool and len(st.cached) > 1:
            st.cached_tokens -= st.cached.popitem(last=False)[1]

    def _settle(self, route: _Route) -> None:
        st = self.state(route.replica)
        st.pending_prefills -= 1
        st.pending_tokens -= route.tokens

    def first_token(self, request_id: int, ttft_s: float) -> None:
        """The request's first token came `ttft_s` after it was sent upstream: one measurement."""
        route = self._routes.pop(request_id, None)
        if route is None:
            return
        self._settle(route)
        self._remember(route.replica, route.key, route.prompt_tokens)
        self.model.measure(route.terms, ttft_s)
        if self.model.num_measurements % LOG_EVERY == 1:
            step_s, token_s, seq_s = self.model.coefficients
            log.info(
                "cost routing: TTFT = %.2f ms/step + %.2f us/prefilled token + %.3f ms/running "
                "sequence (%d first tokens measured)",
                step_s * 1e3, token_s * 1e6, seq_s * 1e3, self.model.num_measurements,
            )  # fmt: skip

    def done(self, request_id: int) -> None:
        """The request ended without a first token seen (a whole reply, an aborted stream): it
        no longer queues there, and its prompt was most likely prefilled."""
        route = self._routes.pop(request_id, None)
        if route is not None:
            self._settle(route)
            self._remember(route.replica, route.key, route.prompt_tokens)

    def _forget(self, request_id: int) -> None:
        route = self._routes.pop(request_id, None)
        if route is not None:
            self._settle(route)


class RoundRobinRouter(Router):
    """Each request to the next replica with room, in turn (the baseline of the benchmark)."""

    def __init__(self, replicas: Sequence[Replica]) -> None:
        super().__init__(replicas)
        self._next = 0

    def pick(
        self,
        key: str,
        cost_tokens: int,
        exclude: Sequence[Replica] = (),
        num_seqs: int = 1,
        prompt_tokens: int | None = None,
        request_id: int | None = None,
    ) -> Replica | None:
        n = len(self.replicas)
        for i in range(n):
            replica = self.replicas[(self._next + i) % n]
            if replica not in exclude and replica.has_room(cost_tokens, num_seqs):
                self._next = (self._next + i + 1) % n
                return replica
        return None


ROUTING_POLICIES = ("cost", "affinity", "round-robin")
DEFAULT_ROUTING = "affinity"


def make_router(
    policy: str,
    replicas: Sequence[Replica],
    prior: tuple[float, float, float] | None = None,
) -> Router:
    """The router for `--routing`; `prior`: the cost router's starting step-time terms."""
    if policy == "cost":
        return CostRouter(replicas, TtftModel(prior or PRIOR))
    if policy == "round-robin":
        return RoundRobinRouter(replicas)
    if policy == "affinity":
        return Router(replicas)
    raise ValueError(
        f"unknown routing policy {policy!r}; choose from {', '.join(ROUTING_POLICIES)}"
    )
