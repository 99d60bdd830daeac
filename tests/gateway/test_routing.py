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


def test_keys_routed_before_a_join_or_a_drain_follow_the_new_ring() -> None:
    """The router remembers each key's ring order: a replica that joins must take its share
    of keys already routed, and a drained one must lose all of its keys."""
    pool = replicas(3)
    router = Router(pool[:2])
    before = {key: router.pick(f"session:{key}", 100) for key in range(300)}
    router.rebuild(pool)  # r2 joins
    joined = {key: router.pick(f"session:{key}", 100) for key in range(300)}
    moved = [key for key in before if before[key] is not joined[key]]
    assert len(moved) > 60 and all(joined[key] is pool[2] for key in moved)  # ~100 of 300
    pool[0].is_draining = True
    router.rebuild(pool)
    drained = {key: router.pick(f"session:{key}", 100) for key in range(300)}
    assert not any(owner is pool[0] for owner in drained.values())
    kept = [key for key in joined if joined[key] is not pool[0]]
    assert all(drained[key] is joined[key] for key in kept)


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
