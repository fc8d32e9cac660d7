"""The broker's own histograms: what `/metrics` shows of job latencies and pass sizes."""

from __future__ import annotations

import bisect

from broker.services.metrics import FOLD_AT, LATENCY_BUCKETS, PASS_BUCKETS, FastHistogram, Metrics


def test_a_duration_in_ms_is_counted_in_seconds_and_a_negative_one_as_zero() -> None:
    histogram = FastHistogram("h", "a histogram", LATENCY_BUCKETS, per_second=1000)
    histogram.record(1500)  # 1.5 s: in the (1, 5] bucket
    histogram.record(-20)  # a clock step back: 0 s, in the first bucket
    assert histogram.total == 1.5
    assert histogram.counts[LATENCY_BUCKETS.index(5)] == 1
    assert histogram.counts[0] == 1
    assert sum(histogram.counts) == 2


def test_values_on_a_bound_and_between_bounds_land_where_one_at_a_time_would_put_them() -> None:
    histogram = FastHistogram("h", "a histogram", LATENCY_BUCKETS, per_second=1000)
    values = [0, 1, 1.0001, 5, 10, 49.9, 50, 100, 999, 1000, 1001, 3_600_000, 3_600_001, 7e9]
    expected = [0] * (len(LATENCY_BUCKETS) + 1)
    for value in reversed(values):  # recorded out of order: folding sorts them
        histogram.record(value)
        expected[bisect.bisect_left(LATENCY_BUCKETS, max(value, 0) / 1000)] += 1
    assert histogram.counts == expected
    assert expected[0] == 2 and expected[1] == 2  # 0 and 1 ms in the first, 5 ms in (1, 5] ms
    assert expected[-1] == 2  # above an hour
    assert abs(histogram.total - sum(values) / 1000) < 1e-6


def test_values_recorded_after_a_read_add_to_the_counts_already_made() -> None:
    histogram = FastHistogram("h", "a histogram", PASS_BUCKETS)
    histogram.record(3)
    assert histogram.counts[PASS_BUCKETS.index(5)] == 1
    histogram.record(4)
    histogram.record(2000)
    assert histogram.counts[PASS_BUCKETS.index(5)] == 2
    assert histogram.counts[-1] == 1
    assert histogram.total == 2007
    family = histogram.family()
    buckets = {s.labels["le"]: s.value for s in family.samples if s.name.endswith("_bucket")}
    assert buckets["5.0"] == 2 and buckets["+Inf"] == 3  # cumulative, as Prometheus wants


def test_uncounted_values_stay_bounded_between_passes() -> None:
    metrics = Metrics(state=None, connections=lambda: 0)
    for _ in range(FOLD_AT + 10):
        metrics.push_to_start.record(2.0)  # a pass that started many jobs
    metrics.after_pass(FOLD_AT + 10)
    assert len(metrics.push_to_start.backlog) == 0  # counted after the pass
    assert metrics.push_to_start.counts[LATENCY_BUCKETS.index(0.005)] == FOLD_AT + 10
    metrics.processing.record(1.0)
    metrics.after_pass(1)
    assert len(metrics.processing.backlog) == 1  # a few wait for the next read
    assert metrics.pass_commands.counts[PASS_BUCKETS.index(1)] == 1
