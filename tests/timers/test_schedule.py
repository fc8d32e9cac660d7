"""Schedules as pure functions: cron patterns with time zones and DST, intervals, limits."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from broker.engine.rules.schedule import (
    ScheduleError,
    check_pattern,
    first_occurrence,
    next_every,
    next_fire,
    next_occurrence,
)

BERLIN = ZoneInfo("Europe/Berlin")


def ms(*parts: int, tz=UTC) -> float:
    return datetime(*parts, tzinfo=tz).timestamp() * 1000


def local(epoch_ms: float, tz=BERLIN) -> str:
    return datetime.fromtimestamp(epoch_ms / 1000, tz).strftime("%Y-%m-%d %H:%M %z")


@pytest.mark.parametrize(
    ("pattern", "tz", "after", "expected"),
    [
        ("*/5 * * * *", None, ms(2026, 1, 1, 10, 2), ms(2026, 1, 1, 10, 5)),
        (
            "0 9 * * *",
            "Europe/Berlin",
            ms(2026, 1, 1, 9, 0, tz=BERLIN),
            ms(2026, 1, 2, 9, 0, tz=BERLIN),
        ),
        ("0 9 * * 1", None, ms(2026, 11, 29, 0, 0), ms(2026, 11, 30, 9, 0)),  # next Monday
        ("@daily", None, ms(2026, 1, 1, 0, 0), ms(2026, 1, 2, 0, 0)),
    ],
)
def test_next_fire(pattern: str, tz: str | None, after: float, expected: float) -> None:
    assert next_fire(pattern, tz, after) == expected


def test_spring_forward_fires_once_at_the_first_moment_after() -> None:
    after = ms(2026, 3, 28, 12, 0, tz=BERLIN)
    fired = next_fire("30 2 * * *", "Europe/Berlin", after)
    assert local(fired) == "2026-03-29 03:00 +0200"
    assert local(next_fire("30 2 * * *", "Europe/Berlin", fired, fired)) == "2026-03-30 02:30 +0200"


def test_autumn_repeated_hour_does_not_fire_twice() -> None:
    first = next_fire("30 2 * * *", "Europe/Berlin", ms(2026, 10, 24, 12, 0, tz=BERLIN))
    assert local(first) == "2026-10-25 02:30 +0200"
    second = next_fire("30 2 * * *", "Europe/Berlin", first, first)
    assert local(second) == "2026-10-26 02:30 +0100"


def test_autumn_half_hours_fire_each_wall_clock_time_once() -> None:
    fired = [ms(2026, 10, 25, 1, 0, tz=BERLIN)]
    for _ in range(4):
        fired.append(next_fire("*/30 * * * *", "Europe/Berlin", fired[-1], fired[-1]))
    assert [local(t)[11:] for t in fired[1:]] == [
        "01:30 +0200", "02:00 +0200", "02:30 +0200", "03:00 +0100",
    ]  # fmt: skip


def test_bad_patterns_and_zones_are_refused() -> None:
    with pytest.raises(ScheduleError, match="Invalid cron expression: nope"):
        check_pattern("nope")
    with pytest.raises(ScheduleError, match="Invalid timezone: Mars/Base"):
        check_pattern("* * * * *", "Mars/Base")


def test_intervals_skip_missed_times_and_keep_their_phase() -> None:
    assert next_every(1000, 5000, 5500) == 6000
    assert next_every(1000, 5000, 9300) == 10_000


def test_limit_start_and_end() -> None:
    repeat = {"every": 1000, "limit": 3, "count": 1}
    assert next_occurrence(repeat, 5000, 5000) == 6000
    assert next_occurrence({**repeat, "count": 2}, 5000, 5000) is None
    assert next_occurrence({"every": 1000, "endDate": 5500}, 5000, 5000) is None
    assert first_occurrence({"every": 1000, "startDate": 9000}, 5000) == 9000
    cron = {"pattern": "0 * * * *"}
    assert first_occurrence(cron, ms(2026, 1, 1, 10, 1)) == ms(2026, 1, 1, 11, 0)
    assert first_occurrence({**cron, "immediately": True}, 1234) == 1234


def test_an_interval_below_a_millisecond_runs_at_most_once_a_millisecond() -> None:
    # 5e-324 ms passed validation (it is positive) and overflowed the arithmetic, which stopped
    # the broker at the timer and again at every restart.
    assert next_every(5e-324, 5000, 9300) == 9301
    assert next_every(1e-300, 5000, 5000) == 5001


def test_an_interval_time_equal_to_now_is_already_past() -> None:
    assert next_every(1000, 5000, 6000) == 7000
    assert next_every(1000, 5000, 5999) == 6000


def test_a_pattern_whose_last_year_has_passed_never_fires_again() -> None:
    assert next_fire("0 0 1 1 * 0 2020", None, ms(2026, 1, 1, 0, 0)) == float("inf")
    now = ms(2026, 1, 1, 0, 0)
    assert next_occurrence({"pattern": "0 0 1 1 * 0 2020"}, now, now) is None
    assert first_occurrence({"pattern": "0 0 1 1 * 0 2020"}, now) is None


def test_a_limit_counts_the_occurrences_made_from_none() -> None:
    # A repeat's first occurrence carries no count: it is the first of `limit`.
    assert next_occurrence({"every": 1000, "limit": 2}, 5000, 5000) == 6000
    assert next_occurrence({"every": 1000, "limit": 1}, 5000, 5000) is None


def test_a_pattern_runs_next_after_now_when_the_previous_run_is_long_past() -> None:
    previous, now = ms(2026, 1, 1, 10, 0), ms(2026, 1, 1, 13, 20)
    assert next_occurrence({"pattern": "0 * * * *"}, previous, now) == ms(2026, 1, 1, 14, 0)
    # ...and after the previous run when that is later than now (a job started early)
    assert next_occurrence({"pattern": "0 * * * *"}, now, previous) == ms(2026, 1, 1, 14, 0)


def test_a_schedule_without_pattern_or_interval_has_no_next_occurrence() -> None:
    assert next_occurrence({"limit": 5}, 5000, 5000) is None


def test_an_occurrence_before_the_start_date_moves_to_the_start() -> None:
    cron = {"pattern": "0 * * * *", "startDate": ms(2026, 1, 1, 15, 30), "immediately": True}
    assert next_occurrence(cron, ms(2026, 1, 1, 10, 0), ms(2026, 1, 1, 10, 0)) == ms(
        2026, 1, 1, 16, 0
    )
    interval = {"every": 1000, "startDate": 9000}
    assert next_occurrence(interval, 5000, 5000) == 9000
    assert next_occurrence({**interval, "startDate": 6000}, 5000, 5000) == 6000


def test_an_occurrence_at_the_end_date_still_runs() -> None:
    assert next_occurrence({"every": 1000, "endDate": 6000}, 5000, 5000) == 6000
    assert next_occurrence({"every": 1000, "endDate": 5999}, 5000, 5000) is None
    assert first_occurrence({"every": 1000, "endDate": 5000}, 5000) == 5000


def test_the_first_occurrence_of_a_pattern_may_be_at_its_start() -> None:
    on_the_hour = ms(2026, 1, 1, 10, 0)
    assert first_occurrence({"pattern": "0 * * * *"}, on_the_hour) == on_the_hour
    assert first_occurrence({"pattern": "0 * * * *", "startDate": on_the_hour}, 0) == on_the_hour
    assert first_occurrence({"every": 1000, "startDate": None}, 1234) == 1234


def test_an_interval_started_early_keeps_its_schedule() -> None:
    # A delayed occurrence promoted before its time: the next one is still an interval after
    # the time it was scheduled for, not at that time again.
    assert next_every(1000, 5000, 4500) == 6000
    assert next_every(1000, 5000, 2000) == 6000


def test_the_first_occurrence_of_a_pattern_is_never_before_its_start() -> None:
    just_after = ms(2026, 1, 1, 10, 0) + 1
    assert first_occurrence({"pattern": "0 * * * *"}, just_after) == ms(2026, 1, 1, 11, 0)
