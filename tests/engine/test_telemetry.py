"""Per-minute finish counts (the Metrics reply's `data`): a finish counts in the minute its
time falls in, including on the very edges of a minute."""

from __future__ import annotations

import math

from broker.engine.state.telemetry import MINUTE_MS, MinuteCounts


def counted(*times: float) -> list[int]:
    counts = MinuteCounts()
    for now in times:
        counts.record(now)
    return counts.view(0, -1)["data"]


def test_a_finish_at_the_first_ms_of_a_minute_counts_in_that_minute() -> None:
    assert counted(MINUTE_MS - 1, MINUTE_MS) == [1, 1]  # newest minute first
    assert counted(MINUTE_MS - 0.5, MINUTE_MS, 2 * MINUTE_MS - 0.5) == [2, 1]
    assert counted(MINUTE_MS, MINUTE_MS - 1) == [1, 1]  # a clock stepping back


def test_the_last_finish_is_the_meta_of_its_minute() -> None:
    counts = MinuteCounts()
    for now in (5.0, 7.0, MINUTE_MS + 1, MINUTE_MS + 2, 9.0):
        counts.record(now)
    assert counts.view(0, -1)["meta"] == {"count": 5, "prevTS": 9.0, "prevCount": 3}
    assert counts.view(0, -1)["data"] == [2, 3]


def test_a_batch_of_finishes_counts_each_one() -> None:
    counts = MinuteCounts()
    counts.record(5.0, 3)  # a new minute
    counts.record(6.0, 2)  # the same minute
    counts.record(MINUTE_MS + 1, 4)
    assert counts.view(0, -1) == {
        "meta": {"count": 9, "prevTS": MINUTE_MS + 1, "prevCount": 4},
        "data": [4, 5],
        "count": 2,
    }


def test_a_second_finish_in_the_same_minute_is_the_meta() -> None:
    counts = MinuteCounts()
    counts.record(5.0)
    counts.record(7.0)  # the minute of the last finish: its fast path
    assert counts.view(0, -1)["meta"] == {"count": 2, "prevTS": 7.0, "prevCount": 2}


def test_a_finish_in_the_last_fraction_of_a_minute_counts_in_that_minute() -> None:
    minute = 30_000_000 * MINUTE_MS  # an epoch time in ms, on a minute
    just_before = math.nextafter(minute, 0)  # the float just below it
    assert counted(just_before, minute) == [1, 1]
