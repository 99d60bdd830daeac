from kvwise.live.window import EngineWindow, parse_sample
from tests.top.metered import engine_text


def test_gauges_are_the_latest_scrape_and_kv_tokens_are_usage_times_the_pool() -> None:
    window = EngineWindow()
    window.add(parse_sample(engine_text(0.25, 40_000, running=3, waiting=2), at_s=0.0))
    figures = window.figures(planned_pool_tokens=50_000)
    assert figures["kv_pool_tokens"] == 40_000
    assert figures["kv_used_tokens"] == 10_000
    assert figures["kv_usage_pct"] == 25.0
    assert (figures["num_requests_running"], figures["num_requests_waiting"]) == (3, 2)
    assert figures["preemptions_per_min"] is None  # one scrape: no window yet


def test_rates_and_percentiles_come_from_the_window() -> None:
    window = EngineWindow(window_s=60)
    window.add(parse_sample(engine_text(0.1, 16_000, 4, (10, 0, 0, 0, 0, 0), 1000), at_s=0.0))
    # 30 s later: 3 more preemptions, 600 more tokens, 10 more first tokens in (0.1, 0.5] s
    after = engine_text(0.1, 16_000, 7, (10, 0, 0, 10, 0, 0), 1600)
    window.add(parse_sample(after, at_s=30.0))
    figures = window.figures(None)
    assert figures["preemptions_per_min"] == 6.0
    assert figures["tokens_per_s"] == 20.0
    # only the last 10 count: the median is halfway into (0.1, 0.5]: 300 ms
    assert figures["ttft_p50_ms"] == 300.0
    assert figures["tpot_p50_ms"] is None  # not exported by this engine


def test_scrapes_older_than_the_window_are_dropped() -> None:
    window = EngineWindow(window_s=60)
    for at_s, preemptions in ((0.0, 0), (50.0, 100), (100.0, 101), (120.0, 102)):
        window.add(parse_sample(engine_text(0.0, 16_000, preemptions), at_s=at_s))
    # the window starts at 50 s (the last scrape at most 60 s before 120 s... and one before)
    figures = window.figures(None)
    assert figures["window_s"] <= 70.0
    assert figures["preemptions_per_min"] is not None and figures["preemptions_per_min"] < 10
