from __future__ import annotations

from kvwise.gateway.replicas import Replica
from kvwise.gateway.routing import Router


def replicas(n: int, budget: int = 10_000) -> list[Replica]:
    return [Replica(f"r{i}", f"http://r{i}", budget) for i in range(n)]


def test_a_key_keeps_its_replica_and_keys_spread_over_all() -> None:
    router = Router(replicas(3))
    owners = {key: router.pick(f"session:{key}", 100) for key in range(300)}
    assert all(router.pick(f"session:{key}", 100) is owner for key, owner in owners.items())
    counts = [sum(owner is r for owner in owners.values()) for r in router.replicas]
    assert min(counts) > 60  # ~100 each out of 300


def test_only_the_keys_of_a_vanished_replica_move() -> None:
    router = Router(replicas(3))
    before = {key: router.pick(f"session:{key}", 100) for key in range(300)}
    router.replicas[1].is_healthy = False
    after = {key: router.pick(f"session:{key}", 100) for key in range(300)}
    moved = [key for key in before if before[key] is not after[key]]
    assert moved and all(before[key] is router.replicas[1] for key in moved)


def test_a_hot_key_spills_over_once_its_replica_is_well_above_the_mean() -> None:
    router = Router(replicas(2))
    home = router.pick("session:hot", 100)
    assert home is not None
    other = next(r for r in router.replicas if r is not home)
    picks = []
    for _ in range(6):
        chosen = router.pick("session:hot", 100)
        assert chosen is not None
        chosen.reserve(100)
        picks.append(chosen)
    # home takes it while within (1.25 x mean + one request), then the other replica helps
    assert picks[:2] == [home, home]
    assert other in picks
    assert abs(home.reserved_tokens - other.reserved_tokens) <= 200


def test_no_replica_when_none_has_room() -> None:
    router = Router(replicas(2, budget=100))
    for replica in router.replicas:
        replica.reserve(100)
    assert router.pick("session:x", 1) is None
    assert router.pick("session:x", 1, exclude=[router.replicas[0]]) is None
