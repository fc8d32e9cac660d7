"""Schedules as pure functions: cron patterns with time zones and DST, intervals, limits."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from broker.engine.schedule import (
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
