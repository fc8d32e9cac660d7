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
