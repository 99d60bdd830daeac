from kvwise.live.plan_check import departures


def test_a_pool_more_than_5_percent_short_is_said_with_both_figures() -> None:
    lines = departures([{"name": "r0", "kv_pool_tokens": 90_000, "planned_pool_tokens": 100_000}])
    assert len(lines) == 1
    assert "90,000" in lines[0] and "100,000" in lines[0] and "10 %" in lines[0]
    assert "kvwise calibrate" in lines[0]


def test_a_pool_within_5_percent_or_larger_is_no_departure() -> None:
    replicas = [
        {"name": "a", "kv_pool_tokens": 96_000, "planned_pool_tokens": 100_000},
        {"name": "b", "kv_pool_tokens": 120_000, "planned_pool_tokens": 100_000},
        {"name": "c", "kv_pool_tokens": 50_000, "planned_pool_tokens": None},
    ]
    assert departures(replicas) == []


def test_preemptions_under_a_plan_are_a_departure() -> None:
    replica = {"name": "r1", "planned_pool_tokens": 10_000, "kv_pool_tokens": 10_000,
               "preemptions_per_min": 4.0, "window_s": 30.0}  # fmt: skip
    (line,) = departures([replica])
    assert "r1" in line and "4 preemptions/min" in line and "kvwise calibrate" in line
    assert departures([{**replica, "preemptions_per_min": 0.0}]) == []
