"""Queue, dead-letter and monitoring commands for operators."""

from __future__ import annotations

import math
from typing import Any

import msgspec

from .commands import Command, QueueQuery
from .errors import CommandError
from .fields import ABSENT, Checked
from .values import at_least, finite, optional_str, queue_name, required_str

JOB_STATES = ("waiting", "prioritized", "delayed", "active", "completed", "failed",
              "waiting-children")  # fmt: skip
LIST_STATES = (*JOB_STATES, "paused")
CLEAN_STATES = ("waiting", "wait", "delayed", "prioritized", "paused", "completed", "failed")


def whole(value: Any, field: str, default: int, minimum: int = 0) -> int:
    """An optional whole number (fractions round down) of at least `minimum`."""
    if value is None:
        return default
    return math.floor(at_least(finite(value, field), minimum, field))


class Pause(QueueQuery, tag="Pause"):
    """Stop handing out the queue's jobs (pushes still land)."""


class Resume(QueueQuery, tag="Resume"):
    """Hand out the queue's jobs again."""


class IsPaused(QueueQuery, tag="IsPaused"):
    """Whether the queue is paused."""


class Drain(QueueQuery, tag="Drain"):
    """Remove every job of the queue that waits to run (waiting, prioritized, delayed)."""


class Obliterate(QueueQuery, tag="Obliterate"):
    """Remove the queue: every job in any state, and its settings."""


class ListQueues(Command, tag="ListQueues"):
    """The names of the queues the broker knows."""


class Clean(QueueQuery, tag="Clean"):
    """Remove jobs older than `grace` ms in a state (queued by default), at most `limit`."""

    grace: Checked[int] = ABSENT
    state: Checked[str | None] = None
    limit: Checked[int] = ABSENT

    def __post_init__(self) -> None:
        super().__post_init__()
        self.grace = whole(self.grace, "grace", 0)
        self.limit = whole(self.limit, "limit", 1000)
        if self.state is not None and self.state not in CLEAN_STATES:
            raise CommandError(f"state must be one of {', '.join(CLEAN_STATES)}")


class GetJobs(QueueQuery, tag="GetJobs"):
    """A page of the queue's jobs in some states, oldest first."""

    state: Checked[list[str]] = ABSENT
    limit: Checked[int] = ABSENT
    offset: Checked[int] = ABSENT
    explicit: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        states = [self.state] if isinstance(self.state, str) else self.state
        # Only states asked for by name list a paused queue's ready jobs as `paused` (and not
        # as waiting/prioritized), as in the reference.
        self.explicit = states is not None
        if states is None:
            states = list(JOB_STATES)
        if not isinstance(states, list) or not all(s in LIST_STATES for s in states):
            raise CommandError(f"state must be one of {', '.join(LIST_STATES)}")
        self.state = states
        self.limit = whole(self.limit, "limit", 100)
        self.offset = whole(self.offset, "offset", 0)


class GetCountsPerPriority(QueueQuery, tag="GetCountsPerPriority"):
    """How many queued jobs wait at each priority."""


class GetJobByCustomId(Command, tag="GetJobByCustomId"):
    """A job by the custom id it was pushed with."""

    customId: Checked[str] = ABSENT

    def __post_init__(self) -> None:
        self.customId = required_str(self.customId, "customId")


class Dlq(QueueQuery, tag="Dlq"):
    """The queue's failed jobs, oldest first (the first `count`)."""

    count: Checked[int] = ABSENT

    def __post_init__(self) -> None:
        super().__post_init__()
        self.count = whole(self.count, "count", 100)


class RetryDlq(QueueQuery, tag="RetryDlq"):
    """Retry one failed job (`jobId`) or all of them, with a fresh attempt budget."""

    jobId: Checked[str | None] = None

    def __post_init__(self) -> None:
        super().__post_init__()
        self.jobId = optional_str(self.jobId, "jobId")


class PurgeDlq(QueueQuery, tag="PurgeDlq"):
    """Delete the queue's failed jobs."""


class RetryCompleted(QueueQuery, tag="RetryCompleted"):
    """Run one completed job (`id`) or all of them again."""

    id: Checked[str | None] = None

    def __post_init__(self) -> None:
        super().__post_init__()
        self.id = optional_str(self.id, "id")


class QueueLimit(QueueQuery):
    """A command that sets a per-queue limit (a positive whole number)."""

    limit: Checked[int] = ABSENT

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.limit is None:
            raise CommandError("limit is required")
        try:
            self.limit = whole(self.limit, "limit", 0, minimum=1)
        except CommandError as exc:
            if str(exc) == "limit must be a number":  # in the reference's words
                raise CommandError("limit must be a finite number") from None
            raise


class RateLimit(QueueLimit, tag="RateLimit"):
    """At most `limit` jobs of the queue start per second."""


class RateLimitClear(QueueQuery, tag="RateLimitClear"):
    """Remove the queue's rate limit."""


class SetConcurrency(QueueLimit, tag="SetConcurrency"):
    """At most `limit` jobs of the queue are active at once."""


