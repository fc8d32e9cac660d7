"""Job options: the keyword arguments of `Queue.add` and how they go on the wire.

Durations are milliseconds, as on the wire, and say so in their names (`delay_ms`); the
structured options (`Backoff`, `Dedup`, `Repeat`) are msgspec Structs that encode straight
to the broker's keys.
"""

from __future__ import annotations

from typing import Any, Literal, TypedDict

import msgspec

_BACKOFF_NAMES = {"delay_ms": "delay", "max_delay_ms": "maxDelay"}


class Backoff(msgspec.Struct, omit_defaults=True, rename=_BACKOFF_NAMES):
    """How long to wait before a retry: `delay_ms` doubled per attempt (exponential) or
    always the same (fixed), capped at `max_delay_ms` (default 1 hour)."""

    type: Literal["exponential", "fixed"] = "exponential"
    delay_ms: float = 1000
    max_delay_ms: float | None = None


class Dedup(msgspec.Struct, omit_defaults=True, rename={"ttl_ms": "ttl"}):
    """Options of `unique_key`: how long the key holds (`ttl_ms`), whether a duplicate
    restarts that window (`extend`) or replaces a job that has not started (`replace`)."""

    ttl_ms: float | None = None
    extend: bool = False
    replace: bool = False


class Repeat(msgspec.Struct, omit_defaults=True, rename={
    "every_ms": "every", "start_date_ms": "startDate", "end_date_ms": "endDate"}):  # fmt: skip
    """Make a job recur: every `every_ms` or on a cron `pattern` (in time zone `tz`), at most
    `limit` times, between `start_date_ms` and `end_date_ms` (epoch milliseconds)."""

    every_ms: float | None = None
    pattern: str | None = None
    limit: int | None = None
    tz: str | None = None
    start_date_ms: float | None = None
    end_date_ms: float | None = None
    immediately: bool | None = None


class JobOptions(TypedDict, total=False):
    """Every option a job can be added with (all optional)."""

    attempts: int
    """Tries before the job fails for good (default 3)."""
    delay_ms: float
    """Wait this long before the job may run."""
    priority: float
    """Higher runs first (with `group_id`: 0 first, within the group)."""
    backoff_ms: float | Backoff
    """Base wait before a retry (exponential), or a Backoff."""
    ttl_ms: float
    """Drop the job if it has not started this long after it was added."""
    timeout_ms: float
    """Fail an attempt that runs longer than this."""
    job_id: str
    """A custom id: adding the same id again returns the existing job."""
    unique_key: str
    """Deduplication key: while a job holds it, adds with the same key return that job."""
    dedup: Dedup
    depends_on: list[str]
    """Ids of jobs that must complete before this one runs."""
    tags: list[str]
    group_id: str
    group_max_size: int
    lifo: bool
    remove_on_complete: bool
    remove_on_fail: bool
    durable: bool
    """Commit with fsync before `add()` returns (SQLite `synchronous=FULL`)."""
    repeat: Repeat
    parent_id: str
    fail_parent_on_failure: bool
    remove_dependency_on_failure: bool
    ignore_dependency_on_failure: bool
    continue_parent_on_failure: bool
    stall_timeout_ms: float
    stack_trace_limit: int
    keep_logs: int
    size_limit: int
    debounce_id: str
    debounce_ttl_ms: float
    timestamp_ms: float
    """The job's creation time (epoch milliseconds) instead of now."""


WIRE_NAMES: dict[str, str] = {
    "attempts": "maxAttempts",
    "delay_ms": "delay",
    "priority": "priority",
    "backoff_ms": "backoff",
    "ttl_ms": "ttl",
    "timeout_ms": "timeout",
    "job_id": "customId",  # PUSHB's name for PUSH's `jobId`
    "unique_key": "uniqueKey",
    "dedup": "dedup",
    "depends_on": "dependsOn",
    "tags": "tags",
    "group_id": "groupId",
    "group_max_size": "groupMaxSize",
    "lifo": "lifo",
    "remove_on_complete": "removeOnComplete",
    "remove_on_fail": "removeOnFail",
    "durable": "durable",
    "repeat": "repeat",
    "parent_id": "parentId",
    "fail_parent_on_failure": "failParentOnFailure",
    "remove_dependency_on_failure": "removeDependencyOnFailure",
    "ignore_dependency_on_failure": "ignoreDependencyOnFailure",
    "continue_parent_on_failure": "continueParentOnFailure",
    "stall_timeout_ms": "stallTimeout",
    "stack_trace_limit": "stackTraceLimit",
    "keep_logs": "keepLogs",
    "size_limit": "sizeLimit",
    "debounce_id": "debounceId",
    "debounce_ttl_ms": "debounceTtl",
    "timestamp_ms": "timestamp",
}


def wire_options(options: JobOptions | dict[str, Any], item: dict[str, Any]) -> dict[str, Any]:
    """Add `options` to the wire item under the broker's names; unknown names are a
    TypeError, as an unknown keyword argument would be."""
    for key, value in options.items():
        if value is None:
            continue
        try:
            item[WIRE_NAMES[key]] = value
        except KeyError:
            raise TypeError(f"unknown job option {key!r}") from None
    return item
