import math

from kvwise.live.histograms import delta, parse_buckets, quantile


def test_quantile_interpolates_inside_the_bucket_it_falls_in() -> None:
    # 10 observations: 2 under 0.1 s, 8 between 0.1 and 0.5 s
    buckets = {0.1: 2.0, 0.5: 10.0, math.inf: 10.0}
    # the median is the 5th: 3 of the 8 into (0.1, 0.5] -> 0.1 + 0.4 * 3/8 = 0.25
    assert quantile(buckets, 0.5) == 0.25
    assert quantile({0.1: 0.0, math.inf: 0.0}, 0.5) is None


def test_a_quantile_past_the_last_finite_bound_is_that_bound() -> None:
    assert quantile({1.0: 1.0, math.inf: 10.0}, 0.99) == 1.0


def test_the_last_minute_is_the_difference_of_two_scrapes() -> None:
    before = {0.1: 5.0, 1.0: 5.0, math.inf: 5.0}
    after = {0.1: 5.0, 1.0: 9.0, math.inf: 9.0}  # four slow requests since
    window = delta(after, before)
    assert window == {0.1: 0.0, 1.0: 4.0, math.inf: 4.0}
    assert quantile(window, 0.5) == 0.1 + 0.9 * 0.5
    # an engine restarted between the scrapes: its counters start again, all of `after` counts
    assert delta({0.1: 1.0, math.inf: 1.0}, before) == {0.1: 1.0, math.inf: 1.0}


def test_buckets_are_summed_over_engines_and_read_by_name() -> None:
    text = (
        'vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1"} 1.0\n'
        'vllm:time_to_first_token_seconds_bucket{engine="1",le="0.1"} 2.0\n'
        'vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf"} 4.0\n'
        'vllm:other_seconds_bucket{le="0.1"} 7.0\n'
    )
    found = parse_buckets(text, ("vllm:time_to_first_token_seconds",))
    assert found == {"vllm:time_to_first_token_seconds": {0.1: 3.0, math.inf: 4.0}}