class ClearConcurrency(QueueQuery, tag="ClearConcurrency"):
    """Remove the queue's concurrency limit."""


STALL_KEYS = {"enabled": bool, "stallInterval": float, "maxStalls": int, "gracePeriod": float}
DLQ_KEYS = {"autoRetry": bool, "autoRetryInterval": float, "maxAutoRetries": int,
            "maxAge": float, "maxEntries": int}  # fmt: skip


def config_of(value: Any, keys: dict[str, type]) -> dict[str, Any]:
    """Validate a partial settings object against the known keys and their kinds."""
    if not isinstance(value, dict):
        raise CommandError("config must be an object")
    config: dict[str, Any] = {}
    for key, item in value.items():
        kind = keys.get(key)
        if kind is None:
            raise CommandError(f"unknown config key: {key}")
        if kind is bool:
            if not isinstance(item, bool):
                raise CommandError(f"config.{key} must be a boolean")
            config[key] = item
        else:
            number = at_least(finite(item, f"config.{key}"), 0, f"config.{key}")
            config[key] = math.floor(number) if kind is int else number
    return config


def dlq_config_of(value: Any) -> dict[str, Any]:
    """Validate partial dead-letter settings (`maxAge: null` means no age cap)."""
    no_age_cap = isinstance(value, dict) and "maxAge" in value and value["maxAge"] is None
    if no_age_cap:
        value = {key: item for key, item in value.items() if key != "maxAge"}
    config = config_of(value, DLQ_KEYS)
    if no_age_cap:
        config["maxAge"] = None
    if config.get("maxEntries") == 0:
        raise CommandError("config.maxEntries must be at least 1")
    return config


class SetStallConfig(QueueQuery, tag="SetStallConfig"):
    """Merge stall-detection settings into the queue's."""

    config: Checked[dict[str, Any]] = ABSENT

    def __post_init__(self) -> None:
        super().__post_init__()
        self.config = config_of(self.config, STALL_KEYS)


class GetStallConfig(QueueQuery, tag="GetStallConfig"):
    """The queue's stall-detection settings."""


class SetDlqConfig(QueueQuery, tag="SetDlqConfig"):
    """Merge dead-letter settings into the queue's; `maxAge: null` lifts the queue's age cap."""

    config: Checked[dict[str, Any]] = ABSENT

    def __post_init__(self) -> None:
        super().__post_init__()
        self.config = dlq_config_of(self.config)


class GetDlqConfig(QueueQuery, tag="GetDlqConfig"):
    """The queue's dead-letter settings."""


class Stats(Command, tag="Stats"):
    """Broker-wide job counts and rates."""


METRIC_TYPES = ("completed", "failed")


def whole_at_least(value: Any, field: str, default: int, minimum: int) -> int:
    """An optional whole number of at least `minimum` (the reference refuses fractions)."""
    if value is None:
        return default
    number = finite(value, field)
    if number != math.floor(number) or number < minimum:
        raise CommandError(f"{field} must be a non-negative safe integer")
    return int(number)


class Metrics(Command, tag="Metrics"):
    """Broker-wide totals; with a `queue` (or a `type`), that queue's per-minute counts of
    completed or failed jobs, newest minute first, entries `start`..`end` (-1: all)."""

    queue: Checked[str | None] = None
    type: Checked[str | None] = None
    start: Checked[int] = ABSENT
    end: Checked[int] = ABSENT

    def __post_init__(self) -> None:
        if self.queue is None and self.type is None:
            return
        if self.queue is None:
            raise CommandError("Metrics queue is required")
        self.queue = queue_name(self.queue)
        if self.type not in METRIC_TYPES:
            raise CommandError("Metrics type must be 'completed' or 'failed'")
        self.start = whole_at_least(self.start, "start", 0, 0)
        self.end = -1 if self.end == -1 else whole_at_least(self.end, "end", -1, 0)


class Prometheus(Command, tag="Prometheus"):
    """The Prometheus text exposition, over the protocol."""


class TrimEvents(QueueQuery, tag="TrimEvents"):
    """Trim the queue's stored event journal to its newest `maxLength` events."""

    maxLength: Checked[int] = ABSENT

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.maxLength is None:
            raise CommandError("maxLength must be a non-negative safe integer")
        self.maxLength = whole_at_least(self.maxLength, "maxLength", 0, 0)


class StorageStatus(Command, tag="StorageStatus"):
    """Whether the store is healthy."""


ADMIN_COMMANDS: tuple[type[msgspec.Struct], ...] = (
    Pause, Resume, IsPaused, Drain, Obliterate, ListQueues, Clean, GetJobs,
    GetCountsPerPriority, GetJobByCustomId, Dlq, RetryDlq, PurgeDlq, RetryCompleted, RateLimit,
    RateLimitClear, SetConcurrency, ClearConcurrency, SetStallConfig, GetStallConfig,
    SetDlqConfig, GetDlqConfig, Stats, Metrics, StorageStatus, Prometheus, TrimEvents,
)  # fmt: skip
