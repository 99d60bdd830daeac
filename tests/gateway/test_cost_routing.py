"""The cost router's choices, as a user of the gateway would see them (no engine: the router
alone, fed the first-token times a real engine would give)."""

from __future__ import annotations

from kvwise.gateway.cost_routing import CostRouter, RoundRobinRouter, TtftModel
from kvwise.gateway.replicas import EngineLoad, Replica

# a CPU-like engine: a step costs 30 ms whatever it holds, a prompt token 10 us
CPU_LIKE = (30e-3, 10e-6, 1e-3)


def replicas(n: int, budget: int = 100_000) -> list[Replica]:
    return [Replica(f"r{i}", f"http://r{i}", budget) for i in range(n)]


def route(router: CostRouter, key: str, prompt: int, request_id: int) -> Replica:
    chosen = router.pick(key, prompt + 64, prompt_tokens=prompt, request_id=request_id)
    assert chosen is not None
    chosen.reserve(prompt + 64)
    return chosen


def test_the_replica_holding_the_sessions_prefix_wins_while_its_queue_is_short() -> None:
    router = CostRouter(replicas(2), TtftModel(prior=(7e-3, 2e-5, 20e-6)))
    home = route(router, "session:a", 4000, 1)
    router.first_token(1, 0.1)
    home.release(4064)
    other = next(r for r in router.replicas if r is not home)
    other.reserve(100)  # the other replica is busier, not by much
    # the next turn: 4,000 tokens held on home, 200 new
    assert router.pick("session:a", 4264, prompt_tokens=4200, request_id=2) is home


def test_the_prefix_holder_loses_once_its_queue_costs_more_than_the_cache_saves() -> None:
    router = CostRouter(replicas(2), TtftModel(prior=CPU_LIKE))
    home = route(router, "session:a", 1000, 1)
    router.first_token(1, 0.05)
    home.release(1064)
    # three other sessions' prefills queue on home, none on the other replica
    for rid, key in enumerate(("session:b", "session:c", "session:d"), start=10):
        router.pick(key, 1064, exclude=[r for r in router.replicas if r is not home],
                    prompt_tokens=1000, request_id=rid)  # fmt: skip
    # saving 1,000 tokens (10 ms) does not pay for 3 steps of queue (90 ms)
    chosen = router.pick("session:a", 1264, prompt_tokens=1200, request_id=2)
    assert chosen is not None and chosen is not home


def test_the_engines_own_queue_counts_when_it_is_longer_than_ours() -> None:
    router = CostRouter(replicas(2), TtftModel(prior=CPU_LIKE))
    home = route(router, "session:a", 1000, 1)
    router.first_token(1, 0.05)
    home.release(1064)
    home.load = EngineLoad(0.1, 4, 6, None)  # another client's requests wait there
    chosen = router.pick("session:a", 1264, prompt_tokens=1200, request_id=2)
    assert chosen is not None and chosen is not home


def test_eight_sessions_on_two_replicas_share_the_load_evenly() -> None:
    router = CostRouter(replicas(2), TtftModel(prior=CPU_LIKE))
    placed = {}
    rid = 0
    for turn in range(4):
        for s in range(8):  # every session has a turn in flight at once, as agents do
            rid += 1
            placed[(turn, s)] = route(router, f"session:{s}", 500 + 300 * turn, rid)
        per_replica = [sum(placed[(turn, s)] is r for s in range(8)) for r in router.replicas]
        assert per_replica == [4, 4], (turn, per_replica)
        for s in range(8):
            router.first_token(rid - s, 0.05)
            placed[(turn, s)].release(500 + 300 * turn + 64)


def test_sessions_keep_their_replica_turn_after_turn_when_the_load_is_even() -> None:
    router = CostRouter(replicas(2), TtftModel(prior=CPU_LIKE))
    homes: dict[int, Replica] = {}
    rid = 0
    for turn in range(4):
        chosen = {}
        for s in range(8):
            rid += 1
            chosen[s] = route(router, f"session:{s}", 500 + 300 * turn, rid)
        if turn:
            assert chosen == homes  # affinity kept: it pays while the queues are even
        homes = chosen
        for s in range(8):
            router.first_token(rid - s, 0.05)
            chosen[s].release(500 + 300 * turn + 64)


def test_measured_first_tokens_replace_the_prior() -> None:
    """Given a prior that prices a step like a GPU, first tokens measured on a slow-stepping
    engine teach the router that queueing costs more than prefilling there."""
    model = TtftModel(prior=(7e-3, 2e-5, 20e-6))
    for i in range(200):
        steps, tokens = 1 + i % 4, 200 + 37 * (i % 11)
        model.measure((steps, tokens, 0.0), 0.030 * steps + 10e-6 * tokens)
    step_s, token_s, _ = model.coefficients
    assert abs(step_s - 0.030) < 0.003 and abs(token_s - 10e-6) < 5e-6


def test_round_robin_alternates() -> None:
    router = RoundRobinRouter(replicas(2))
    picks = [router.pick("session:a", 100) for _ in range(4)]
    assert picks == [router.replicas[0], router.replicas[1]] * 2
