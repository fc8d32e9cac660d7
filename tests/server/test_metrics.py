"""The broker's own histograms: what `/metrics` shows of job latencies."""

from __future__ import annotations

from broker.metrics import LATENCY_BUCKETS, FastHistogram


def test_a_duration_in_ms_is_counted_in_seconds_and_a_negative_one_as_zero() -> None:
    histogram = FastHistogram("h", "a histogram", LATENCY_BUCKETS)
    histogram.observe_ms(1500)  # 1.5 s: in the (1, 5] bucket
    histogram.observe_ms(-20)  # a clock step back: 0 s, in the first bucket
    assert histogram.total == 1.5
    assert histogram.counts[LATENCY_BUCKETS.index(5)] == 1
    assert histogram.counts[0] == 1
    assert sum(histogram.counts) == 2


def test_a_batch_of_durations_counts_as_each_one_would() -> None:
    one_by_one = FastHistogram("h", "a histogram", LATENCY_BUCKETS)
    batched = FastHistogram("h", "a histogram", LATENCY_BUCKETS)
    durations = [1500, -20, 0.1, 0.2, 0.3, 7_000, 0]
    for histogram in (one_by_one, batched):
        histogram.observe_ms(2.5)
    for took_ms in durations:
        one_by_one.observe_ms(took_ms)
    batched.observe_all_ms(durations)
    assert batched.counts == one_by_one.counts
    assert sum(batched.counts) == 8 and batched.counts[LATENCY_BUCKETS.index(10)] == 1
    assert batched.total == one_by_one.total  # the same additions, in the same order
