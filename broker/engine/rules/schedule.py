"""When repeating jobs and crons fire: pure functions of a schedule and a time (epoch ms).

Cron patterns go through croniter in the schedule's IANA time zone. Daylight-saving changes
fire each wall-clock time once: a time skipped by the spring change fires at the first moment
after it (croniter's rule), and a time repeated by the autumn change does not fire again
(`next_fire` moves past wall-clock times not later than the previous fire).
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, tzinfo
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterError, croniter


class ScheduleError(ValueError):
    """A pattern or time zone that cannot be used; the text is for the client."""


def zone(name: str | None) -> tzinfo:
    """The IANA zone `name` (UTC when None)."""
    if name is None:
        return UTC
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ScheduleError(f"Invalid timezone: {name}") from None


def check_pattern(pattern: str, tz_name: str | None = None) -> None:
    """Raise ScheduleError unless `pattern` is a cron expression croniter understands."""
    zone(tz_name)
    if not croniter.is_valid(pattern):
        raise ScheduleError(f"Invalid cron expression: {pattern}")


def next_fire(
    pattern: str, tz_name: str | None, after_ms: float, previous_ms: float | None = None
) -> float:
    """The first time strictly after `after_ms` that `pattern` fires, in epoch ms; inf when it
    never fires again (a pattern with a year that has passed)."""
    tz = zone(tz_name)
    start = datetime.fromtimestamp(after_ms / 1000, tz)
    try:
        times = croniter(pattern, start)
        candidate: datetime = times.get_next(datetime)
        if previous_ms is not None:
            fired = datetime.fromtimestamp(previous_ms / 1000, tz).replace(tzinfo=None)
            while candidate.replace(tzinfo=None) <= fired:  # the autumn hour, again
                candidate = times.get_next(datetime)
    except CroniterError:
        return math.inf
    return candidate.timestamp() * 1000


MIN_INTERVAL_MS = 1.0
"""An interval schedule fires at most once a millisecond: a positive `every` below that (the
seed allows any) would otherwise fire again in the same instant, or overflow the arithmetic."""


def next_every(every_ms: float, previous_ms: float, now_ms: float) -> float:
    """The next time of an interval schedule after `previous_ms`, skipping times already past
    (a late worker does not cause a burst), keeping the schedule's phase."""
    every_ms = max(every_ms, MIN_INTERVAL_MS)
    following = previous_ms + every_ms
    if following > now_ms:
        return following
    missed = math.floor((now_ms - previous_ms) / every_ms)
    return previous_ms + (missed + 1) * every_ms


def next_occurrence(repeat: dict[str, Any], previous_ms: float, now_ms: float) -> float | None:
    """When a repeating job's next occurrence runs, or None when the schedule is over
    (`limit` occurrences made, or past `endDate`)."""
    limit = repeat.get("limit")
    if limit is not None and repeat.get("count", 0) + 1 >= limit:
        return None
    if repeat.get("pattern") is not None:
        after = max(previous_ms, now_ms)
        run_at = next_fire(repeat["pattern"], repeat.get("tz"), after, previous_ms)
    elif repeat.get("every") is not None:
        run_at = next_every(repeat["every"], previous_ms, now_ms)
    else:
        return None
    start = repeat.get("startDate")
    if start is not None and run_at < start:
        return first_occurrence({**repeat, "immediately": False}, start)
    return _before_end(repeat, run_at)


def first_occurrence(repeat: dict[str, Any], from_ms: float) -> float | None:
    """When a repeating job's first occurrence runs: at once with `immediately` or for an
    interval, else the first fire of its pattern; never before `startDate`."""
    start = max(from_ms, repeat.get("startDate") or from_ms)
    run_at = start
    if repeat.get("pattern") is not None and not repeat.get("immediately"):
        run_at = next_fire(repeat["pattern"], repeat.get("tz"), start - 1)
    return _before_end(repeat, run_at)


def _before_end(repeat: dict[str, Any], run_at: float) -> float | None:
    end = repeat.get("endDate")
    if math.isinf(run_at) or (end is not None and run_at > end):
        return None
    return run_at
